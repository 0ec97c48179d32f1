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


def sessions(layer: EpisodicMemory) -> list[SessionSpan]:
    page, total, more = layer.sessions_page(limit=1000)
    assert total == len(page) and not more
    return page


def test_sessions_by_id_with_their_turns_and_first_and_last_times() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("episodic", dim=8)
    layer = memory(store, "t1")
    record(layer, "b", 5, 1, 3)  # caller-given times out of order
    record(layer, "a", 2)
    record(layer, "b", 0)
    record(memory(store, "t2"), "c", 1)  # another tenant's
    assert sessions(layer) == [
        SessionSpan("a", 1, T0 + 2 * HOUR, T0 + 2 * HOUR),
        SessionSpan("b", 4, T0, T0 + 5 * HOUR),
    ]
    reloaded = memory(store, "t1")
    reloaded.load()
    assert sessions(reloaded) == sessions(layer)
    layer.forget_session("a")
    assert [s.session_id for s in sessions(layer)] == ["b"]


def test_sessions_are_paged_by_id_after_any_id_as_they_come_and_go() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("episodic", dim=8)
    layer = memory(store, "t1")
    for n in (7, 3, 11, 0, 5, 9, 1):
        record(layer, f"s{n:02d}", n)
    layer.forget_session("s05")
    record(layer, "s04", 4)
    expected = ["s00", "s01", "s03", "s04", "s07", "s09", "s11"]
    seen, after = [], None
    while True:
        page, total, more = layer.sessions_page(after=after, limit=3)
        assert total == 7
        seen += [s.session_id for s in page]
        if not more:
            break
        after = page[-1].session_id
    assert seen == expected
    assert [s.session_id for s in layer.sessions_page(after="s05", limit=2)[0]] == ["s07", "s09"]  # a gone id
    assert layer.sessions_page(after="s11", limit=2) == ([], 7, False)
    reloaded = memory(store, "t1")
    reloaded.load()
    assert sessions(reloaded) == sessions(layer)
