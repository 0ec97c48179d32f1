"""The models Strata calls, one narrow interface each: the embedder
(:mod:`~strata.providers.embedder`), the LLM (:mod:`~strata.providers.llm`) and the
token counter (:mod:`~strata.providers.tokens`), each with a ``make_*`` that builds
the configured provider.
"""

from __future__ import annotations

from strata.providers.embedder import (
    E5Embedder,
    Embedder,
    OnnxMiniLMEmbedder,
    OpenAIEmbedder,
    embedding_dim,
    embedding_model,
    make_embedder,
)
from strata.providers.llm import LLM, LLMUsage, OpenAIChatLLM, complete_json, make_llm
from strata.providers.tokens import TiktokenCounter, TokenCounter, count_message_tokens

__all__ = [
    "LLM",
    "E5Embedder",
    "Embedder",
    "LLMUsage",
    "OnnxMiniLMEmbedder",
    "OpenAIChatLLM",
    "OpenAIEmbedder",
    "TiktokenCounter",
    "TokenCounter",
    "complete_json",
    "count_message_tokens",
    "embedding_dim",
    "embedding_model",
    "make_embedder",
    "make_llm",
]
