"""What several layers use to find things: exact vector search
(:mod:`~strata.retrieval.vectors`), BM25 and rank fusion (:mod:`~strata.retrieval.lexical`,
over the terms of :mod:`~strata.retrieval.terms`), the knowledge graph
(:mod:`~strata.retrieval.graph`, reading queries through :mod:`~strata.retrieval.entity_match`)
and the entity extractors that feed it
(:mod:`~strata.retrieval.entities`), and time ranges read off a query
(:mod:`~strata.retrieval.timeparse`).
"""

from __future__ import annotations

from strata.retrieval.entities import EntityExtractor, Extraction, LLMExtractor, RuleExtractor, make_extractor
from strata.retrieval.graph import KnowledgeGraph
from strata.retrieval.lexical import LexicalIndex, language_weights, rrf_fuse, score_fuse
from strata.retrieval.terms import extract_terms
from strata.retrieval.timeparse import TimeRange, resolve_time_range, strip_time_expression
from strata.retrieval.vectors import VectorIndex, best

__all__ = [
    "EntityExtractor",
    "Extraction",
    "KnowledgeGraph",
    "LLMExtractor",
    "LexicalIndex",
    "RuleExtractor",
    "TimeRange",
    "VectorIndex",
    "best",
    "extract_terms",
    "language_weights",
    "make_extractor",
    "resolve_time_range",
    "rrf_fuse",
    "score_fuse",
    "strip_time_expression",
]
