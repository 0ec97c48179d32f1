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

Extraction is pluggable (:class:`~strata.retrieval.entities.EntityExtractor`);
the values, :func:`~strata.retrieval.entities.entity_key` and the extractors, by
rules and by an LLM, are in :mod:`strata.retrieval.entities`.

How a query's text is read for known names is in :mod:`strata.retrieval.entity_match`.
:class:`KnowledgeGraph`'s writes, resolution and ranking stay in this one module: its
read-side memos are dropped by its writes (:meth:`KnowledgeGraph._changed`), so one
reader can check them together.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable
from itertools import combinations
from typing import Any

from strata.retrieval.entities.extraction import Extraction, entity_key
from strata.retrieval.entity_match import EntityMatcher, singulars

__all__ = ["KnowledgeGraph"]

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
        self._names = EntityMatcher()  # the live keys' lookup forms, for match()
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
                    self._names.add(k)
                sources = self._mentions[k] = set()
            sources.add(slot)
        for a, n in record.aliases:
            if a not in self._mentions and a not in self._alias:
                self._names.add(a)
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

    def _maybe_unindex(self, key: str) -> None:
        if key not in self._mentions and key not in self._alias:
            self._names.discard(key)

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
        candidates += [" ".join([*words[:-1], w]) for w in singulars(words[-1])]
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
        return self._names.match(query, self._canon)

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
