"""Entity extraction: the entities and relations a text mentions, for the knowledge
graph (:mod:`strata.retrieval.graph`).

:mod:`~strata.retrieval.entities.extraction` is the interface (:class:`Extraction`,
:class:`EntityExtractor`, :func:`entity_key`); :mod:`~strata.retrieval.entities.rules`
extracts by rules, :mod:`~strata.retrieval.entities.llm` by the LLM with the rules as
its fallback; :func:`make_extractor` picks one.
"""

from __future__ import annotations

from strata.retrieval.entities.extraction import (
    CJK_CHAR,
    MAX_ALIASES_PER_ENTITY,
    MAX_ENTITIES_PER_TEXT,
    MAX_RELATIONS_PER_TEXT,
    Entity,
    EntityExtractor,
    Extraction,
    Relation,
    entity_key,
)
from strata.retrieval.entities.llm import LLM_MAX_INPUT_CHARS, LLMExtractor, LLMExtractorStats, make_extractor
from strata.retrieval.entities.rules import RuleExtractor

__all__ = [
    "CJK_CHAR",
    "LLM_MAX_INPUT_CHARS",
    "MAX_ALIASES_PER_ENTITY",
    "MAX_ENTITIES_PER_TEXT",
    "MAX_RELATIONS_PER_TEXT",
    "Entity",
    "EntityExtractor",
    "Extraction",
    "LLMExtractor",
    "LLMExtractorStats",
    "Relation",
    "RuleExtractor",
    "entity_key",
    "make_extractor",
]
