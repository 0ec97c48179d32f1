"""The semantic layer: documents, cut into parents and children, found by dense,
lexical and graph paths fused by weighted RRF.

:class:`SemanticMemory` (in :mod:`~strata.semantic.memory`) owns the durable rows
and the in-memory indexes; the documents, passages and hits are in
:mod:`~strata.semantic.documents`; the chunking strategies in
:mod:`~strata.semantic.chunking`, over the cutting machinery of
:mod:`~strata.semantic.cutting`.
"""

from __future__ import annotations

from strata.semantic.chunking import STRATEGIES, Chunk, Chunker, ChunkTree, make_chunker
from strata.semantic.documents import Document, DocumentInput, PreparedDocument, SemanticHit
from strata.semantic.memory import SemanticMemory

__all__ = [
    "STRATEGIES",
    "Chunk",
    "ChunkTree",
    "Chunker",
    "Document",
    "DocumentInput",
    "PreparedDocument",
    "SemanticHit",
    "SemanticMemory",
    "make_chunker",
]
