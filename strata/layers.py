"""The names every package agrees on: the four memory layers, the retrieval paths
and the roles of a message.

Each list is written once, as a ``Literal`` (for type checking and the HTTP
schema) with the tuple of its values beside it (for validation and loops).
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["LAYERS", "RETRIEVAL_PATHS", "Layer", "RetrievalPath", "Role"]

Layer = Literal["working", "episodic", "semantic", "procedural"]
#: The layers in the order they are read and reported.
LAYERS: tuple[Layer, ...] = get_args(Layer)

#: dense = vector search, lexical = BM25, graph = the entities a query names.
RetrievalPath = Literal["dense", "lexical", "graph"]
RETRIEVAL_PATHS: tuple[RetrievalPath, ...] = get_args(RetrievalPath)

#: Who wrote a message or a working-memory item, as in the OpenAI chat format.
Role = Literal["system", "user", "assistant", "tool"]
