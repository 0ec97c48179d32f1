"""``strata eval``'s ingest never ends a run on one record: a turn the write path refuses is named
with its reason and left out, and every other turn is written (issue 44)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from strata.errors import InvalidInput
from strata.limits import TURN_CHARS_MAX
from strata_bench.evaluation.datasets import EvalConversation, EvalSession, EvalTurn
from strata_bench.evaluation.ingest import ingest_conversation


class Writer:
    """Takes turns as the write path would, refusing any whose text says ``refuse me``."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str]] = []

    async def record_turns(self, session_id: str, turns: Sequence[dict[str, Any]]) -> None:
        if any("refuse me" in t["user"] for t in turns):
            raise InvalidInput("turns.0.user: refused by the write path")
        self.written += [(session_id, t["turn_id"]) for t in turns]


def _conversation(*sessions: list[str]) -> EvalConversation:
    return EvalConversation("c1", tuple(
        EvalSession(f"s {n}", datetime(2026, 1, n + 1, tzinfo=UTC),
                    tuple(EvalTurn(f"D{n} {i}", "Ann", text) for i, text in enumerate(texts)))
        for n, texts in enumerate(sessions)
    ), ())


async def test_an_oversized_and_an_empty_turn_are_left_out_and_named_the_rest_is_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    writer = Writer()
    conversation = _conversation(["hello", "x" * (TURN_CHARS_MAX + 1), "bye"], ["   ", "again"])
    out = await ingest_conversation(writer, conversation)
    assert writer.written == [("s_0", "D0_0"), ("s_0", "D0_2"), ("s_1", "D1_1")]
    assert set(out.refused) == {"D0 1", "D1 0"}
    assert "at most" in out.refused["D0 1"] and "empty" in out.refused["D1 0"]
    assert out.sessions == ["s_0", "s_1"] and out.original["D0_2"] == "D0 2"
    err = capsys.readouterr().err
    assert "turn 'D0 1' refused" in err and "turn 'D1 0' refused" in err


async def test_a_turn_refused_by_a_later_check_costs_only_itself() -> None:
    writer = Writer()
    out = await ingest_conversation(writer, _conversation(["one", "refuse me", "three"]))
    assert writer.written == [("s_0", "D0_0"), ("s_0", "D0_2")]
    assert out.refused == {"D0 1": "turns.0.user: refused by the write path"}
