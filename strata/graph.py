"""A per-tenant knowledge graph: entities, their aliases and relations, by source.

A *source* is an opaque id of something that mentions entities (a document
chunk, a conversation turn). Each source contributes one :class:`Extraction`;
the graph keeps, per entity and per edge, the set of sources that mention
or state it, and per alias a reference count, so removing a source removes
exactly what only it contributed. The semantic layer stores each source's
``Extraction.to_dict()`` in the source's durable row and rebuilds the graph
at load by calling :meth:`KnowledgeGraph.add` for every source; nothing here
is persisted on its own.

Entity resolution happens at read time, so the graph is the same whatever
order sources are added in: one node per :func:`entity_key` (case, spacing,
surrounding quotes and possessives folded), and a key that some source gives
as an alias of another name belongs to that name's node. When two names are
each other's alias, the longer one wins.

Extraction is pluggable (:class:`EntityExtractor`): :class:`RuleExtractor`
is deterministic and fast (regular expressions for English, jieba's
part-of-speech tags for Chinese); :class:`LLMExtractor` asks the configured
LLM and falls back to the rules whenever it fails or answers garbage.
"""

from __future__ import annotations

import heapq
import importlib
import logging
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from strata.errors import LLMError
from strata.importance import ENGLISH_STOP_WORDS
from strata.llm import LLM, LLMUsage, complete_json

__all__ = [
    "Entity",
    "EntityExtractor",
    "Extraction",
    "KnowledgeGraph",
    "LLMExtractor",
    "LLMExtractorStats",
    "Relation",
    "RuleExtractor",
    "entity_key",
    "make_extractor",
]

log = logging.getLogger(__name__)

#: Caps that keep one text (or one bad LLM reply) from flooding the graph.
MAX_ENTITIES_PER_TEXT = 32
MAX_RELATIONS_PER_TEXT = 64
MAX_ALIASES_PER_ENTITY = 8
LLM_MAX_INPUT_CHARS = 6000


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
_LATIN_TOKEN = re.compile(
    r"[0-9a-z_\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]+"
    r"(?:[.'\-/][0-9a-z_\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]+)*[+#]*"
)
_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).casefold()


@lru_cache(maxsize=1 << 16)
def _cached_key(name: str) -> str:
    key = " ".join(_normalise(name).split()).strip(_EDGE_PUNCT)
    return _POSSESSIVE.sub("", key).strip(_EDGE_PUNCT)


def entity_key(name: str) -> str:
    """The canonical key of a name: casefolded (NFKC), whitespace collapsed,
    surrounding punctuation and quotes stripped, possessive removed.

    ``entity_key(" “Caroline’s” ") == "caroline"``; ``"Ray  Serve"`` and
    ``"ray serve"`` share a key. Plurals are not folded here (``"Redis"`` is
    no plural); lookups try the singular when the plural is unknown.
    """
    return _cached_key(name)


def _latin_form(key: str) -> str:
    """The word tokens of a key joined by spaces: what query n-grams are compared with."""
    return " ".join(_LATIN_TOKEN.findall(key))


def _singulars(word: str) -> list[str]:
    out = []
    if word.endswith("'"):
        out.append(word[:-1])
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        out.append(word[:-1])
        if word.endswith("ies"):
            out.append(word[:-3] + "y")
        elif word.endswith("es"):
            out.append(word[:-2])
    return out


# --- the graph ------------------------------------------------------------------


class _Record:
    """What one source contributed, as keys, to undo it exactly."""

    __slots__ = ("aliases", "extraction", "keys", "relations", "slot", "source_id")

    def __init__(self, extraction: Extraction, keys: tuple[str, ...],
                 aliases: tuple[tuple[str, str], ...], relations: tuple[tuple[str, str, str], ...]) -> None:
        self.source_id = ""
        self.slot = 0
        self.extraction = extraction
        self.keys = keys  # entity keys mentioned (names and relation ends)
        self.aliases = aliases  # (alias key, name key)
        self.relations = relations  # (source key, relation, target key), distinct


def _record(extraction: Extraction) -> _Record:
    keys: dict[str, None] = {}
    alias_of: dict[str, str] = {}
    for e in extraction.entities:
        k = entity_key(e.name)
        if not k:
            continue
        keys.setdefault(k)
        for a in e.aliases:
            ak = entity_key(a)
            if ak and ak != k:
                alias_of.setdefault(ak, k)
    relations: dict[tuple[str, str, str], None] = {}
    for r in extraction.relations:
        s, t = entity_key(r.source), entity_key(r.target)
        s, t = alias_of.get(s, s), alias_of.get(t, t)
        if s and t and s != t and r.relation:
            keys.setdefault(s)
            keys.setdefault(t)
            relations.setdefault((s, r.relation, t))
    return _Record(extraction, tuple(keys), tuple(alias_of.items()), tuple(relations))


#: Ranking: how far one hub may fan out, and the bonus for a stated relation.
_RANK_FANOUT = 32
_MIN_SOURCES_FOR_HUBS = 4
_RANK_REACH = 256
_HOP_SOURCE_BUDGET = 5000
_HOP_DECAY = 0.5
_RELATION_BONUS = 0.5
_MAX_NGRAM = 6
_ENTITY_SCAN_SOURCES = 2000


