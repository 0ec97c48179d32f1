"""A benchmark's conversation recorded through Strata's write path, as ``strata eval`` does it.

Benchmark ids may hold characters Strata's ids refuse (:data:`strata.ids.ID_PATTERN`):
:func:`safe_id` replaces them, and :func:`ingest_conversation` returns the map back to the
benchmark's own turn ids, so that hits can be scored against the evidence.

One record Strata refuses (a message over its length limit, an empty one) never ends a run:
it is named on stderr with the reason, counted, and the rest of the conversation is written.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from pydantic import ValidationError

from strata.errors import InvalidInput
from strata.ids import ID_CHARS
from strata.schema import TurnIn
from strata_bench.evaluation.datasets import EvalConversation

__all__ = ["Ingested", "TurnWriter", "ingest_conversation", "progress", "safe_id"]

_ID_UNSAFE = re.compile(rf"[^{ID_CHARS}]")
#: Turns per ``record_turns`` call.
_BATCH = 500


def safe_id(raw: str) -> str:
    """``raw`` with each character an id may not hold replaced by ``_``, cut to 128 characters."""
    return _ID_UNSAFE.sub("_", raw)[:128]


def progress(total: int, desc: str, *, enabled: bool = True) -> Any:
    """A progress bar on stderr that leaves no line behind (tqdm's)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="", file=sys.stderr, leave=False, dynamic_ncols=True, disable=not enabled)


class TurnWriter(Protocol):
    """The write call of :class:`~strata_actors.client.InClusterClient` (or the HTTP client)."""

    async def record_turns(self, session_id: str, turns: Sequence[dict[str, Any]]) -> Any: ...


@dataclass
class Ingested:
    """What :func:`ingest_conversation` wrote."""

    #: The session ids written.
    sessions: list[str] = field(default_factory=list)
    #: Stored turn id -> the benchmark's turn id.
    original: dict[str, str] = field(default_factory=dict)
    #: The benchmark's turn ids Strata refused, each with the reason.
    refused: dict[str, str] = field(default_factory=dict)


def _reason(error: ValidationError | InvalidInput) -> str:
    if isinstance(error, InvalidInput):
        return error.message
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'turn'}: {e['msg']}" for e in error.errors())


async def ingest_conversation(client: TurnWriter, conversation: EvalConversation) -> Ingested:
    """Record every session of ``conversation`` through the write path. A turn the write path
    refuses is left out, named on stderr and in :attr:`Ingested.refused`; the others are written."""
    out = Ingested(original={safe_id(t.id): t.id for t in conversation.turns})
    bar = progress(len(conversation.turns), f"ingest {conversation.id}")

    def refuse(turn: dict[str, Any], error: ValidationError | InvalidInput) -> None:
        original = out.original.get(turn["turn_id"], turn["turn_id"])
        out.refused[original] = _reason(error)
        bar.write(f"{conversation.id}: turn {original!r} refused, left out: {out.refused[original]}", file=sys.stderr)

    for session in conversation.sessions:
        session_id = safe_id(session.id)
        out.sessions.append(session_id)
        turns = []
        for n, t in enumerate(session.turns):
            turn = {
                "user": t.text + (f" [shared an image: {t.image_caption}]" if t.image_caption else ""),
                "speaker": t.speaker[:64],
                "turn_id": safe_id(t.id),
                # Turns of a session share its date; seconds keep their order.
                "timestamp": session.date + timedelta(seconds=n) if session.date else None,
            }
            try:
                TurnIn.model_validate(turn)  # what the write path checks first, one turn at a time
            except ValidationError as error:
                refuse(turn, error)
                bar.update(1)
                continue
            turns.append(turn)
        for start in range(0, len(turns), _BATCH):
            batch = turns[start : start + _BATCH]
            try:
                await client.record_turns(session_id, batch)
            except InvalidInput:  # refused by a later check: find which, one turn at a time
                for turn in batch:
                    try:
                        await client.record_turns(session_id, [turn])
                    except InvalidInput as error:
                        refuse(turn, error)
            bar.update(len(batch))
    bar.close()
    return out
