"""The long turns of :class:`~strata.episodic.memory.EpisodicMemory`: how a turn is cut into
passages (:mod:`strata.episodic.passages`), the rows that keep them, and the passages' vectors,
which a write may give or leave for later (:meth:`LongTurns.unembedded`, embedded by the
episodic shard in the background, one turn at a time, so a long write answers in about the
time of its store write).

:class:`~strata.episodic.memory.EpisodicMemory`, the only subclass, holds the state read here;
the attributes are declared below.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from strata.clock import to_ms
from strata.config import EpisodicSettings
from strata.episodic.passages import PASSAGE, SIDES, Passage, PassageIndex, cut, texts_of
from strata.episodic.turns import Turn
from strata.providers.routes import ScriptRoute
from strata.store.records import Record, RecordStore
from strata.store.ttl import EXPIRES

__all__ = ["WRITE_BATCH", "LongTurns"]

#: Rows per store write: a turn of 1,000,000 ideographs has ~4,000 passages.
WRITE_BATCH = 512


class LongTurns:
    """Passages of long turns: cutting, rows, vectors written after the turn (see the module)."""

    tenant: str
    _store: RecordStore
    _collection: str
    _settings: EpisodicSettings
    _turns: dict[str, Turn]
    _passages: PassageIndex
    _unembedded: set[str]
    _route: ScriptRoute | None
    _routed_raw: dict[str, np.ndarray]

    def _pk(self, *parts: str) -> str:
        return "/".join((self.tenant, *parts))

    def _passage_pk(self, turn: Turn, passage: Passage) -> str:
        return self._pk(turn.session_id, turn.turn_id, "p", f"{passage.side}{passage.n}")

    def passages(self, user: str | None, agent: str | None) -> list[Passage]:
        """The passages a turn with these sides is indexed by: none for a turn whose sides each fit
        in one (:func:`strata.episodic.passages.cut`)."""
        found: list[Passage] = []
        for side, text in zip(SIDES, (user, agent), strict=True):
            spans = cut(text, self._settings.passage_chars) if text else []
            if len(spans) > 1:
                found.extend(Passage(side, n, start, end) for n, (start, end) in enumerate(spans))
        return found

    def passage_texts(self, user: str | None, agent: str | None) -> list[str]:
        """The passages of a turn with these sides that are embedded (the first
        ``passage_vectors_max``), in order: what :meth:`write` takes the vectors of."""
        return texts_of(user, agent, self.passages(user, agent)[: self._settings.passage_vectors_max])

    def _passage_rows(
        self, turn: Turn, parts: Sequence[Passage], embedded: np.ndarray, routed: Sequence[np.ndarray] = (),
    ) -> list[Record]:
        """The rows of a turn's passages; the first ``len(embedded)`` with their vectors, the
        first ``len(routed)`` with the second model's in their payload (as a turn row keeps it)."""
        texts = texts_of(turn.user, turn.agent, parts)
        route = self._route
        return [
            Record(
                pk=self._passage_pk(turn, p), tenant=self.tenant, session=turn.session_id, kind=PASSAGE,
                ts_ms=to_ms(turn.timestamp), text=texts[i],
                payload={
                    "turn_id": turn.turn_id, "side": p.side, "n": p.n, "start": p.start, "end": p.end,
                    "embedded": i < len(embedded), **({EXPIRES: turn.expires_ms} if turn.expires_ms else {}),
                    **({"routed": route.encode(routed[i])} if route is not None and i < len(routed) else {}),
                },
                vector=embedded[i] if i < len(embedded) else None,
            )
            for i, p in enumerate(parts)
        ]

    # -- passages embedded after the write ------------------------------------------

    def unembedded(self) -> list[str]:
        """The long turns (by key) whose passages wait for their vectors: written without them,
        or loaded from rows written before their vectors were."""
        return sorted(self._unembedded)

    def texts_to_embed(self, key: str) -> list[str]:
        """The passages of the turn ``key`` that are to be embedded (its first
        ``passage_vectors_max``); none when it is gone or has its vectors."""
        if key not in self._unembedded:
            return []
        turn = self._turns[key]
        return texts_of(turn.user, turn.agent, self._passages.passages(key)[: self._settings.passage_vectors_max])

    def routed_passage_vectors(self, key: str, texts: Sequence[str]) -> list[np.ndarray]:
        """The second model's vectors of ``texts`` (:meth:`texts_to_embed`) when it embedded the
        turn ``key`` itself (a turn mostly in a script the first does not read: its passages
        are too), else none. The model's work, blocking: a worker thread's, outside any lock."""
        if self._route is None or key not in self._routed_raw or not texts:
            return []
        return list(self._route.embed(texts, tenant=self.tenant))

    def write_passage_vectors(
        self, key: str, texts: Sequence[str], vectors: np.ndarray, routed: Sequence[np.ndarray] = (),
    ) -> bool:
        """Durably give the turn ``key``'s first passages their ``vectors`` (those of ``texts``)
        and ``routed`` (:meth:`routed_passage_vectors`); False, writing nothing, when the turn is
        gone, has them already, or is another turn of the same key by now (forgotten and written
        again while they were made). Blocking I/O; no in-memory change."""
        if not texts or self.texts_to_embed(key) != list(texts):
            return False
        parts = self._passages.passages(key)[: len(vectors)]
        self._upsert(self._passage_rows(self._turns[key], parts, vectors, routed))
        return True

    def _upsert(self, rows: Sequence[Record]) -> None:
        """Write ``rows``, :data:`WRITE_BATCH` to a store call. Blocking I/O."""
        for start in range(0, len(rows), WRITE_BATCH):
            self._store.upsert(self._collection, rows[start : start + WRITE_BATCH])

    def index_passage_vectors(self, key: str, vectors: np.ndarray, routed: Sequence[np.ndarray] = ()) -> None:
        """The in-memory half of :meth:`write_passage_vectors` (after it returned True)."""
        if key in self._unembedded:
            self._passages.add_vectors(key, self._turns[key].session_id, vectors, routed)
            self._unembedded.discard(key)