class KnowledgeGraph:
    """Entities and relations of one tenant, indexed by the sources that mention them.

    In memory, not thread-safe (one owner, e.g. the tenant's semantic actor).
    Rebuild it from stored extractions with :meth:`add`; the result does not
    depend on the order.
    """

    def __init__(self) -> None:
        # Sources are dense ints inside: sets of small ints are several times faster
        # to walk than sets of scattered id strings, which is what rank spends its time on.
        self._records: dict[str, _Record] = {}
        self._slots: list[_Record | None] = []
        self._free: list[int] = []
        self._mentions: dict[str, set[int]] = {}  # entity key -> source slots
        self._alias: dict[str, dict[str, int]] = {}  # alias key -> {name key: sources}
        self._aliases_of: dict[str, dict[str, int]] = {}  # name key -> {alias key: sources}
        # key -> {neighbour key: slots of the sources relating them}; one set shared by both directions
        self._adj: dict[str, dict[str, set[int]]] = {}
        self._forms: dict[str, set[str]] = {}  # Latin token form -> live keys
        self._cjk: dict[str, set[str]] = {}  # key with CJK -> live keys (itself)
        self._cjk_lengths: Counter[int] = Counter()
        self._size: int | None = None
        # Read-side memos; _changed drops what a write may have made stale.
        self._canon_memo: dict[str, str] = {}
        self._members_memo: dict[str, list[str]] = {}
        self._sources_memo: dict[str, set[int]] = {}
        self._fanout_memo: dict[str, list[str]] = {}

    # -- writes

    def add(self, source_id: str, extraction: Extraction) -> None:
        """Index ``extraction`` under ``source_id``, replacing what that source had before."""
        if source_id in self._records:
            self.remove([source_id])
        record = _record(extraction)
        if not (record.keys or record.aliases):
            return
        record.source_id = source_id
        if self._free:
            record.slot = self._free.pop()
            self._slots[record.slot] = record
        else:
            record.slot = len(self._slots)
            self._slots.append(record)
        slot = record.slot
        self._records[source_id] = record
        for k in record.keys:
            sources = self._mentions.get(k)
            if sources is None:
                if k not in self._alias:
                    self._index(k)
                sources = self._mentions[k] = set()
            sources.add(slot)
        for a, n in record.aliases:
            if a not in self._mentions and a not in self._alias:
                self._index(a)
            _bump(self._alias, a, n, 1)
            _bump(self._aliases_of, n, a, 1)
        pairs = {(s, t) if s < t else (t, s) for s, _, t in record.relations}
        for s, t in pairs:
            link = self._adj.setdefault(s, {}).get(t)
            if link is None:
                link = self._adj[s][t] = set()
                self._adj.setdefault(t, {})[s] = link
            link.add(slot)
        self._changed(record)

    def remove(self, source_ids: Iterable[str]) -> None:
        """Forget these sources and whatever only they contributed. Unknown ids are ignored."""
        for source_id in source_ids:
            record = self._records.pop(source_id, None)
            if record is None:
                continue
            slot = record.slot
            self._slots[slot] = None
            self._free.append(slot)
            for s, t in {(s, t) if s < t else (t, s) for s, _, t in record.relations}:
                link = self._adj.get(s, {}).get(t)
                if link is not None:
                    link.discard(slot)
                    if not link:
                        for x, y in ((s, t), (t, s)):
                            del self._adj[x][y]
                            if not self._adj[x]:
                                del self._adj[x]
            for a, n in record.aliases:
                _bump(self._alias, a, n, -1)
                _bump(self._aliases_of, n, a, -1)
                self._maybe_unindex(a)
            for k in record.keys:
                sources = self._mentions.get(k)
                if sources is not None:
                    sources.discard(slot)
                    if not sources:
                        del self._mentions[k]
                        self._maybe_unindex(k)
            self._changed(record)

    def _changed(self, record: _Record) -> None:
        """Drop the read memos this record's arrival or departure may have made stale."""
        self._size = None
        if record.aliases:  # resolution itself may change: start afresh
            for memo in (self._canon_memo, self._members_memo, self._sources_memo, self._fanout_memo):
                memo.clear()
            return
        sources, fanout = self._sources_memo, self._fanout_memo
        for k in record.keys:
            node = self._canon(k)
            sources.pop(node, None)
            if not fanout:
                continue
            # k's mentions changed, so did the ranking of neighbours of every node next to k.
            fanout.pop(node, None)
            adj = self._adj.get(k, {})
            if len(adj) <= len(fanout):
                for n in adj:
                    fanout.pop(self._canon(n), None)
            else:
                for other in [o for o in fanout if any(m in adj for m in self._members(o))]:
                    del fanout[other]

    def _index(self, key: str) -> None:
        if _CJK_CHAR.search(key):
            self._cjk.setdefault(key, set()).add(key)
            self._cjk_lengths[len(key)] += 1
        form = _latin_form(key)
        if form:
            self._forms.setdefault(form, set()).add(key)

    def _maybe_unindex(self, key: str) -> None:
        if key in self._mentions or key in self._alias:
            return
        if key in self._cjk:
            del self._cjk[key]
            self._cjk_lengths[len(key)] -= 1
            if not self._cjk_lengths[len(key)]:
                del self._cjk_lengths[len(key)]
        form = _latin_form(key)
        keys = self._forms.get(form)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._forms[form]

    # -- resolution

    def _alias_target(self, key: str) -> str | None:
        names = self._alias.get(key)
        if not names:
            return None
        return max(names.items(), key=lambda kv: (kv[1], len(kv[0]), kv[0]))[0]

    def _canon(self, key: str) -> str:
        """The node a key belongs to: follow alias links; in a cycle the longest key wins."""
        if key not in self._alias:
            return key
        node = self._canon_memo.get(key)
        if node is None:
            node = self._canon_memo[key] = self._follow(key)
        return node

    def _follow(self, key: str) -> str:
        path = [key]
        while True:
            nxt = self._alias_target(path[-1])
            if nxt is None:
                return path[-1]
            if nxt in path:
                return max(path[path.index(nxt) :], key=lambda k: (len(k), k))
            if len(path) >= 8:
                return nxt
            path.append(nxt)

    def _members(self, node: str) -> list[str]:
        """The mentioned keys that resolve to ``node`` (itself first)."""
        if node not in self._aliases_of:
            return [node]
        memo = self._members_memo.get(node)
        if memo is not None:
            return memo
        out, seen, stack = [node], {node}, [node]
        while stack:
            for a in self._aliases_of.get(stack.pop(), ()):
                if a not in seen and self._canon(a) == node:
                    seen.add(a)
                    stack.append(a)
                    if a in self._mentions:
                        out.append(a)
        self._members_memo[node] = out
        return out

    def _sources_of(self, node: str) -> set[int]:
        members = self._members(node)
        if len(members) == 1:
            return self._mentions.get(node, set())
        out = self._sources_memo.get(node)
        if out is None:
            out = self._sources_memo[node] = set().union(*(self._mentions.get(m, ()) for m in members))
        return out

    def _resolve(self, name: str) -> str | None:
        key = entity_key(name)
        if not key:
            return None
        candidates = [key]
        words = key.rsplit(" ", 1)
        candidates += [" ".join(words[:-1] + [w]) for w in _singulars(words[-1])]
        for k in candidates:
            if k in self._mentions or k in self._alias:
                return self._canon(k)
        return None

    # -- reads

    def __len__(self) -> int:
        """Number of entities (nodes after alias resolution)."""
        if self._size is None:
            self._size = sum(1 for k in self._mentions if self._canon(k) == k)
        return self._size

    def sources(self) -> int:
        """Number of sources indexed."""
        return len(self._records)

    def entity(self, name_or_alias: str) -> dict[str, Any] | None:
        """What the graph knows about one entity, or None.

        Returns ``{"key", "name", "type", "aliases", "relations": [{"relation", "target"}],
        "incoming": [{"relation", "source"}], "sources": n}``; names are surface forms
        (the most frequent), relations are sorted by how many sources state them.
        """
        node = self._resolve(name_or_alias)
        if node is None:
            return None
        members = set(self._members(node))
        sources = self._sources_of(node)
        records = [r for r in map(self._slots.__getitem__, sources) if r is not None]
        if len(records) > _ENTITY_SCAN_SOURCES:
            records = sorted(records, key=lambda r: r.source_id)[:_ENTITY_SCAN_SOURCES]
        names: Counter[str] = Counter()
        types: Counter[str] = Counter()
        aliases: dict[str, Counter[str]] = {}
        outgoing: Counter[tuple[str, str]] = Counter()
        incoming: Counter[tuple[str, str]] = Counter()
        for record in records:
            extraction = record.extraction
            for e in extraction.entities:
                k = entity_key(e.name)
                if k not in members:
                    continue
                if k == node:
                    names[e.name] += 1
                else:
                    aliases.setdefault(k, Counter())[e.name] += 1
                types[e.type] += 1
                for a in e.aliases:
                    ak = entity_key(a)
                    if ak and ak != node and self._canon(ak) == node:
                        aliases.setdefault(ak, Counter())[a] += 1
            for r in extraction.relations:
                s, t = self._canon(entity_key(r.source)), self._canon(entity_key(r.target))
                if s == node and t != node:
                    outgoing[(r.relation, r.target)] += 1
                elif t == node and s != node:
                    incoming[(r.relation, r.source)] += 1
        display = _most_frequent(names) if names else node
        typed = [(n, t) for t, n in types.items() if t != "thing"]
        return {
            "key": node,
            "name": display,
            "type": min(typed, key=lambda nt: (-nt[0], nt[1]))[1] if typed else "thing",
            "aliases": sorted(_most_frequent(v) for k, v in aliases.items() if k != entity_key(display)),
            "relations": [{"relation": r, "target": t} for (r, t), _ in _most_common(outgoing)],
            "incoming": [{"relation": r, "source": s} for (r, s), _ in _most_common(incoming)],
            "sources": len(sources),
        }

    def match(self, query: str) -> list[str]:
        """Keys of the known entities ``query`` mentions, in order of appearance.

        Latin text: word n-grams (up to six words), longest first, by key or
        alias, case-insensitively, with plural and possessive folding. CJK
        text: substring search over known names, longest first.
        """
        text = " ".join(_normalise(query).split())
        found: dict[str, None] = {}
        tokens = _LATIN_TOKEN.findall(text)
        i = 0
        while i < len(tokens):
            for n in range(min(_MAX_NGRAM, len(tokens) - i), 0, -1):
                node = self._lookup_form(tokens[i : i + n])
                if node is not None:
                    found.setdefault(node)
                    i += n
                    break
            else:
                i += 1
        if self._cjk:
            for node in self._match_cjk(text):
                found.setdefault(node)
        return list(found)

    def _lookup_form(self, words: list[str]) -> str | None:
        if len(words) == 1 and (words[0] in ENGLISH_STOP_WORDS or (len(words[0]) < 2 and not words[0].isdigit())):
            return None
        last = words[-1]
        variants = [last]
        if last.endswith("'s"):
            variants.append(last[:-2])
        variants += _singulars(last)
        for v in variants:
            keys = self._forms.get(" ".join(words[:-1] + [v]))
            if keys:
                return min(self._canon(k) for k in keys)
        return None

    def _match_cjk(self, text: str) -> list[str]:
        lengths = sorted(self._cjk_lengths, reverse=True)
        out: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if not (_CJK_CHAR.match(ch) or (ch.isalnum() and (i == 0 or not text[i - 1].isalnum()))):
                i += 1
                continue
            for length in lengths:
                keys = self._cjk.get(text[i : i + length])
                if keys:
                    out.append(min(self._canon(k) for k in keys))
                    i += length
                    break
            else:
                i += 1
        return out

    def expand(self, keys: Iterable[str], *, hops: int = 1) -> dict[str, int]:
        """Entities within ``hops`` relation steps: key -> distance (0 for the given ones).

        ``keys`` may be keys, names or aliases; unknown ones are left out.
        """
        seeds = [node for node in (self._resolve(k) for k in keys) if node is not None]
        return self._expand(seeds, hops, fanout=None, reach=None)

    def _df(self, node: str) -> int:
        if node not in self._aliases_of:
            return len(self._mentions.get(node, ()))
        return len(self._sources_of(node))

    def _neighbours(self, node: str) -> dict[str, int]:
        """Adjacent nodes -> number of sources relating them to ``node``."""
        alias, canon = self._alias, self._canon
        members = self._members(node)
        out: dict[str, int] = {}
        if len(members) == 1:
            adj = self._adj.get(node, {})
            out = {(canon(n) if n in alias else n): len(link) for n, link in adj.items()}
            if len(out) < len(adj):  # two neighbours resolve to one node: add them up below
                out = {}
        if not out:
            for m in members:
                for n, link in self._adj.get(m, {}).items():
                    if n in alias:
                        n = canon(n)
                    out[n] = out.get(n, 0) + len(link)
        out.pop(node, None)
        return out

    def _strongest(self, node: str, fanout: int) -> list[str]:
        """The ``fanout`` neighbours most worth following: often related, and specific."""
        best = self._fanout_memo.get(node)
        if best is None:
            links = self._neighbours(node)
            if len(links) > fanout:
                # Association links / sqrt(df): a hub everyone mentions adds little. The
                # neighbour's own mentions stand in for its df: close enough to order by.
                get, sqrt = self._mentions.get, math.sqrt
                scored = [(count / sqrt(len(get(n, ())) or 1), n) for n, count in links.items()]
                best = [n for _, n in heapq.nlargest(fanout, scored)]
            else:
                best = sorted(links)
            self._fanout_memo[node] = best
        return best

    def _expand(self, seeds: list[str], hops: int, *, fanout: int | None, reach: int | None) -> dict[str, int]:
        distance = dict.fromkeys(seeds, 0)
        frontier = list(distance)
        for hop in range(1, max(hops, 0) + 1):
            nxt: list[str] = []
            for node in frontier:
                neighbours = self._strongest(node, fanout) if fanout is not None else self._neighbours(node)
                for n in neighbours:
                    if n not in distance:
                        distance[n] = hop
                        nxt.append(n)
                if reach is not None and len(distance) >= reach:
                    return distance
            frontier = nxt
        return distance

    def rank(self, query: str, *, hops: int = 1, limit: int = 100) -> list[tuple[str, float]]:
        """Sources relevant to the entities ``query`` mentions, best first.

        A source scores, for each matched entity it mentions, the entity's
        weight, BM25's idf ``log(1 + (N - n + 0.5) / (n + 0.5))`` for an entity
        that ``n`` of the ``N`` sources mention (near 0 for an entity nearly every
        source mentions, such as a conversation's speakers); for each entity ``d``
        relation steps from a matched one, that entity's weight times 0.5**d;
        and half the smaller weight for each relation it states between two
        matched entities. Scores are positive, higher is better, comparable
        within one call only. Sources tied at the cut are all left out when
        they do not all fit: an order among equals would be arbitrary, and a
        fused ranking would take it for evidence.

        Work is bounded for hubs: each node expands to its strongest
        ``_RANK_FANOUT`` neighbours, and neighbours together contribute at most
        ``_HOP_SOURCE_BUDGET`` sources (the most specific first).
        """
        total = len(self._records)
        # An entity that more than half of the sources mention tells them apart no
        # better than chance (where classic IDF turns negative), e.g. the speakers
        # of a conversation: it is neither matched nor expanded from.
        matched = [
            key for key in self.match(query) if total < _MIN_SOURCES_FOR_HUBS or 2 * len(self._sources_of(key)) <= total
        ]
        if not matched or limit <= 0:
            return []
        scores: dict[int, float] = {}
        weights: dict[str, float] = {}
        budget = _HOP_SOURCE_BUDGET
        reached = self._expand(matched, hops, fanout=_RANK_FANOUT, reach=_RANK_REACH)
        hop_nodes = sorted((d, self._df(n), n) for n, d in reached.items() if d > 0)
        for node, dist in [(n, 0) for n in matched] + [(n, d) for d, _, n in hop_nodes]:
            sources = self._sources_of(node)
            if not sources:
                continue
            if dist > 0:
                if len(sources) > budget:
                    continue
                budget -= len(sources)
            weight = math.log1p((total - len(sources) + 0.5) / (len(sources) + 0.5))
            if dist == 0:
                weights[node] = weight
            weight *= _HOP_DECAY**dist
            if not scores:
                scores = dict.fromkeys(sources, weight)
                continue
            get = scores.get
            for slot in sources:
                scores[slot] = get(slot, 0.0) + weight
        for a, b in combinations(list(weights)[:16], 2):
            bonus = _RELATION_BONUS * min(weights[a], weights[b])
            for slot in self._stating(a, b):
                scores[slot] = scores.get(slot, 0.0) + bonus
        return self._top(scores, limit)

    def _top(self, scores: dict[int, float], limit: int) -> list[tuple[str, float]]:
        """The ``limit`` best (source id, score), higher score first, then smaller id; cheap on many ties."""
        ids = self._slots
        if len(scores) > limit:
            cutoff = heapq.nlargest(limit, scores.values())[-1]
            above = [(_id(ids[slot]), score) for slot, score in scores.items() if score > cutoff]
            tied: list[str] = []  # more sources share the cut-off score than fit: none of them is preferred
        else:
            above, tied, cutoff = [(_id(ids[slot]), score) for slot, score in scores.items()], [], 0.0
        above.sort(key=lambda kv: (-kv[1], kv[0]))
        return above + [(sid, cutoff) for sid in tied]

    def _stating(self, a: str, b: str) -> set[int]:
        """Slots of the sources that state a relation between nodes ``a`` and ``b``."""
        out: set[int] = set()
        others = self._members(b)
        for m in self._members(a):
            links = self._adj.get(m)
            if links:
                for o in others:
                    out |= links.get(o, set())
        return out


