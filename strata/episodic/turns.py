"""What episodic memory keeps: turns, summaries of them, the hits a search returns,
and how each is written to (and read back from) its row in the record store.

A turn's row holds :meth:`Turn.to_dict` as its payload; a summary's holds
:func:`summary_payload`. :func:`turn_from_record` and :func:`summary_from_record`
read them back, so a restart rebuilds exactly what was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from strata.clock import to_ms
from strata.episodic.passages import PASSAGE, SIDES, joined
from strata.episodic.summarize import EpisodeSummary, SummaryInput
from strata.retrieval.timeparse import mentioned_time
from strata.store.records import Record
from strata.store.ttl import EXPIRES

__all__ = [
    "SUMMARY",
    "TURN",
    "EpisodicHit",
    "SessionSpan",
    "SummaryRecord",
    "Turn",
    "TurnInput",
    "read_mentions",
    "session_place",
    "summary_from_record",
    "summary_inputs",
    "summary_payload",
    "summary_vector_text",
    "turn_from_record",
    "vector_texts",
    "whole_turns",
]

#: The ``kind`` of a row, and of a hit.
TURN, SUMMARY = "turn", "summary"
#: The payload key of the time a turn speaks of (:attr:`Turn.mentions`).
MENTIONS = "when"
#: The payload key of a turn's vector by the second model (:attr:`Turn.routed`).
ROUTED = "routed"


@dataclass(frozen=True)
class TurnInput:
    """What a caller records: one exchange, either side optional but not both."""

    user: str | None = None
    agent: str | None = None
    timestamp: datetime | None = None
    turn_id: str | None = None
    #: Label for the user side ("Caroline"); "user" when unset.
    speaker: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Seconds it lives; it may shorten the configured TTL, never lengthen it.
    ttl_s: float | None = None


@dataclass(frozen=True)
class Turn:
    session_id: str
    turn_id: str
    seq: int
    timestamp: datetime
    user: str | None
    agent: str | None
    speaker: str | None
    metadata: dict[str, Any]
    #: What the entity extractor found in the turn (``Extraction.to_dict()``);
    #: None for rows written before extraction existed.
    entities: dict[str, Any] | None = None
    #: When it expires (epoch ms); None: never.
    expires_ms: int | None = None
    #: The time it speaks of (:func:`~strata.retrieval.timeparse.mentioned_time`), as epoch ms
    #: ``(start, end)``; ``()`` when it names none; None when not read yet (rows written before).
    mentions: tuple[int, ...] | None = None
    #: Its vector by the second model, as :meth:`strata.providers.routes.ScriptRoute.encode`
    #: keeps it, when its text was routed there; None otherwise.
    routed: dict[str, str] | None = None

    @property
    def said(self) -> str:
        """What was said, without the speaker labels (entities are extracted from this)."""
        return "\n".join(part for part in (self.user, self.agent) if part)

    @property
    def text(self) -> str:
        parts = []
        if self.user:
            parts.append(f"{self.speaker or 'user'}: {self.user}")
        if self.agent:
            parts.append(f"assistant: {self.agent}")
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "turn_id": self.turn_id,
            "seq": self.seq,
            "timestamp": self.timestamp.isoformat(),
            "user": self.user,
            "agent": self.agent,
            "speaker": self.speaker,
            "metadata": self.metadata,
            "graph": self.entities,
            **({EXPIRES: self.expires_ms} if self.expires_ms else {}),
            **({MENTIONS: list(self.mentions)} if self.mentions is not None else {}),
            **({ROUTED: self.routed} if self.routed is not None else {}),
        }

    def mentioned(self) -> tuple[int, ...]:
        """:attr:`mentions`, read off what was said when a row written before did not keep it."""
        if self.mentions is not None:
            return self.mentions
        return read_mentions(self.said, self.timestamp)


def read_mentions(said: str, at: datetime) -> tuple[int, ...]:
    """The time ``said`` at ``at`` speaks of, as epoch ms ``(start, end)``, or ``()``."""
    found = mentioned_time(said, at) if said else None
    return (to_ms(found.start), to_ms(found.end)) if found is not None else ()


@dataclass(frozen=True)
class SessionSpan:
    """A session as episodic memory knows it: how many turns, when the first and the last were said."""

    session_id: str
    turns: int
    first_at: datetime
    last_at: datetime


@dataclass(frozen=True)
class SummaryRecord:
    summary_id: str
    session_id: str
    turn_ids: tuple[str, ...]
    first_seq: int
    last_seq: int
    start: datetime
    end: datetime
    content: EpisodeSummary
    #: The earliest deadline of the turns it summarises: it goes with the first of them.
    expires_ms: int | None = None

    @property
    def text(self) -> str:
        return self.content.summary


@dataclass(frozen=True)
class EpisodicHit:
    """A retrieved turn or summary. ``score`` is cosine similarity, higher is closer."""

    kind: str
    id: str
    session_id: str
    text: str
    timestamp: datetime
    score: float
    turn_ids: tuple[str, ...] = ()
    end: datetime | None = None
    #: 1-based rank on each retrieval path that found it ("dense", "lexical").
    ranks: dict[str, int] = field(default_factory=dict)
    #: How well it matches the query, in [0, 1] and comparable across queries
    #: (:mod:`strata.retrieval.relevance`); ``score`` only orders one query's hits.
    relevance: float = 0.0
    #: A long turn's passage the text quotes: (side, start, end) in that side's characters.
    span: tuple[str, int, int] | None = None
    #: A later turn among the same search's hits that states the same thing (its id):
    #: :mod:`strata.episodic.updates`.
    superseded_by: str | None = None
    #: A turn: the time it speaks of (:attr:`Turn.mentions`), ``[start, end)``.
    speaks_of: tuple[datetime, datetime] | None = None


def summary_payload(record: SummaryRecord) -> dict[str, Any]:
    """The payload of a summary's row."""
    return {
        "summary_id": record.summary_id,
        "turn_ids": list(record.turn_ids),
        "first_seq": record.first_seq,
        "last_seq": record.last_seq,
        "start": record.start.isoformat(),
        "end": record.end.isoformat(),
        "content": record.content.to_dict(),
        **({EXPIRES: record.expires_ms} if record.expires_ms else {}),
    }


