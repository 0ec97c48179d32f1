"""Expiry bookkeeping: deadlines, the configured ceiling, the store's expired rows,
and what an expired turn takes with it in episodic memory (in-memory store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from pydantic import ValidationError

from strata.clock import to_ms
from strata.config import EpisodicSettings, TTLLayers, TTLSettings, load_settings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.summarize import EpisodeSummary
from strata.episodic.turns import TurnInput
from strata.schema import TurnIn
from strata.store.records import InMemoryRecordStore, Record
from strata.store.ttl import Expiries, expires_ms

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_expiries_track_the_earliest_deadline() -> None:
    e: Expiries[str] = Expiries()
    assert e.due() is None and e.expired(10**15) == []
    e.set("a", 300)
    e.set("b", 100)
    e.set("c", None)  # never expires: not tracked
    assert e.due() == 100 and len(e) == 2
    assert e.expired(99) == [] and e.expired(100) == ["b"] and sorted(e.expired(300)) == ["a", "b"]
    e.drop(["b"])
    assert e.due() == 300
    e.set("a", None)
    assert e.due() is None


def test_configured_ttl_is_a_ceiling_an_item_may_only_shorten() -> None:
    ttl = TTLSettings(episodic=3600, tenants={"short": TTLLayers(episodic=60), "forever": TTLLayers(episodic=0)})
    assert ttl.seconds("anyone", "episodic") == 3600
    assert ttl.seconds("anyone", "episodic", 10) == 10
    assert ttl.seconds("anyone", "episodic", 10**6) == 3600  # cannot lengthen
    assert ttl.seconds("short", "episodic", 600) == 60
    assert ttl.seconds("forever", "episodic") is None and ttl.seconds("forever", "episodic", 5) == 5
    assert ttl.seconds("anyone", "working") is None
    assert expires_ms(None) is None and expires_ms(2.5, now=NOW) == to_ms(NOW) + 2500


def test_ttl_settings_and_bodies_refuse_nonsense() -> None:
    with pytest.raises(ValidationError):
        load_settings(None, ttl={"episodic": -1})
    with pytest.raises(ValidationError):
        load_settings(None, ttl={"sweep_interval_s": 0})
    for bad in (0, -5, float("nan"), float("inf"), 1e12):
        with pytest.raises(ValidationError):
            TurnIn(user="hi", ttl_s=bad)


def test_the_store_names_expired_rows_only() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("c", dim=4)
    rows = [
        Record("a/1", "a", "s", "turn", 0, "x", {"expires_ms": 100}),
        Record("a/2", "a", "s", "turn", 0, "x", {"expires_ms": 900}),
        Record("b/1", "b", "s", "turn", 0, "x", {}),
        Record("b/2", "b", "s2", "summary", 0, "x", {"expires_ms": 50}),
        Record("b/3", "b", "s", "version", 0, "x", {"expires_ms": 50}),
    ]
    store.upsert("c", rows)
    assert sorted(store.expired("c", now_ms=500, kinds=["turn", "summary"])) == [("a", "s", "a/1"), ("b", "s2", "b/2")]


def _unit(k: int) -> np.ndarray:
    v = np.zeros(384, np.float32)
    v[k] = 1.0
    return v


def test_an_expired_turn_takes_its_summary_and_the_rest_is_summarised_again() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("e", dim=384)
    settings = EpisodicSettings(raw_window=2, summary_threshold=2)
    memory = EpisodicMemory("t1", store=store, collection="e", settings=settings)
    inputs = [TurnInput(user=f"turn {n}", timestamp=NOW + timedelta(minutes=n), ttl_s=60 if n == 1 else None)
              for n in range(6)]
    turns = memory.prepare("s1", inputs, now=NOW)
    memory.record(turns, np.stack([_unit(n) for n in range(6)]))
    for chunk in memory.pending_summaries():
        memory.add_summary(chunk, EpisodeSummary(summary=" / ".join(t.text for t in chunk)), _unit(10))
    assert [s.turn_ids for s in memory.summaries()] == [(turns[0].turn_id, turns[1].turn_id),
                                                         (turns[2].turn_id, turns[3].turn_id)]
    assert memory.summaries()[0].expires_ms == to_ms(NOW) + 60_000  # its turns' earliest deadline

    assert memory.expired(to_ms(NOW) + 59_999) == ([], [])
    gone_turns, gone_summaries = memory.expired(to_ms(NOW) + 60_000)
    assert gone_turns == [f"s1/{turns[1].turn_id}"] and gone_summaries == ["s1/s000000-000001"]
    assert memory.delete_keys(gone_turns, gone_summaries) == 2
    memory.drop_keys(gone_turns, gone_summaries)

    assert [t.turn_id for t in memory.session_turns("s1")] == [t.turn_id for t in turns if t is not turns[1]]
    hits = memory.search(_unit(1), top_k=10)
    assert all(turns[1].turn_id not in h.turn_ids for h in hits)
    # Turn 0 is covered no more: it is summarised again with the next turn to leave the window.
    assert memory.pending_summaries() == []
    later = memory.prepare("s1", [TurnInput(user="turn 6", timestamp=NOW + timedelta(minutes=6))], now=NOW)
    memory.record(later, np.stack([_unit(6)]))
    assert [[t.turn_id for t in c] for c in memory.pending_summaries()] == [[turns[0].turn_id, turns[4].turn_id]]
    assert memory.expiries.due() is None
    reloaded = EpisodicMemory("t1", store=store, collection="e", settings=settings)
    reloaded.load()
    assert reloaded.turn_count == 6 and len(reloaded.summaries()) == 1