def _bump(table: dict[str, dict[str, int]], outer: str, inner: str, delta: int) -> None:
    counts = table.setdefault(outer, {})
    value = counts.get(inner, 0) + delta
    if value > 0:
        counts[inner] = value
    else:
        counts.pop(inner, None)
        if not counts:
            del table[outer]


def _id(record: _Record | None) -> str:
    return record.source_id if record is not None else ""


def _most_frequent(counter: Counter[str]) -> str:
    return min(counter.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _most_common(counter: Counter[tuple[str, str]], limit: int = 50) -> list[tuple[tuple[str, str], int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


# --- rules ------------------------------------------------------------------------

_UP = "A-Z\u00c0-\u00d6\u00d8-\u00de"
_AL = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff"
_NB = r"(?<![A-Za-z0-9_\u00c0-\u024f])"  # Latin word edges; CJK counts as a boundary
_NA = r"(?![A-Za-z0-9_\u00c0-\u024f])"

_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"
)
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_DATE = re.compile(
    rf"{_NB}(?:{_MONTH}\s+{_DAY}(?:,?\s+\d{{4}})?|{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}})?"
    rf"|{_MONTH}\s+\d{{4}}|\d{{4}}-\d{{1,2}}-\d{{1,2}}|\d{{4}}/\d{{1,2}}/\d{{1,2}}){_NA}"
    r"|\d{4}\s*年\s*\d{1,2}\s*月(?:\s*\d{1,2}\s*[日号])?|\d{1,2}\s*月\s*\d{1,2}\s*[日号]"
    r"|(?:星期|礼拜|周)[一二三四五六日天]"
)
_BACKTICK = re.compile(r"`([^`\n]{1,80})`")
_QUOTED = re.compile(
    r'"([^"\n]{1,60})"|“([^”\n]{1,60})”|「([^」\n]{1,60})」|『([^』\n]{1,60})』|《([^》\n]{1,60})》'
    r"|(?<![\w'])'([^'\n]{1,60})'(?![\w'])"
)
_VERSION = re.compile(rf"{_NB}([A-Z][A-Za-z+#]*)(?:\s+|-)(v?\d+(?:\.\d+){{0,3}}[a-z]?)(?![\w]|\.\d)")
_IDENTIFIER = re.compile(
    rf"{_NB}(?:(?P<dotted>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?"
    rf"|(?P<snake>_*[a-z][a-z0-9]*(?:_[a-z0-9]+)+)"
    rf"|(?P<scream>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"
    rf"|(?P<camel>[a-z]+[0-9]*(?:[A-Z][a-z0-9]*)+)){_NA}"
)
_ACRONYM = re.compile(rf"{_NB}([A-Z][A-Z0-9&]*[A-Z0-9])(s?){_NA}")
_CAP_TOKEN = re.compile(rf"{_NB}[{_UP}][{_AL}0-9]*(?:(?:-|['’](?![sS]{_NA}))[{_AL}]+)*{_NA}")
_CAP_JOIN = re.compile(r" +|(?: (?:of|de|van|von|der|den|da|du|del|della|di|la|le|al|bin)(?: the)?|&) ")
_SENTENCE_START = re.compile(r"(?:^|[.!?…。！？:;\n])[\"'“”‘’(\[\s]*")
_PAREN_AFTER = re.compile(r"\s*[(（]\s*([^()（）\n]{1,30}?)\s*[)）]")
_ALIAS_MID = re.compile(
    r"\s*,?\s*(?:also known as|aka|a\.k\.a\.?|otherwise known as|known as|nicknamed)\s*,?\s*"
    r"|\s*[,，]?\s*(?:又称|又名|简称|也叫|也称|俗称|别名)\s*[:：]?\s*",
    re.IGNORECASE,
)
_LIST_MID = re.compile(r"\s*(?:,|, and|, or|and|or|&|和|与|及|以及|、|，)\s*", re.IGNORECASE)

_MONTHS = {
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
}
_WEEKDAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
_TITLES = {"mr", "mrs", "ms", "mx", "dr", "prof", "sir", "madam", "miss", "aunt", "uncle"}
# Capitalised at a sentence start or as an interjection, yet no name.
_CAP_STOP = ENGLISH_STOP_WORDS | _TITLES | set(
    """
    yesterday today tomorrow tonight sorry cool nice wow oh ah yeah yep nope sure awesome absolutely
    definitely maybe perhaps actually honestly anyway btw thanks congrats congratulations good glad happy
    lol haha hmm um uh omg right exactly true agreed totally wait look see check try go keep hope wish
    plus besides however although though since last next every many first second finally also then
    hey hi hello dear welcome bye goodbye cheers yes no not never always sometimes often usually
    wonderful amazing fantastic beautiful fun love sounds seems looks thank let lets gonna wanna
    speaking talking anyways alright well oops whoa wish hopefully luckily unfortunately recently
    lately currently already still just even sounds that'd i'd i'm i've i'll
    """.split()  # noqa: SIM905 - a word list reads best as text
)
# May begin a name ("New York", "North Carolina") but is no name alone.
_CAP_WEAK = {
    "new", "old", "north", "south", "east", "west", "great", "big", "little", "united", "upper", "lower",
    "central", "saint", "san", "santa", "los", "las", "el",
}
# After a sentence-initial capitalised word, these say it was a verb: "Call it ...", "Take the ...".
_VERB_OBJECT = {
    "it", "me", "him", "her", "them", "us", "the", "a", "an", "this", "that", "these", "those", "your", "my",
    "our", "his", "their", "its", "you", "some", "any", "all",
}
_ACRONYM_STOP = {"I", "A", "OK", "AM", "PM", "OMG", "LOL", "BTW", "FYI", "IMO", "IMHO", "TBH", "IDK", "ASAP", "LMAO"}
_ORG_SUFFIX = {
    "inc", "corp", "corporation", "ltd", "llc", "company", "co", "university", "college", "institute",
    "foundation", "group", "labs", "lab", "bank", "school", "academy", "association", "agency",
    "department", "ministry", "hospital", "club", "team", "society", "council",
}
_PLACE_SUFFIX = {
    "city", "town", "village", "street", "avenue", "road", "river", "lake", "mountain", "mountains",
    "park", "island", "islands", "county", "state", "province", "valley", "beach", "bay", "coast",
    "country", "kingdom", "republic", "airport", "station", "square", "district",
}
_PERSON_NEXT = {
    "said", "says", "told", "asked", "replied", "answered", "thinks", "thought", "feels", "felt",
    "loves", "loved", "likes", "liked", "wants", "wanted", "went", "goes", "herself", "himself",
}
_PERSON_PREV = {
    "friend", "sister", "brother", "mom", "mother", "dad", "father", "wife", "husband", "son",
    "daughter", "cousin", "grandma", "grandpa", "boss", "colleague", "coworker", "partner",
    "boyfriend", "girlfriend", "neighbor", "neighbour", "teacher", "mentor",
    "hey", "hi", "hello", "dear", "thanks", "congrats", "bye",
}
_PERSON_POSSESSED = {
    "wife", "husband", "mom", "dad", "mother", "father", "kids", "children", "son", "daughter",
    "friend", "friends", "partner", "boyfriend", "girlfriend", "birthday", "family", "sister", "brother",
    "dog", "cat", "pet", "parents", "house", "wedding", "husband's", "wife's",
}
_ZH_STOP_NOUNS = frozenset(
    """
    时候 东西 问题 事情 今天 明天 昨天 我们 你们 他们 她们 大家 时间 地方 情况 样子 感觉 方面 方式 事儿 一下
    有点 什么 怎么 这样 那样 现在 以后 之前 以前 最近 一点 部分 原因 结果 办法 意思 关系 机会 经验 能力
    生活 世界 朋友 人们 东东 内容 方法 过程 问题 地方 时代 中国人 别人 自己 周末 晚上 早上 下午 上午 今年
    去年 明年 一天 每天 小时 分钟 天气 心情 想法 建议 目标 计划 工作 学习 时期 阶段 数量 水平 作用 影响
    """.split()  # noqa: SIM905
)
_ZH_TYPES = {"nr": "person", "nrfg": "person", "nrt": "thing", "ns": "place", "nt": "org", "nz": "thing", "n": "thing"}

_EN_RELATIONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), relation)
    for pattern, relation in (
        (r"(?:is|are|was|were)(?: also)? (?:a |an )?part of(?: the)?", "part_of"),
        (r"(?:is|are|was|were) written in", "written_in"),
        (r"(?:is|are|was|were) (?:located|based) in(?: the)?", "located_in"),
        (r"(?:is|are|was|were)(?: also| now| still| actually)?(?: (?:a|an|the))?", "is"),
        (r"{adv}(?:uses|use|used|is using|are using|was using|using|is built on|built on|built with){det}", "uses"),
        (r"{adv}(?:depends|depend|depended|is dependent|are dependent|relies|rely|relied) on{det}", "depends_on"),
        (r"{adv}(?:runs|run|ran|is running|are running|running) on(?: top of)?{det}", "runs_on"),
        (r"{adv}(?:works|work|worked|is working|are working|was working) (?:at|for){det}", "works_at"),
        (r"{adv}(?:is employed|was employed) (?:at|by){det}", "works_at"),
        (r"{adv}(?:works|work|worked|is working|are working|was working) on{det}", "works_on"),
        (r"{adv}(?:lives|live|lived|is living|are living|was living) in{det}", "lives_in"),
    )
    for pattern in [
        pattern.format(
            adv=r"(?:(?:also|now|still|mainly|mostly|only|already|currently|actually|really|just|primarily|heavily) )*",
            det=r"(?: (?:a|an|the|my|our|their|his|her|its|your))?",
        )
    ]
)
_ZH_RELATIONS: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(mid), tail, relation)
    for mid, tail, relation in (
        (r"(?:也|就|都|还)?是", "的一部分", "part_of"),
        (r"(?:也|就|都|还)?是", "的组成部分", "part_of"),
        (r"(?:也|还|一直)?(?:在|于)", "工作", "works_at"),
        (r"(?:也|还|一直)?(?:在|于)", "上班", "works_at"),
        (r"(?:也|还|一直)?(?:在|于)", "任职", "works_at"),
        (r"(?:运行|跑|部署)在", "", "runs_on"),
        (r"(?:也|还|一直)?(?:住在|生活在|居住在|定居在|定居于)", "", "lives_in"),
        (r"(?:也|就|都|还)?是(?:一个|一种|一家|一款|个)?", "", "is"),
        (r"(?:也|都|还|主要|一直)?(?:使用|采用|在用|用|使用了|采用了|用了)", "", "uses"),
        (r"(?:也|都|还|主要)?依赖(?:于)?", "", "depends_on"),
        (r"(?:位于|坐落于|坐落在)", "", "located_in"),
        (r"(?:负责|开发|参与|在做)", "", "works_on"),
    )
)
_RELATION_TYPES = {  # relation -> (type of source, type of target), applied to untyped ends
    "lives_in": ("person", "place"),
    "works_at": ("person", "org"),
    "works_on": ("thing", "project"),
}


