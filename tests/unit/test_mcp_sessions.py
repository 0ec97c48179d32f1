"""The sessions episodic memory knows, as ``GET /v1/sessions`` (the MCP ``list_sessions`` tool
and the inspector) lists them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import SessionSpan, TurnInput
from strata.store.records import InMemoryRecordStore

T0 = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def memory(store: InMemoryRecordStore, tenant: str) -> EpisodicMemory:
    return EpisodicMemory(tenant, store=store, collection="episodic", settings=EpisodicSettings())


def record(layer: EpisodicMemory, session: str, *hours: int) -> None:
    inputs = [TurnInput(user=f"turn at +{h} h", timestamp=T0 + h * HOUR) for h in hours]
    turns = layer.prepare(session, inputs, now=T0)
    layer.record(turns, np.eye(len(turns), 8, dtype=np.float32))


def test_sessions_by_id_with_their_turns_and_first_and_last_times() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("episodic", dim=8)
    layer = memory(store, "t1")
    record(layer, "b", 5, 1, 3)  # caller-given times out of order
    record(layer, "a", 2)
    record(layer, "b", 0)
    record(memory(store, "t2"), "c", 1)  # another tenant's
    assert layer.sessions() == [
        SessionSpan("a", 1, T0 + 2 * HOUR, T0 + 2 * HOUR),
        SessionSpan("b", 4, T0, T0 + 5 * HOUR),
    ]
    reloaded = memory(store, "t1")
    reloaded.load()
    assert reloaded.sessions() == layer.sessions()
    layer.forget_session("a")
    assert [s.session_id for s in layer.sessions()] == ["b"]
