"""Episodic memory of one tenant: every turn, rolling summaries, retrieval.

Every turn is kept (durably, with its embedding). Per session, the last
``raw_window`` turns form the raw window; turns that leave it are
summarised in chunks of ``summary_threshold``, each turn exactly once (a
summary row records the turns it covers, so after a restart the same
turns are not summarised again). Retrieval is cosine similarity over turns
and summaries, narrowed by session and time range, served from an exact
in-memory index that mirrors the durable rows: this object is the single
writer of both, so they never disagree.

This module is the write path and the reads by session; the values it keeps and their rows
are in :mod:`strata.episodic.turns`; search, in :mod:`strata.episodic.search` (the class this
one extends), and how it fuses its rankings, in :mod:`strata.episodic.ranking`.
"""

from __future__ import annotations

import bisect
import itertools
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from strata.clock import to_ms
from strata.config import EpisodicSettings, TTLSettings
from strata.episodic.long_turns import LongTurns
from strata.episodic.neighbours import NeighbourRows
from strata.episodic.passages import Passage, PassageIndex, cjk_chars, texts_of
from strata.episodic.search import EpisodicSearch
from strata.episodic.summarize import EpisodeSummary
from strata.episodic.turns import (
    SUMMARY,
    TURN,
    SessionSpan,
    SummaryRecord,
    Turn,
    TurnInput,
    read_mentions,
    session_place,
    summary_from_record,
    summary_payload,
    whole_turns,
)
from strata.errors import InvalidInput, NotFound, StoreUnavailable
from strata.ids import validate_id
from strata.limits import TURN_CJK_CHARS_MAX
from strata.paging import SortedIds
from strata.providers.routes import ScriptRoute, routed
from strata.retrieval.entities import EntityExtractor, Extraction, RuleExtractor
from strata.retrieval.graph import KnowledgeGraph
from strata.retrieval.lexical import LANGUAGE_CHARS, LexicalIndex, cjk_share
from strata.retrieval.vectors import VectorIndex
from strata.store.records import Record, RecordStore
from strata.store.ttl import Expiries, expires_ms

__all__ = ["ENTITY_CHARS_MAX", "TURN_ROW_CHARS", "EpisodicMemory"]

#: Entities are extracted from this many characters at most of a turn (its opening).
ENTITY_CHARS_MAX = 20_000
#: A long turn's own row keeps this many characters of its text (its passages keep it all).
TURN_ROW_CHARS = 4_000
_CUT_AHEAD_MAX = 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The characters of a turn's text the second model is given (it reads 128 tokens of them).
_ROUTED_CHARS = 4_096


def _opening(item: TurnInput) -> str:
    """The opening of the text a turn is embedded as (:attr:`Turn.text`), for the second model."""
    cut = [side[:_ROUTED_CHARS] if side else side for side in (item.user, item.agent)]
    return Turn("", "", 0, _EPOCH, cut[0], cut[1], item.speaker, {}).text[:_ROUTED_CHARS]


def _said(item: TurnInput) -> str:
    """What a turn says, as the route reads it: the opening of each side (they are up to 1 MB)."""
    return "\n".join(side[:LANGUAGE_CHARS] for side in (item.user, item.agent) if side)