_Claim = Callable[[int, int, str, str, int], None]  # (start, end, name, type, rank)


class _Span:
    __slots__ = ("aliases", "end", "name", "rank", "start", "type")

    def __init__(self, start: int, end: int, name: str, type_: str, rank: int) -> None:
        self.start, self.end, self.name, self.type, self.rank = start, end, name, type_, rank
        self.aliases: list[str] = []


@lru_cache(maxsize=1)
def _posseg() -> Any:
    jieba = importlib.import_module("jieba")
    jieba.setLogLevel(logging.WARNING)  # it announces its dictionary load on stderr
    return importlib.import_module("jieba.posseg")


class RuleExtractor:
    """Entities and relations by rules: deterministic, no model, English and Chinese.

    Names (capitalised words and multi-word names), code identifiers, quoted
    and backticked terms, word + number codes (``Python 3.11``, ``HTTP 429``),
    dates; Chinese nouns by jieba's part-of-speech tags. Relations come from a
    few verb patterns between two adjacent entities in a sentence.
    """

    def __init__(self, *, max_entities: int = MAX_ENTITIES_PER_TEXT) -> None:
        self._max_entities = max_entities

    def extract(self, text: str) -> Extraction:
        if not text or not text.strip():
            return Extraction()
        spans = self._spans(text)
        spans = self._merge_aliases(text, spans)
        relations = self._relations(text, spans)
        return self._build(spans, relations)

    # -- spans

    def _spans(self, text: str) -> list[_Span]:
        mask = bytearray(len(text))  # characters already claimed by an earlier, surer rule
        spans: list[_Span] = []
        starts = {m.end() for m in _SENTENCE_START.finditer(text)}

        def claim(start: int, end: int, name: str, type_: str, rank: int) -> None:
            if end <= start or mask.find(1, start, end) != -1:
                return
            name = name.strip()
            if not entity_key(name):
                return
            mask[start:end] = b"\x01" * (end - start)
            spans.append(_Span(start, end, name, type_, rank))

        for m in _BACKTICK.finditer(text):
            claim(m.start(), m.end(), m.group(1), "code", 0)
        for m in _DATE.finditer(text):
            claim(m.start(), m.end(), m.group(0), "date", 1)
        for m in _QUOTED.finditer(text):
            inner = next(g for g in m.groups() if g is not None)
            if _quoted_term(inner):
                claim(m.start(), m.end(), inner, "concept", 2)
        for m in _VERSION.finditer(text):
            word, number = m.group(1), m.group(2)
            if word.lower() in _CAP_STOP or word.lower() in _MONTHS or word.lower() in _WEEKDAYS:
                continue
            if m.start() in starts and "." not in number and not word.isupper():
                continue  # "Give 3 examples"
            claim(m.start(), m.end(), m.group(0), "tool" if "." in number or not word.isupper() else "code", 3)
        for m in _IDENTIFIER.finditer(text):
            if m.group("dotted") and not _dotted_name(m.group("dotted")):
                continue
            claim(m.start(), m.end(), m.group(0), "code", 4)
        for m in _ACRONYM.finditer(text):
            word = m.group(1)
            if word not in _ACRONYM_STOP and word.lower() not in ENGLISH_STOP_WORDS:
                claim(m.start(), m.end(), word, "thing", 5)
        self._capitalised(text, mask, starts, claim)
        if _CJK_CHAR.search(text):
            self._chinese(text, claim)
        spans.sort(key=lambda s: s.start)
        return spans

    def _capitalised(self, text: str, mask: bytearray, starts: set[int], claim: _Claim) -> None:
        tokens = [m for m in _CAP_TOKEN.finditer(text) if mask.find(1, m.start(), m.end()) == -1]
        groups: list[list[re.Match[str]]] = []
        for m in tokens:
            word = m.group(0).lower()
            if word in _CAP_STOP:
                groups.append([m])  # a stop word stands alone and is dropped below
                continue
            last = groups[-1] if groups else None
            if (
                last
                and last[-1].group(0).lower() not in _CAP_STOP
                and _CAP_JOIN.fullmatch(text, last[-1].end(), m.start())
                and len(last) < 6
            ):
                last.append(m)
            else:
                groups.append([m])
        for group in groups:
            if group[0].group(0).lower() in _CAP_STOP:
                continue
            start, end = group[0].start(), group[-1].end()
            words = [m.group(0) for m in group]
            lower = words[-1].lower()
            initial = start in starts
            if len(group) == 1 and (lower in _CAP_WEAK or initial and _common_word(text, words[0], end)):
                continue
            type_ = "thing"
            if len(group) == 1 and (lower in _WEEKDAYS or lower.rstrip("s") in _WEEKDAYS):
                type_ = "date"
            elif len(group) == 1 and lower in _MONTHS:
                if lower == "may" and not _MAY_DATE.search(text, max(0, start - 8), start):
                    continue  # "May I ..."
                type_ = "date"
            elif lower in _ORG_SUFFIX:
                type_ = "org"
            elif lower in _PLACE_SUFFIX or words[0].lower() in {"mount", "lake", "fort", "port"}:
                type_ = "place"
            elif _looks_like_person(text, start, end, initial):
                type_ = "person"
            claim(start, end, text[start:end], type_, 6)

    def _chinese(self, text: str, claim: _Claim) -> None:
        cursor = 0
        for pair in _posseg().cut(text):
            word, flag = pair.word, pair.flag
            start = text.find(word, cursor)
            if start < 0:
                continue
            cursor = start + len(word)
            type_ = _ZH_TYPES.get(flag)
            if (
                type_ is None
                or len(word) < 2
                or word in _ZH_STOP_NOUNS
                or not _CJK_CHAR.search(word)
            ):
                continue
            claim(start, cursor, word, type_, 7 if flag == "n" else 6)

    # -- aliases and relations

    def _merge_aliases(self, text: str, spans: list[_Span]) -> list[_Span]:
        out: list[_Span] = []
        i = 0
        while i < len(spans):
            span = spans[i]
            nxt = spans[i + 1] if i + 1 < len(spans) else None
            paren = _PAREN_AFTER.match(text, span.end)
            alias: str | None = None
            end = span.end
            if paren and _alias_like(paren.group(1)):
                alias, end = paren.group(1), paren.end()
                while nxt is not None and nxt.start < end:  # spans inside the parentheses
                    i += 1
                    nxt = spans[i + 1] if i + 1 < len(spans) else None
            elif nxt is not None and _ALIAS_MID.fullmatch(text, span.end, nxt.start):
                alias, end = nxt.name, nxt.end
                if span.type == "thing":
                    span.type = nxt.type
                i += 1
            if alias is not None:
                name = span.name
                if len(alias) > len(name):  # the longer form names the node: "NYC (New York City)"
                    name, alias = alias, name
                merged = _Span(span.start, end, name, span.type, span.rank)
                merged.aliases = [alias, *span.aliases]
                span = merged
            out.append(span)
            i += 1
        return out

    def _relations(self, text: str, spans: list[_Span]) -> list[tuple[_Span, str, _Span]]:
        found: list[tuple[_Span, str, _Span]] = []
        for i in range(len(spans) - 1):
            a, b = spans[i], spans[i + 1]
            relation = _relation_between(text, a, b)
            if relation is None:
                continue
            found.append((a, relation, b))
            for k in range(i + 2, len(spans)):  # "X uses Y and Z"
                if not _LIST_MID.fullmatch(text, spans[k - 1].end, spans[k].start):
                    break
                found.append((a, relation, spans[k]))
        return found[:MAX_RELATIONS_PER_TEXT]

    def _build(self, spans: list[_Span], relations: list[tuple[_Span, str, _Span]]) -> Extraction:
        for a, relation, b in relations:
            if relation in _RELATION_TYPES:
                ta, tb = _RELATION_TYPES[relation]
                if a.type == "thing":
                    a.type = ta
                if b.type == "thing":
                    b.type = tb
        by_key: dict[str, tuple[str, str, list[str]]] = {}
        name_of: dict[int, str] = {}
        for span in sorted(spans, key=lambda s: (s.rank, s.start)):
            key = entity_key(span.name)
            if key not in by_key:
                if len(by_key) >= self._max_entities:
                    continue
                by_key[key] = (span.name, span.type, [])
            name, type_, aliases = by_key[key]
            if type_ == "thing" and span.type != "thing":
                by_key[key] = (name, span.type, aliases)
            for alias in span.aliases:
                if entity_key(alias) not in {entity_key(a) for a in aliases} | {key}:
                    aliases.append(alias)
            name_of[id(span)] = name
        order = {entity_key(s.name): s.start for s in reversed(spans)}
        entities = tuple(
            Entity(name, type_, tuple(aliases[:MAX_ALIASES_PER_ENTITY]))
            for key, (name, type_, aliases) in sorted(by_key.items(), key=lambda kv: order.get(kv[0], 0))
        )
        rels: dict[Relation, None] = {}
        for a, relation, b in relations:
            sa, sb = name_of.get(id(a)), name_of.get(id(b))
            if sa is not None and sb is not None and entity_key(sa) != entity_key(sb):
                rels.setdefault(Relation(sa, relation, sb))
        return Extraction(entities, tuple(rels))


