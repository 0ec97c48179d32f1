"""The LLM entity extractor: entities and relations drafted by the configured LLM,
validated strictly, with the rule extractor as its fallback whenever the LLM fails
or answers garbage, so an extraction never fails.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from strata.errors import LLMError
from strata.providers.llm import LLM, LLMCall, LLMUsage, complete_json, inline_schema
from strata.retrieval.entities.extraction import (
    MAX_ALIASES_PER_ENTITY,
    MAX_ENTITIES_PER_TEXT,
    MAX_RELATIONS_PER_TEXT,
    Entity,
    EntityExtractor,
    Extraction,
    Relation,
    entity_key,
)
from strata.retrieval.entities.rules import RuleExtractor

__all__ = ["LLM_MAX_INPUT_CHARS", "LLMExtractor", "LLMExtractorStats", "make_extractor"]

log = logging.getLogger(__name__)

#: The LLM reads at most this much of a text.
LLM_MAX_INPUT_CHARS = 6000


class _EntityIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=200)
    type: str | None = Field(default=None, max_length=60)
    aliases: list[str] | None = None


class _RelationIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    source: str = Field(min_length=1, max_length=200)
    relation: str = Field(min_length=1, max_length=80)
    target: str = Field(min_length=1, max_length=200)


class _ExtractionIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    entities: list[_EntityIn]
    relations: list[_RelationIn] = Field(default_factory=list)


_TYPES = {"person", "project", "tool", "place", "date", "org", "concept", "code", "event", "thing"}
_TYPE_SYNONYMS = {
    "organization": "org", "organisation": "org", "company": "org", "location": "place", "city": "place",
    "country": "place", "technology": "tool", "software": "tool", "library": "tool", "framework": "tool",
    "time": "date", "people": "person", "error": "code", "identifier": "code",
}
_SYSTEM = (
    "You extract a knowledge graph from a text for an assistant's long-term memory. Reply with one JSON "
    'object: {"entities": [{"name": str, "type": str, "aliases": [str]}], '
    '"relations": [{"source": str, "relation": str, "target": str}]}. '
    "Entities are named things the text mentions: people, projects, tools, places, organisations, dates, "
    "error codes, concepts. type is one of: " + ", ".join(sorted(_TYPES)) + ". "
    "Write each name as the text does; put other names the text gives it in aliases. Relations are short "
    "snake_case verbs (uses, is, depends_on, runs_on, works_at, works_on, lives_in, part_of) between two "
    "entity names from your list. Skip pronouns and generic words; do not invent facts. "
    f"At most {MAX_ENTITIES_PER_TEXT} entities."
)


def _validated(obj: dict[str, Any]) -> Extraction:
    """The LLM's object as an Extraction: strict types, capped sizes, relations between listed entities."""
    parsed = _ExtractionIn.model_validate(obj)
    entities: dict[str, Entity] = {}
    names: dict[str, str] = {}  # key of name or alias -> entity name
    for item in parsed.entities:
        key = entity_key(item.name)
        if not key or key in names or len(entities) >= MAX_ENTITIES_PER_TEXT:
            continue
        raw_type = re.sub(r"[^a-z]+", "_", (item.type or "").strip().lower()).strip("_")
        raw_type = _TYPE_SYNONYMS.get(raw_type, raw_type)
        aliases: list[str] = []
        for alias in item.aliases or []:
            ak = entity_key(alias)
            if ak and ak not in names and ak != key and len(alias) <= 200 and len(aliases) < MAX_ALIASES_PER_ENTITY:
                aliases.append(alias.strip())
                names[ak] = item.name.strip()
        names[key] = item.name.strip()
        entities[key] = Entity(item.name.strip(), raw_type if raw_type in _TYPES else "thing", tuple(aliases))
    relations: dict[Relation, None] = {}
    for r in parsed.relations:
        source, target = names.get(entity_key(r.source)), names.get(entity_key(r.target))
        relation = re.sub(r"\W+", "_", r.relation.strip().lower()).strip("_")[:40]
        if source and target and relation and entity_key(source) != entity_key(target):
            relations.setdefault(Relation(source, relation, target))
        if len(relations) >= MAX_RELATIONS_PER_TEXT:
            break
    return Extraction(tuple(entities.values()), tuple(relations))


#: Background work (a document's entities are drawn after it is indexed): the schema sent.
_CALL = LLMCall(feature="entities", schema=inline_schema(_ExtractionIn.model_json_schema()))


@dataclass
class LLMExtractorStats:
    """Counts for cost control. Token counts are deltas of the LLM's own usage, when it keeps one."""

    calls: int = 0
    fallbacks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class LLMExtractor:
    """Entities and relations drafted by the LLM and validated; the fallback's when that fails.

    Args:
        llm: any :class:`~strata.providers.llm.LLM`.
        fallback: used when the LLM errs or its reply does not validate after one
            repair attempt; :class:`RuleExtractor` by default.
    """

    def __init__(self, llm: LLM, *, fallback: EntityExtractor | None = None) -> None:
        self._llm = llm
        self._fallback = fallback or RuleExtractor()
        self._lock = threading.Lock()
        self.stats = LLMExtractorStats()

    def extract(self, text: str) -> Extraction:
        if not text or not text.strip():
            return Extraction()
        usage = getattr(self._llm, "usage", None)
        before = (usage.prompt_tokens, usage.completion_tokens) if isinstance(usage, LLMUsage) else None
        try:
            extraction: Extraction = complete_json(
                self._llm, _SYSTEM, text[:LLM_MAX_INPUT_CHARS], validate=_validated, call=_CALL
            )
        except LLMError as exc:  # LLMOutputInvalid included
            log.warning("LLM entity extraction failed, using the rules: %s", exc.message)
            extraction = self._fallback.extract(text)
            failed = True
        else:
            failed = False
        with self._lock:
            self.stats.calls += 1
            self.stats.fallbacks += failed
            if before is not None and isinstance(usage, LLMUsage):
                self.stats.prompt_tokens += usage.prompt_tokens - before[0]
                self.stats.completion_tokens += usage.completion_tokens - before[1]
        return extraction


def make_extractor(llm: LLM | None) -> EntityExtractor:
    """The LLM extractor (rules as fallback) when an LLM is configured, else the rules."""
    return LLMExtractor(llm) if llm is not None else RuleExtractor()