def turn_from_record(row: Record) -> Turn:
    p = row.payload
    return Turn(
        session_id=p["session_id"],
        turn_id=p["turn_id"],
        seq=int(p["seq"]),
        timestamp=datetime.fromisoformat(p["timestamp"]),
        user=p.get("user"),
        agent=p.get("agent"),
        speaker=p.get("speaker"),
        metadata=p.get("metadata") or {},
        entities=p.get("graph"),
        expires_ms=p.get(EXPIRES),
        mentions=tuple(p[MENTIONS]) if p.get(MENTIONS) is not None else None,
        routed=p.get(ROUTED),
    )


def summary_from_record(row: Record) -> SummaryRecord:
    p = row.payload
    return SummaryRecord(
        summary_id=p["summary_id"],
        session_id=row.session,
        turn_ids=tuple(p["turn_ids"]),
        first_seq=int(p["first_seq"]),
        last_seq=int(p["last_seq"]),
        start=datetime.fromisoformat(p["start"]),
        end=datetime.fromisoformat(p["end"]),
        content=EpisodeSummary.from_dict(p["content"]),
        expires_ms=p.get(EXPIRES),
    )


def whole_turns(rows: Sequence[Record]) -> list[tuple[Record, Turn, list[Record]]]:
    """The turns among a tenant's ``rows``, each with its row, whole (a long side joined from its
    passages' rows) and its passages' rows in order (user side first); by sequence number."""
    parts: dict[tuple[str, str], list[Record]] = {}
    for row in rows:
        if row.kind == PASSAGE:
            parts.setdefault((row.session, row.payload["turn_id"]), []).append(row)
    out = []
    for row in rows:
        if row.kind != TURN:
            continue
        turn = turn_from_record(row)
        mine = sorted(
            parts.get((turn.session_id, turn.turn_id), []),
            key=lambda r: (SIDES.index(r.payload["side"]), int(r.payload["n"])),
        )
        if mine:
            long_sides = row.payload.get("passages", {})
            whole = {
                name: joined((int(r.payload["n"]), r.text) for r in mine if r.payload["side"] == name)
                for name in SIDES if name in long_sides
            }
            turn = replace(turn, user=whole.get("user", turn.user), agent=whole.get("agent", turn.agent))
        out.append((row, turn, mine))
    out.sort(key=lambda item: item[1].seq)
    return out


def summary_vector_text(content: EpisodeSummary, first: Turn | None) -> str:
    """What a summary is embedded as: its text, or its first turn's when it has none."""
    return content.summary or (first.text if first is not None else "")


def vector_texts(rows: Sequence[Record]) -> list[tuple[Record, str]]:
    """The rows of one tenant that carry a vector (turns, embedded passages, summaries), each
    with the text its vector is made from: what ``strata reindex`` embeds again."""
    whole = whole_turns(rows)
    turns = {f"{t.session_id}/{t.turn_id}": t for _, t, _ in whole}
    out: list[tuple[Record, str]] = [(row, turn.text) for row, turn, _ in whole]
    for row in rows:
        if row.kind == PASSAGE and row.payload.get("embedded"):
            out.append((row, row.text))
        elif row.kind == SUMMARY:
            summary = summary_from_record(row)
            first = turns.get(f"{summary.session_id}/{summary.turn_ids[0]}") if summary.turn_ids else None
            out.append((row, summary_vector_text(summary.content, first)))
    return out


def summary_inputs(turns: Sequence[Turn]) -> list[SummaryInput]:
    """The summariser's view of turns: one entry per speaker utterance."""
    out: list[SummaryInput] = []
    for t in turns:
        if t.user:
            out.append(SummaryInput(t.speaker or "user", t.user))
        if t.agent:
            out.append(SummaryInput("assistant", t.agent))
    return out


def session_place(turn: Turn, key: str) -> tuple[tuple[datetime, int], str]:
    """The turn's entry in its session's order: by time, then arrival, then key."""
    return (turn.timestamp, turn.seq), key
