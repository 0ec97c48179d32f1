"""A benchmark's conversation recorded through Strata's write path, as ``strata eval`` does it.

Benchmark ids may hold characters Strata's ids refuse (:data:`strata.ids.ID_PATTERN`):
:func:`safe_id` replaces them, and :func:`ingest_conversation` returns the map back to the
benchmark's own turn ids, so that hits can be scored against the evidence.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

from strata.ids import ID_CHARS
from strata_bench.evaluation.datasets import EvalConversation

__all__ = ["TurnWriter", "ingest_conversation", "progress", "safe_id"]

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


async def ingest_conversation(client: TurnWriter, conversation: EvalConversation) -> tuple[list[str], dict[str, str]]:
    """Record every session of ``conversation`` through the write path; returns the session ids
    written and a map from stored turn id to benchmark turn id."""
    sessions: list[str] = []
    bar = progress(len(conversation.turns), f"ingest {conversation.id}")
    for session in conversation.sessions:
        session_id = safe_id(session.id)
        sessions.append(session_id)
        turns = [
            {
                "user": t.text + (f" [shared an image: {t.image_caption}]" if t.image_caption else ""),
                "speaker": t.speaker[:64],
                "turn_id": safe_id(t.id),
                # Turns of a session share its date; seconds keep their order.
                "timestamp": session.date + timedelta(seconds=n) if session.date else None,
            }
            for n, t in enumerate(session.turns)
        ]
        for start in range(0, len(turns), _BATCH):
            await client.record_turns(session_id, turns[start : start + _BATCH])
            bar.update(len(turns[start : start + _BATCH]))
    bar.close()
    return sessions, {safe_id(t.id): t.id for t in conversation.turns}