_MAY_DATE = re.compile(r"(?:in|on|of|since|until|by|last|next|early|late|mid|this|from|to)\s+$", re.IGNORECASE)


def _common_word(text: str, word: str, end: int) -> bool:
    """A capitalised word at a sentence start that is probably not a name."""
    lower = word.lower()
    if lower in _CAP_STOP or len(word) < 3 or lower.endswith(("ing", "ed", "ly")):
        return True
    following = text[end : end + 12].split(maxsplit=1)
    return bool(following) and following[0].strip(",.!?") in _VERB_OBJECT


def _looks_like_person(text: str, start: int, end: int, initial: bool) -> bool:
    before = text[max(0, start - 24) : start].lower().split()
    after = text[end : end + 24]
    if before and before[-1].rstrip(".") in _TITLES | _PERSON_PREV:
        return True
    if initial and after.startswith(":") and (start == 0 or text[start - 1] == "\n"):
        return True  # "Caroline: ..." speaker prefix
    words = after.lower().replace("’", "'").split()
    if not words:
        return False
    if words[0] in _PERSON_NEXT:
        return True
    if after[:1] in {"!", "?"} and text[max(0, start - 2) : start] == ", ":
        return True  # "That's awesome, Caroline!"
    return after[:2] in {"'s", "’s"} and len(words) > 1 and words[1].strip(".,!?") in _PERSON_POSSESSED