class EpisodicMemory(EpisodicSearch, LongTurns):
    """All episodic state of one tenant, persisted through a :class:`RecordStore`."""

    def __init__(
        self,
        tenant: str,
        *,
        store: RecordStore,
        collection: str,
        settings: EpisodicSettings,
        extractor: EntityExtractor | None = None,
        ttl: TTLSettings | None = None,
        route: ScriptRoute | None = None,
    ) -> None:
        """``route``: the second model, for turns in a script the first does not read
        (:mod:`strata.providers.routes`); None: every turn by the first alone."""
        self.tenant = validate_id(tenant, field="tenant")
        self._store = store
        self._collection = collection
        self._settings = settings
        self._ttl = ttl or TTLSettings()
        #: Deadlines of turns and summaries, keyed (TURN, key) and (SUMMARY, key).
        self.expiries: Expiries[tuple[str, str]] = Expiries()
        self._extractor = extractor or RuleExtractor()
        self._graph = KnowledgeGraph()
        self._turns: dict[str, Turn] = {}  # key: session/turn_id
        self._summaries: dict[str, SummaryRecord] = {}
        self._turn_index = VectorIndex()
        self._summary_index = VectorIndex()
        self._turn_lexical = LexicalIndex()
        self._summary_lexical = LexicalIndex()
        self._passages = PassageIndex()  # long turns' passages (strata.episodic.passages)
        self._cut_ahead: dict[str, list[Passage]] = {}  # by write(), for the index() that follows
        self._unembedded: set[str] = set()  # long turns whose passages wait for their vectors
        # Derived search state: each turn's own vector, and the sessions' turns in
        # time order, so a turn's indexed vector can include its neighbours'.
        self._raw: dict[str, np.ndarray] = {}
        # The same for the turns the second model embedded: their own vectors, and an index of
        # them mixed with their neighbours' as the turn index is (its own rows).
        self._route = route
        self._routed_raw: dict[str, np.ndarray] = {}
        self._routed_index = VectorIndex()
        # The turn index's row of each routed_index row, and whether it is one of those mostly in CJK
        # (placed by the route's CJK span): the first len(routed_index) entries of each.
        self._routed_rows: np.ndarray | None = None
        self._routed_cjk: set[str] = set()
        self._routed_cjk_rows: np.ndarray | None = None
        # Turns whose rows were written before the time they speak of, or the route, was read:
        # read again at every load until the shard writes them back (:meth:`refreshed`).
        self._stale: dict[str, None] = {}
        self._mentioned: dict[str, tuple[int, ...]] = {}  # turns that speak of a time: its (start, end) ms
        self._order: dict[str, list[tuple[tuple[datetime, int], str]]] = {}
        self._session_ids = SortedIds()  # the sessions with turns, for pages of them
        # Each turn's neighbours as rows of the turn index, so the dense path can draw a turn
        # toward a better-matching neighbour (none when ``dense_context_weight`` is 0).
        self._near = (
            NeighbourRows(settings.dense_context_window)
            if settings.dense_context_weight and settings.dense_context_window else None
        )
        self._speakers: Counter[str] = Counter()
        self._speakers_token: int | None = None  # of the speaker labels, computed when asked
        self._summarised: dict[str, set[str]] = {}  # session -> turn ids covered by a summary
        # Sessions that may hold turns waiting for a summary: those written to, or whose summary
        # was dropped, since pending_summaries() last found nothing there. A write checks these,
        # not every session of the tenant (a tenant of 4,000 one-turn sessions cost 301 ms a write).
        self._unsettled: set[str] = set()
        self._next_seq = 0

    # -- loading ------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the in-memory index from the durable rows of this tenant."""
        rows = self._store.scan(self._collection, tenant=self.tenant)
        for row, turn, parts in whole_turns(rows):
            if row.vector is None:  # scan() reads vectors: a turn row without one is damaged
                raise StoreUnavailable(f"tenant {self.tenant!r}: turn row {row.pk!r} has no vector")
            embedded = [p.vector for p in parts if p.payload.get("embedded") and p.vector is not None]
            routed: list[np.ndarray] = []
            if self._route is not None and turn.routed:
                for p in parts:
                    vector = self._route.decode(p.payload.get("routed"))
                    if vector is None:
                        break
                    routed.append(vector)
            self._index_turn(
                turn, row.vector, np.stack(embedded).astype(np.float32) if embedded else None, passage_routed=routed,
            )
        summaries = (row for row in rows if row.kind == SUMMARY)
        for row in sorted(summaries, key=lambda r: int(r.payload.get("last_seq", 0))):
            self._index_summary(summary_from_record(row), row.vector)

    # -- writing ------------------------------------------------------------

    def replayed(self, session_id: str, inputs: Sequence[TurnInput]) -> list[Turn] | None:
        """The recorded turns, when every input names a turn already recorded in the
        session with the same text and speaker: a retry of a write that landed though
        its caller never heard so (a crash or a lost answer after the durable write).
        None otherwise, and :meth:`prepare` then refuses an existing id."""
        found: list[Turn] = []
        for item in inputs:
            turn = self._turns.get(f"{session_id}/{item.turn_id}") if item.turn_id else None
            if turn is None or (turn.user, turn.agent, turn.speaker) != (item.user, item.agent, item.speaker):
                return None
            found.append(turn)
        return found or None

    def prepare(
        self, session_id: str, inputs: Sequence[TurnInput], *, now: datetime,
        routed_vectors: Sequence[np.ndarray | None] | None = None,
    ) -> list[Turn]:
        """Validate inputs and assign turn ids and sequence numbers (no write yet).

        With a route, the turns whose text it takes keep their vector by the second model:
        ``routed_vectors`` (one per input, None for a turn not routed: :meth:`routed_vectors`),
        or made here when not given.

        Raises:
            InvalidInput: an empty turn, an over-long text, a bad or duplicate turn id.
        """
        validate_id(session_id, field="session_id")
        turns: list[Turn] = []
        seen: set[str] = set()
        seq = self._next_seq
        for position, item in enumerate(inputs):
            if not (item.user or "").strip() and not (item.agent or "").strip():
                raise InvalidInput(f"turn {position}: give user or agent text (both are empty)")
            limit = self._settings.max_turn_chars
            if max(len(item.user or ""), len(item.agent or "")) > limit:
                raise InvalidInput(
                    f"turn {position}: user and agent text are limited to {limit} characters each"
                    " (episodic.max_turn_chars)", field=f"turns[{position}]",
                )
            for side, said in (("user", item.user), ("agent", item.agent)):
                if said and len(said) > TURN_CJK_CHARS_MAX and cjk_chars(said) > TURN_CJK_CHARS_MAX:
                    raise InvalidInput(
                        f"turn {position}: {side} holds more than {TURN_CJK_CHARS_MAX} CJK characters, the most"
                        " a turn's side may (segmenting them for search is the costly part): split it",
                        field=f"turns[{position}].{side}",
                    )
            turn_id = item.turn_id or f"t{seq:06d}-{uuid.uuid4().hex[:6]}"
            validate_id(turn_id, field=f"turns[{position}].turn_id")
            if turn_id in seen or f"{session_id}/{turn_id}" in self._turns:
                raise InvalidInput(
                    f"turn id {turn_id!r} already exists in session {session_id!r} with other content: "
                    "a retry must send the same turns as the first attempt, or use a new turn id"
                )
            seen.add(turn_id)
            timestamp = item.timestamp or now
            if timestamp.tzinfo is None:
                timestamp = timestamp.replace(tzinfo=UTC)
            deadline = expires_ms(self._ttl.seconds(self.tenant, "episodic", item.ttl_s), now=now)
            turn = Turn(session_id, turn_id, seq, timestamp, item.user, item.agent, item.speaker, dict(item.metadata))
            # Entities are read off the opening of a long turn (the graph path weighs 0 by default).
            entities = self._extractor.extract(turn.said[:ENTITY_CHARS_MAX]).to_dict()
            turn = replace(turn, entities=entities, expires_ms=deadline, mentions=read_mentions(turn.said, timestamp))
            turns.append(turn)
            seq += 1
        if self._route is not None:
            if routed_vectors is None:
                routed_vectors = self.routed_vectors(inputs)
            # {}: read by the route and not taken, so a later load does not read it again.
            turns = [
                replace(turn, routed=self._route.encode(vector) if vector is not None else {})
                for turn, vector in zip(turns, routed_vectors, strict=True)
            ]
        return turns

    def routes_any(self, inputs: Sequence[TurnInput]) -> bool:
        """Whether the second model takes any of these turns (reads at most 500 characters a side)."""
        return self._route is not None and any(routed(_said(item)) for item in inputs)

    def routed_vectors(self, inputs: Sequence[TurnInput], *, counted: bool = True) -> list[np.ndarray | None]:
        """The second model's vector of each turn it takes, by what was said (the speaker labels
        are Latin), of the text the first embeds; None for the others, and for all without a
        route. One call, which the shard makes before the write's lock. ``counted``: the tokens
        it read count as the tenant's embedding usage (not for rows brought up to date)."""
        out: list[np.ndarray | None] = [None] * len(inputs)
        if self._route is None:
            return out
        wanted = [i for i, item in enumerate(inputs) if routed(_said(item))]
        if wanted:
            # Its opening: the model reads 256 tokens, and a token is a few characters (1 MB sides).
            texts = [_opening(inputs[i]) for i in wanted]
            vectors = self._route.embed(texts, tenant=self.tenant if counted else None)
            for i, vector in zip(wanted, vectors, strict=True):
                out[i] = vector
        return out

    # -- rows written before: brought up to date in the background ---------------------

    def stale(self, limit: int = 64) -> list[str]:
        """Up to ``limit`` turns whose rows lack what this version reads at the write: the time
        they speak of, or (with a route) whether the second model takes them."""
        return list(itertools.islice(self._stale, limit))

    def refreshed(self, keys: Sequence[str]) -> list[tuple[Turn, Turn]]:
        """Each of these stale turns with what its row lacks: ``(as indexed, brought up to date)``.
        The model's work, and no change here: :meth:`write_refreshed` then :meth:`index_refreshed`."""
        turns = [self._turns[key] for key in keys if key in self._stale]
        routed_vectors: list[np.ndarray | None] = [None] * len(turns)
        if self._route is not None:
            missing = [i for i, turn in enumerate(turns) if turn.routed is None]
            inputs = [TurnInput(user=turns[i].user, agent=turns[i].agent, speaker=turns[i].speaker) for i in missing]
            for i, vector in zip(missing, self.routed_vectors(inputs, counted=False), strict=True):
                routed_vectors[i] = vector
        out = []
        for turn, vector in zip(turns, routed_vectors, strict=True):
            routed_now = turn.routed
            if self._route is not None and routed_now is None:
                routed_now = self._route.encode(vector) if vector is not None else {}
            out.append((turn, replace(turn, mentions=turn.mentioned(), routed=routed_now)))
        return out

    def write_refreshed(self, pairs: Sequence[tuple[Turn, Turn]]) -> list[tuple[Turn, Turn]]:
        """Write the up-to-date rows of the turns still as they were indexed (a turn forgotten or
        written again meanwhile is left alone); returns those written. Blocking I/O; no change here."""
        kept = [(old, new) for old, new in pairs if self._turns.get(f"{old.session_id}/{old.turn_id}") is old]
        rows = []
        for _, new in kept:
            key = f"{new.session_id}/{new.turn_id}"
            rows.append(self._turn_row(new, self._raw[key], self._passages.passages(key)))
        self._upsert(rows)
        return kept

    def index_refreshed(self, pairs: Sequence[tuple[Turn, Turn]]) -> None:
        """The in-memory half of :meth:`write_refreshed`, with what it returned."""
        for old, new in pairs:
            key = f"{new.session_id}/{new.turn_id}"
            if self._turns.get(key) is not old:
                continue
            self._turns[key] = new
            self._stale.pop(key, None)
            second = self._route.decode(new.routed) if self._route is not None and new.routed else None
            if second is None:
                continue
            order = self._order[new.session_id]
            position = bisect.bisect_left(order, session_place(new, key))
            self._add_routed(new, key, second, order, position)
            for neighbour in (position - 1, position + 1):
                if 0 <= neighbour < len(order):
                    self._recontext(order, neighbour)

    def record(self, turns: Sequence[Turn], vectors: np.ndarray, passage_vectors: np.ndarray | None = None) -> None:
        """Write prepared turns durably, then index them."""
        self.write(turns, vectors, passage_vectors)
        self.index(turns, vectors, passage_vectors)

    def write(self, turns: Sequence[Turn], vectors: np.ndarray, passage_vectors: np.ndarray | None = None) -> None:
        """The durable half of :meth:`record` (blocking I/O, no in-memory change).

        ``passage_vectors``: the embeddings of every turn's :meth:`passage_texts`, one after
        the other; None: the passages are written without, found by their words until
        :meth:`write_passage_vectors` gives them theirs (:meth:`unembedded` lists them).
        """
        if len(turns) != len(vectors):
            raise ValueError("one vector per turn")
        records: list[Record] = []
        for t, v, parts, embedded in self._with_passages(turns, vectors, passage_vectors):
            key = f"{t.session_id}/{t.turn_id}"
            records.append(self._turn_row(t, v, parts))
            records.extend(self._passage_rows(t, parts, embedded))
            # Cut and segmented here, in the writer's thread, not where :meth:`index` runs.
            if len(self._cut_ahead) >= _CUT_AHEAD_MAX:
                self._cut_ahead.clear()  # cuts no index() took (writes that failed after them)
            self._cut_ahead[key] = parts
            self._turn_lexical.precount(key, self._lexical_text(t, parts))
            self._passages.precount(key, parts, texts_of(t.user, t.agent, parts))
        self._upsert(records)

    def _turn_row(self, t: Turn, vector: np.ndarray, parts: Sequence[Passage]) -> Record:
        """The row of a turn (a long turn's long sides live in its passages' rows)."""
        payload = t.to_dict()
        text = t.text
        if parts:
            long_sides = {p.side for p in parts}
            payload.update({side: None for side in long_sides})
            payload["passages"] = {side: sum(p.side == side for p in parts) for side in long_sides}
            text = text[:TURN_ROW_CHARS]
        return Record(
            pk=self._pk(t.session_id, t.turn_id), tenant=self.tenant, session=t.session_id, kind=TURN,
            ts_ms=to_ms(t.timestamp), text=text, payload=payload, vector=vector,
        )

    def index(self, turns: Sequence[Turn], vectors: np.ndarray, passage_vectors: np.ndarray | None = None) -> None:
        """The in-memory half of :meth:`record`: make written turns searchable."""
        for (turn, vector, parts, embedded) in self._with_passages(turns, vectors, passage_vectors):
            self._index_turn(turn, vector, embedded, parts)

    def _with_passages(
        self, turns: Sequence[Turn], vectors: np.ndarray, passage_vectors: np.ndarray | None
    ) -> list[tuple[Turn, np.ndarray, list[Passage], np.ndarray]]:
        """Each turn with its vector, its passages and the vectors of those embedded."""
        out = []
        taken = 0
        dim = vectors.shape[-1] if len(vectors) else 0
        for turn, vector in zip(turns, vectors, strict=True):
            parts = self._cut_ahead.pop(f"{turn.session_id}/{turn.turn_id}", None)
            if parts is None:
                parts = self.passages(turn.user, turn.agent)
            wanted = min(len(parts), self._settings.passage_vectors_max) if passage_vectors is not None else 0
            if wanted and passage_vectors is not None and taken + wanted > len(passage_vectors):
                raise ValueError(f"turn {turn.turn_id!r}: {wanted} passage vectors expected, fewer given")
            embedded = (
                passage_vectors[taken : taken + wanted] if passage_vectors is not None
                else np.zeros((0, dim), dtype=np.float32)
            )
            taken += wanted
            out.append((turn, vector, parts, embedded))
        return out

    def pending_summaries(self, session_id: str | None = None) -> list[list[Turn]]:
        """Chunks of turns that left the raw window and no summary covers yet."""
        chunks: list[list[Turn]] = []
        sessions = [session_id] if session_id else sorted(self._unsettled)
        size = self._settings.summary_threshold
        for session in sessions:
            ordered = self.session_turns(session)
            outside = ordered[: max(len(ordered) - self._settings.raw_window, 0)]
            done = self._summarised.get(session, set())
            waiting = [t for t in outside if t.turn_id not in done]
            found = [waiting[i : i + size] for i in range(0, len(waiting) - size + 1, size)]
            if not found:
                self._unsettled.discard(session)  # nothing waits there until it changes
            chunks.extend(found)
        return chunks

    def add_summary(self, turns: Sequence[Turn], content: EpisodeSummary, vector: np.ndarray) -> SummaryRecord:
        """Store a summary of ``turns`` (one session); they are never summarised again."""
        record = self.write_summary(turns, content, vector)
        self.index_summary(record, vector)
        return record

    def write_summary(self, turns: Sequence[Turn], content: EpisodeSummary, vector: np.ndarray) -> SummaryRecord:
        """The durable half of :meth:`add_summary`."""
        session = turns[0].session_id
        deadlines = [t.expires_ms for t in turns if t.expires_ms]
        record = SummaryRecord(
            summary_id=f"s{turns[0].seq:06d}-{turns[-1].seq:06d}",
            session_id=session,
            turn_ids=tuple(t.turn_id for t in turns),
            first_seq=turns[0].seq,
            last_seq=turns[-1].seq,
            start=min(t.timestamp for t in turns),
            end=max(t.timestamp for t in turns),
            content=content,
            expires_ms=min(deadlines) if deadlines else None,
        )
        self._store.upsert(
            self._collection,
            [
                Record(
                    pk=self._pk(session, "summary", record.summary_id),
                    tenant=self.tenant,
                    session=session,
                    kind=SUMMARY,
                    ts_ms=to_ms(record.start),
                    text=content.summary[:20000],
                    payload=summary_payload(record),
                    vector=vector,
                )
            ],
        )
        return record

    def index_summary(self, record: SummaryRecord, vector: np.ndarray) -> None:
        """The in-memory half of :meth:`add_summary`."""
        self._index_summary(record, vector)

    def forget_session(self, session_id: str) -> int:
        """Delete every turn and summary of a session from the store and the index."""
        removed = self.delete_session(session_id)
        self.drop_session(session_id)
        return removed

    def turn_keys(self, session_id: str, turn_id: str) -> tuple[list[str], list[str]]:
        """The keys forgetting one turn removes: the turn's, and those of the summaries that
        cover it (a summary carries its turns' content; :meth:`drop_keys` summarises the rest
        of them again).

        Raises:
            NotFound: the session has no such turn.
        """
        validate_id(session_id, field="session_id")
        validate_id(turn_id, field="turn_id")
        key = f"{session_id}/{turn_id}"
        if key not in self._turns:
            raise NotFound(f"session {session_id!r} has no turn {turn_id!r}")
        summaries = sorted(
            k for k, s in self._summaries.items() if s.session_id == session_id and turn_id in s.turn_ids
        )
        return [key], summaries

    def delete_session(self, session_id: str) -> int:
        """The durable half of :meth:`forget_session`.

        Raises:
            NotFound: the session has no turns.
        """
        validate_id(session_id, field="session_id")
        if session_id not in self._order:
            raise NotFound(f"session {session_id!r} has no episodic memory")
        return self._store.delete(self._collection, tenant=self.tenant, session=session_id)

    def drop_session(self, session_id: str) -> None:
        """The in-memory half of :meth:`forget_session`."""
        self._drop(
            [key for _, key in self._order.get(session_id, [])],
            [k for k, s in self._summaries.items() if s.session_id == session_id],
        )

    # -- expiry ---------------------------------------------------------------

    def expired(self, at_ms: int) -> tuple[list[str], list[str]]:
        """Keys of the turns and summaries expired at ``at_ms``; a summary of an expired
        turn goes with it (its deadline is its turns' earliest)."""
        keys = self.expiries.expired(at_ms)
        turns = [key for kind, key in keys if kind == TURN]
        summaries = {key for kind, key in keys if kind == SUMMARY}
        gone = {(self._turns[k].session_id, self._turns[k].turn_id) for k in turns}
        summaries |= {k for k, s in self._summaries.items() if any((s.session_id, t) in gone for t in s.turn_ids)}
        return turns, sorted(summaries)

    def delete_keys(self, turn_keys: Sequence[str], summary_keys: Sequence[str]) -> int:
        """Delete turns and summaries (by key) from the store; the rows removed."""
        pks = [self._pk(self._turns[k].session_id, self._turns[k].turn_id) for k in turn_keys]
        pks += [self._passage_pk(self._turns[k], p) for k in turn_keys for p in self._passages.passages(k)]
        pks += [self._pk(self._summaries[k].session_id, "summary", self._summaries[k].summary_id) for k in summary_keys]
        return self._store.delete(self._collection, tenant=self.tenant, pks=pks) if pks else 0

    def drop_keys(self, turn_keys: Sequence[str], summary_keys: Sequence[str]) -> None:
        """Remove turns and summaries from memory. Turns a dropped summary covered are
        summarised again, from what remains; the turns next to dropped ones are re-indexed
        (their neighbours changed), and no others: forgetting one turn costs what it touches,
        not the session (53 ms at 8,000 turns in one session when every turn was re-indexed)."""
        gaps = [(self._turns[key].session_id, session_place(self._turns[key], key)) for key in turn_keys]
        self._drop(turn_keys, summary_keys)
        for session, place in gaps:
            order = self._order.get(session)
            if not order:
                continue
            after = bisect.bisect(order, place)  # the first turn after the dropped one
            for position in (after - 1, after):
                if 0 <= position < len(order):
                    self._recontext(order, position)
            if self._near is not None:
                self._near.refill(self._turn_index, order, after)

    def _drop(self, turn_keys: Sequence[str], summary_keys: Sequence[str]) -> None:
        """Remove turns and summaries from the in-memory state, touching only their sessions."""
        gone, gone_summaries = set(turn_keys), set(summary_keys)
        sessions = {self._turns[k].session_id for k in gone}
        self._turn_lexical.remove(list(gone))
        self._passages.remove(gone)
        self._unembedded -= gone
        self._graph.remove(list(gone))
        for key in gone:
            self._raw.pop(key, None)
            self._routed_raw.pop(key, None)
            self._routed_cjk.discard(key)
            self._stale.pop(key, None)
            speaker = self._turns[key].speaker
            if speaker:
                self._speakers[speaker] -= 1
        self._speakers = +self._speakers  # drop speakers with no turns left
        self._speakers_token = None
        for session in sessions:
            order = [entry for entry in self._order.get(session, ()) if entry[1] not in gone]
            if order:
                self._order[session] = order
            else:
                self._order.pop(session, None)
                self._session_ids.discard(session)
        for key in gone_summaries:
            summary = self._summaries.pop(key)
            sessions.add(summary.session_id)
            self._summarised.get(summary.session_id, set()).difference_update(summary.turn_ids)
            self._unsettled.add(summary.session_id)  # its turns are summarised again
        for key in gone:
            turn = self._turns.pop(key)
            self._mentioned.pop(key, None)
            self._summarised.get(turn.session_id, set()).discard(turn.turn_id)
        for session in sessions:
            if not self._summarised.get(session, True):
                del self._summarised[session]
        self._summary_lexical.remove(list(gone_summaries))
        rows = [row for key in gone if (row := self._turn_index.position(key)) is not None]
        before = len(self._turn_index)
        self._turn_index.remove(gone)
        self._routed_index.remove(gone)
        self._routed_rows = self._routed_cjk_rows = None  # rows were renumbered
        self._passages.turns_moved()
        if self._near is not None:
            self._near.removed(rows, before)  # rows were renumbered
        self._summary_index.remove(gone_summaries)
        self.expiries.drop([(TURN, k) for k in gone] + [(SUMMARY, k) for k in gone_summaries])

    # -- reading ------------------------------------------------------------

    def session_turns(self, session_id: str) -> list[Turn]:
        """The session's turns in time order (caller-given timestamps first, arrival order on
        ties): a new list, read off the session's own order, whatever the tenant holds besides."""
        return [self._turns[key] for _, key in self._order.get(session_id, ())]

    def turns_page(
        self, session_id: str, *, after: str | None = None, limit: int = 50, newest_first: bool = False
    ) -> tuple[list[Turn], int, bool]:
        """Up to ``limit`` of the session's turns in time order (``newest_first``: the other way),
        after the turn ``after`` in that order; with the session's turn count and whether more
        follow. Costs the page and a bisection, whatever the session's length.

        Raises:
            NotFound: the session has no turns.
            InvalidInput: ``after`` names no turn of the session.
        """
        order = self._order.get(session_id)
        if not order:
            raise NotFound(f"session {session_id!r} has no turns")
        total, start = len(order), 0
        if after is not None:
            key = f"{session_id}/{after}"
            turn = self._turns.get(key)
            at = bisect.bisect_left(order, session_place(turn, key)) if turn is not None else total
            if at == total or order[at][1] != key:
                gone = f"session {session_id!r} has no turn {after!r} (forgotten or expired?)"
                raise InvalidInput(f"{gone}: start again without after", field="after")
            start = total - at if newest_first else at + 1  # the position just past it, in the order asked
        end = min(start + max(limit, 0), total)
        rows = (order[total - 1 - n] for n in range(start, end)) if newest_first else iter(order[start:end])
        return [self._turns[key] for _, key in rows], total, end < total

    def sessions_page(self, *, after: str | None = None, limit: int = 50) -> tuple[list[SessionSpan], int, bool]:
        """Up to ``limit`` of the sessions with turns, by id, after the session id ``after``;
        with how many sessions there are and whether more follow."""
        ids, more = self._session_ids.page(after=after, limit=limit)
        spans = [
            SessionSpan(s, len(order), order[0][0][0], order[-1][0][0]) for s in ids for order in (self._order[s],)
        ]
        return spans, len(self._session_ids), more

    def raw_window(self, session_id: str) -> list[Turn]:
        return [self._turns[key] for _, key in self._order.get(session_id, [])[-self._settings.raw_window :]]

    def session_length(self, session_id: str) -> int:
        """How many turns the session has."""
        return len(self._order.get(session_id, ()))

    def summaries(self, session_id: str | None = None) -> list[SummaryRecord]:
        found = (s for s in self._summaries.values() if session_id is None or s.session_id == session_id)
        return sorted(found, key=lambda s: s.first_seq)

    @property
    def turn_count(self) -> int:
        return len(self._turns)

    # -- internals ----------------------------------------------------------

    def _lexical_text(self, turn: Turn, parts: Sequence[Passage]) -> str:
        """What the turn itself is BM25-indexed by: its text, or the opening of a long one (its
        passages are indexed one by one)."""
        return turn.text[: self._settings.passage_chars] if parts else turn.text

    def _index_turn(
        self, turn: Turn, vector: np.ndarray, passage_vectors: np.ndarray | None = None,
        parts: Sequence[Passage] | None = None, passage_routed: Sequence[np.ndarray] = (),
    ) -> None:
        key = f"{turn.session_id}/{turn.turn_id}"
        if parts is None:
            parts = self.passages(turn.user, turn.agent)
        second = self._route.decode(turn.routed) if self._route is not None and turn.routed else None
        if parts:
            texts = texts_of(turn.user, turn.agent, parts)
            embedded = passage_vectors if passage_vectors is not None else np.zeros((0, len(vector)), np.float32)
            self._passages.add(key, turn.session_id, parts, texts, embedded, passage_routed)
            wanted = min(len(parts), self._settings.passage_vectors_max)
            # A routed turn's passages want the second model's vectors too (rows written before lack them).
            if len(embedded) < wanted or (second is not None and len(passage_routed) < wanted):
                self._unembedded.add(key)
        self._turns[key] = turn
        mentions = turn.mentioned()
        if mentions:
            self._mentioned[key] = mentions
        if turn.mentions is None or (self._route is not None and turn.routed is None):
            self._stale[key] = None
        self._unsettled.add(turn.session_id)
        if turn.speaker:
            if turn.speaker not in self._speakers:
                self._speakers_token = None
            self._speakers[turn.speaker] += 1
        order = self._order.setdefault(turn.session_id, [])
        if not order:
            self._session_ids.add(turn.session_id)
        place = session_place(turn, key)
        position = bisect.bisect(order, place)
        order.insert(position, place)
        self._raw[key] = np.asarray(vector, dtype=np.float32)
        self._turn_index.add(key, self._context_vector(order, position), turn.session_id)
        if second is not None:
            self._add_routed(turn, key, second, order, position)
        if self._near is not None:
            self._near.inserted(self._turn_index, order, position)
        for neighbour in (position - 1, position + 1):
            if 0 <= neighbour < len(order):
                self._recontext(order, neighbour)
        self._turn_lexical.add(key, self._lexical_text(turn, parts))
        self.expiries.set((TURN, key), turn.expires_ms)
        if turn.entities is not None:
            extraction = Extraction.from_dict(turn.entities)
        else:
            extraction = self._extractor.extract(turn.said)
        self._graph.add(key, extraction)
        self._next_seq = max(self._next_seq, turn.seq + 1)

    def _context_vector(
        self, order: list[tuple[tuple[datetime, int], str]], position: int, raw: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """A turn's own vector plus a share of its neighbours' in the session: a
        reply such as "yes, twice last year" is found through what it answers. ``raw``: the
        vectors of one model (the first's by default; a neighbour without one adds nothing)."""
        raw = self._raw if raw is None else raw
        weight = self._settings.context_neighbour_weight
        vector = raw[order[position][1]].copy()
        for neighbour in (position - 1, position + 1):
            if weight and 0 <= neighbour < len(order) and order[neighbour][1] in raw:
                vector += weight * raw[order[neighbour][1]]
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    def _add_routed(
        self, turn: Turn, key: str, vector: np.ndarray, order: list[tuple[tuple[datetime, int], str]], position: int,
    ) -> None:
        """Index the second model's ``vector`` of a turn already in the turn index."""
        self._routed_raw[key] = vector
        self._routed_index.add(key, self._context_vector(order, position, self._routed_raw), turn.session_id)
        cjk = cjk_share("\n".join(side[:LANGUAGE_CHARS] for side in (turn.user, turn.agent) if side)) >= 0.5
        if cjk:
            self._routed_cjk.add(key)
        row = self._turn_index.position(key)
        n = len(self._routed_index)
        if self._routed_rows is None or self._routed_cjk_rows is None or row is None:
            self._routed_rows = self._routed_cjk_rows = None  # found again at the next search
            return
        if n > len(self._routed_rows):  # grown by doubling: appends are O(1)
            self._routed_rows = np.concatenate([self._routed_rows, np.zeros(max(n, 16), dtype=np.intp)])
            self._routed_cjk_rows = np.concatenate([self._routed_cjk_rows, np.zeros(max(n, 16), dtype=bool)])
        self._routed_rows[n - 1] = row
        self._routed_cjk_rows[n - 1] = cjk

    def _recontext(self, order: list[tuple[tuple[datetime, int], str]], position: int) -> None:
        """The turn at ``position`` has other neighbours: its indexed vectors again."""
        key = order[position][1]
        self._turn_index.set(key, self._context_vector(order, position))
        if key in self._routed_raw:
            self._routed_index.set(key, self._context_vector(order, position, self._routed_raw))

    def _index_summary(self, summary: SummaryRecord, vector: np.ndarray | None) -> None:
        key = f"{summary.session_id}/{summary.summary_id}"
        self._summaries[key] = summary
        if vector is not None:
            self._summary_index.add(key, vector, summary.session_id)
        self._summary_lexical.add(key, " ".join([summary.text, *summary.content.key_topics]))
        self.expiries.set((SUMMARY, key), summary.expires_ms)
        self._summarised.setdefault(summary.session_id, set()).update(summary.turn_ids)
