"""What an entity extractor returns, and the key that identifies an entity.

An :class:`Extraction` is the entities and relations one text mentions; it is
stored with the text's row (:meth:`Extraction.to_dict`) and read back with
:meth:`Extraction.from_dict`. :func:`entity_key` folds a name to the key the
extractors de-duplicate by and the knowledge graph (:mod:`strata.retrieval.graph`)
resolves by.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

__all__ = [
    "CJK_CHAR",
    "MAX_ALIASES_PER_ENTITY",
    "MAX_ENTITIES_PER_TEXT",
    "MAX_RELATIONS_PER_TEXT",
    "Entity",
    "EntityExtractor",
    "Extraction",
    "Relation",
    "entity_key",
    "fold_text",
]

#: Caps that keep one text (or one bad LLM reply) from flooding the graph.
MAX_ENTITIES_PER_TEXT = 32
MAX_RELATIONS_PER_TEXT = 64
MAX_ALIASES_PER_ENTITY = 8


# --- values -------------------------------------------------------------------


@dataclass(frozen=True)
class Entity:
    name: str
    """Surface form as written, e.g. ``"New York City"``."""
    type: str = "thing"
    """person | project | tool | place | date | org | concept | code | thing."""
    aliases: tuple[str, ...] = ()
    """Other names the text gives it, e.g. ``("NYC",)``."""


@dataclass(frozen=True)
class Relation:
    source: str
    """Entity name, as in :attr:`Entity.name` (or one of its aliases)."""
    relation: str
    """snake_case verb: ``uses``, ``is``, ``depends_on``, ``works_on`` ..."""
    target: str


@dataclass(frozen=True)
class Extraction:
    entities: tuple[Entity, ...] = ()
    relations: tuple[Relation, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Compact JSON-safe form: ``{"e": [[name, type?, [aliases]?]], "r": [[s, rel, t]]}``."""
        entities: list[list[Any]] = []
        for e in self.entities:
            item: list[Any] = [e.name]
            if e.type != "thing" or e.aliases:
                item.append(e.type)
            if e.aliases:
                item.append(list(e.aliases))
            entities.append(item)
        return {"e": entities, "r": [[r.source, r.relation, r.target] for r in self.relations]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Extraction:
        """Read :meth:`to_dict` output, or the verbose ``{"entities": [{"name", ...}]}`` form.

        Missing keys and malformed items are skipped, never raised: a stored row
        written by an older version must still load.
        """
        entities: list[Entity] = []
        for item in _as_list(data.get("e", data.get("entities"))):
            name: Any
            etype: Any
            aliases: list[Any]
            if isinstance(item, str):
                name, etype, aliases = item, "thing", []
            elif isinstance(item, (list, tuple)) and item:
                name = item[0]
                etype = item[1] if len(item) > 1 else "thing"
                aliases = _as_list(item[2]) if len(item) > 2 else []
            elif isinstance(item, Mapping):
                name, etype, aliases = item.get("name"), item.get("type", "thing"), _as_list(item.get("aliases"))
            else:
                continue
            if isinstance(name, str) and name.strip():
                entities.append(
                    Entity(
                        name,
                        etype if isinstance(etype, str) and etype else "thing",
                        tuple(a for a in aliases if isinstance(a, str) and a.strip()),
                    )
                )
        relations: list[Relation] = []
        for item in _as_list(data.get("r", data.get("relations"))):
            parts: list[Any]
            if isinstance(item, Mapping):
                parts = [item.get("source"), item.get("relation"), item.get("target")]
            elif isinstance(item, (list, tuple)) and len(item) == 3:
                parts = list(item)
            else:
                continue
            source, relation, target = parts
            if all(isinstance(p, str) and p for p in parts):
                relations.append(Relation(source, relation, target))
        return cls(tuple(entities), tuple(relations))


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


class EntityExtractor(Protocol):
    """Turns one text into the entities and relations it mentions. Never raises for bad input."""

    def extract(self, text: str) -> Extraction: ...


# --- keys -----------------------------------------------------------------------

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\uff07": "'", "\u02bc": "'"})
_EDGE_PUNCT = "\"'`“”‘’«»「」『』《》〈〉()[]{}<>.,;:!?。，、；：！？…*~ \t\n"
_POSSESSIVE = re.compile(r"(?<=[^\W\d_])'s?$")
CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def fold_text(text: str) -> str:
    """NFKC, one apostrophe, casefolded: how names and queries are compared."""
    return unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).casefold()


@lru_cache(maxsize=1 << 16)
def _cached_key(name: str) -> str:
    key = " ".join(fold_text(name).split()).strip(_EDGE_PUNCT)
    return _POSSESSIVE.sub("", key).strip(_EDGE_PUNCT)


def entity_key(name: str) -> str:
    """The canonical key of a name: casefolded (NFKC), whitespace collapsed,
    surrounding punctuation and quotes stripped, possessive removed.

    ``entity_key(" “Caroline’s” ") == "caroline"``; ``"Ray  Serve"`` and
    ``"ray serve"`` share a key. Plurals are not folded here (``"Redis"`` is
    no plural); lookups try the singular when the plural is unknown.
    """
    return _cached_key(name)