def _quoted_term(inner: str) -> bool:
    words = inner.split()
    if not words or len(words) > 5 or len(inner) > 40 or inner.strip()[-1] in ".!?,;:。！？，":
        return False
    stops = sum(w.lower() in ENGLISH_STOP_WORDS for w in words)
    return stops * 2 <= len(words) and bool(re.search(r"\w", inner))


def _dotted_name(name: str) -> bool:
    parts = name.split(".")
    return len(name) >= 4 and any(len(p) > 1 for p in parts) and name.lower() not in {"e.g", "i.e", "a.m", "p.m"}


def _alias_like(inner: str) -> bool:
    """Parenthesised text that names something: "(NYC)", "(New York City)", "（北大）"; not "(my friend)"."""
    words = inner.split()
    if not words or len(words) > 4 or inner.isdigit():
        return False
    if _CJK_CHAR.match(inner[0]):
        return True
    return all(w[0].isupper() or w.lower() in {"of", "de", "van", "von", "the", "&"} for w in words)


def _relation_between(text: str, a: _Span, b: _Span) -> str | None:
    mid = text[a.end : b.start]
    if len(mid) > 40:
        return None
    tail = text[b.end : b.end + 6]
    if tail[:2] in {"'s", "’s"}:
        return None  # "X is Mel's friend": Mel is not the object
    if _CJK_CHAR.search(mid) or not mid.strip():
        compact = mid.strip()
        for pattern, need_tail, relation in _ZH_RELATIONS:
            if pattern.fullmatch(compact) and tail.startswith(need_tail):
                if relation == "is" and tail.startswith("的"):
                    return None  # "X是Y的工程师"
                if relation == "works_on" and a.type != "person":
                    return None  # "他使用Python开发Strata": Python develops nothing
                return relation
        return None
    words = " ".join(mid.lower().split()).strip(" ,")
    for en_pattern, relation in _EN_RELATIONS:
        if en_pattern.fullmatch(words):
            return relation
    return None


# --- the LLM extractor ----------------------------------------------------------------


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
        llm: any :class:`~strata.llm.LLM`.
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
                self._llm, _SYSTEM, text[:LLM_MAX_INPUT_CHARS], validate=_validated
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
