"""Tests for WorkingSessions: working memory persisted item by item."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from strata.access.keys import KEY_TENANT, KeyStore
from strata.config import WorkingSettings
from strata.errors import InvalidInput, NotFound
from strata.providers.tokens import TiktokenCounter
from strata.store.records import InMemoryRecordStore, Record
from strata.store.versions import VersionStore
from strata.working.memory import WorkingMemory
from strata.working.sessions import KIND, WorkingSessions

STATE = "state"
T0 = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)
# Distinct vocabularies, so no item back-references (and boosts) another.
TEXTS = [
    "Quarterly revenue grew eleven percent in the northern region.",
    "我们明天下午三点在会议室讨论新项目的预算。",
    "Please book a table for four at the Italian place on Friday.",
    "The deploy pipeline failed on the linting step again.",
    "周末的天气预报说会下雨，爬山可能要改期。",
    "Caroline adopted a grey kitten named Pepper last week.",
]


@pytest.fixture(scope="module")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


@pytest.fixture()
def store() -> InMemoryRecordStore:
    s = InMemoryRecordStore()
    s.ensure_collection(STATE, dim=2)
    return s


def make(
    store: InMemoryRecordStore, counter: TiktokenCounter, tenant: str = "t1", **settings: object
) -> WorkingSessions:
    return WorkingSessions(
        tenant, store=store, collection=STATE, settings=WorkingSettings.model_validate(settings), counter=counter
    )


def rows(store: InMemoryRecordStore, tenant: str = "t1", session: str | None = None) -> list[Record]:
    return store.scan(STATE, tenant=tenant, session=session, kinds=[KIND])


def snapshot(memory: WorkingMemory) -> list[tuple[object, ...]]:
    return [(i.id, i.role, i.content, i.importance, i.tokens, i.summarized, i.created_at) for i in memory.items]


def test_add_persists_items(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter)
    added, report = ws.add(
        "s1",
        [{"role": "user", "content": TEXTS[0]}, {"role": "assistant", "content": TEXTS[1], "importance": 0.9}],
        now=T0,
    )
    assert report is None
    assert [a.content for a in added] == TEXTS[:2]
    assert added[1].importance == 0.9
    stored = {r.payload["id"]: r for r in rows(store, session="s1")}
    assert set(stored) == {a.id for a in added}
    for a in added:
        row = stored[a.id]
        assert row.tenant == "t1" and row.session == "s1" and row.kind == KIND
        assert row.text == a.content
        assert row.payload["content"] == a.content and row.payload["role"] == a.role
    assert [i.id for i in ws.session("s1").items] == [a.id for a in added]


def test_fresh_instance_reloads_same_items_in_order(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter)
    # Several calls, several items per call (same created_at within a call),
    # one back-dated item inserted in the middle of the history.
    ws.add("s1", [{"role": "user", "content": TEXTS[0]}, {"role": "assistant", "content": TEXTS[1]}], now=T0)
    ws.add("s1", [{"role": "user", "content": TEXTS[2]}], now=T0 + timedelta(minutes=1))
    ws.add(
        "s1",
        [
            {"role": "tool", "content": TEXTS[3], "metadata": {"tool": "ci"}},
            {"role": "user", "content": TEXTS[4], "created_at": T0 + timedelta(seconds=30)},
        ],
        now=T0 + timedelta(minutes=2),
    )
    ws.add("s2", [{"role": "user", "content": TEXTS[5]}], now=T0)
    before = snapshot(ws.session("s1"))
    assert [c for _, _, c, *_ in before] == [TEXTS[0], TEXTS[1], TEXTS[4], TEXTS[2], TEXTS[3]]

    fresh = make(store, counter)
    assert snapshot(fresh.session("s1")) == before
    assert fresh.session("s1").items[-1].metadata == {"tool": "ci"}
    assert [i.content for i in fresh.session("s2").items] == [TEXTS[5]]
    # ... and it keeps working: a new item goes after the reloaded ones.
    fresh.add("s1", [{"role": "assistant", "content": "Noted."}], now=T0 + timedelta(minutes=3))
    assert [i.content for i in make(store, counter).session("s1").items][-1] == "Noted."


def test_compression_drops_are_deleted_from_store(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter, max_tokens=64, summarize_above=1.0)
    ids = []
    for n in range(12):
        added, _ = ws.add(
            "s1",
            [{"role": "user", "content": f"Item {n}: " + TEXTS[n % len(TEXTS)], "importance": 0.1}],
            now=T0 + timedelta(minutes=n),
        )
        ids.append(added[0].id)
    memory = ws.session("s1")
    assert memory.total_tokens <= 64
    kept = [i.id for i in memory.items]
    assert len(kept) < 12  # compression happened
    stored = sorted(r.payload["id"] for r in rows(store, session="s1"))
    assert stored == sorted(kept)
    assert snapshot(make(store, counter, max_tokens=64).session("s1")) == snapshot(memory)


def test_compression_report_names_dropped_items(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter, max_tokens=64, summarize_above=1.0)
    first, _ = ws.add("s1", [{"role": "user", "content": TEXTS[0] * 3, "importance": 0.0}], now=T0)
    _, report = ws.add(
        "s1", [{"role": "user", "content": TEXTS[2] * 3, "importance": 1.0}], now=T0 + timedelta(hours=5)
    )
    assert report is not None
    assert first[0].id in report.dropped_ids
    assert report.tokens_after <= 64 < report.tokens_before
    assert [r.payload["id"] for r in rows(store, session="s1")] == list(report.kept_ids)


def test_reload_order_after_drop_with_equal_timestamps(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter, max_tokens=64, summarize_above=1.0)
    # Same created_at for every item (two calls within one millisecond, or
    # caller-given timestamps): order is decided by insertion.
    first = [
        "Quarterly revenue grew eleven percent in the northern region, beating the forecast by two points.",
        "Please book a table for four at the Italian place on Friday evening around seven thirty.",
        "The deploy pipeline failed on the linting step again after the dependency upgrade yesterday.",
    ]
    ws.add("s1", [{"role": "user", "content": t, "importance": 0.5} for t in first], now=T0)
    later = (
        "Caroline adopted a grey kitten named Pepper last week and it already sleeps on her keyboard "
        "every single afternoon while she tries to answer email from the office."
    )
    _, report = ws.add("s1", [{"role": "user", "content": later, "importance": 0.5}], now=T0)
    memory = ws.session("s1")
    assert report is not None and len(report.dropped_ids) == 2  # the two oldest went
    assert [i.content for i in memory.items] == [first[2], later]
    assert snapshot(make(store, counter, max_tokens=64).session("s1")) == snapshot(memory)


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "robot", "content": "beep"},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "x", "importance": float("nan")},
        {"role": "user", "content": "x", "created_at": datetime(2024, 1, 1)},  # naive
        {"role": "user", "content": "x", "metadata": {"f": object()}},
    ],
    ids=["role", "empty", "nan", "naive", "metadata"],
)
def test_invalid_item_changes_nothing(
    store: InMemoryRecordStore, counter: TiktokenCounter, bad: dict[str, Any]
) -> None:
    ws = make(store, counter)
    ws.add("s1", [{"role": "user", "content": TEXTS[0]}], now=T0)
    before_memory = snapshot(ws.session("s1"))
    before_rows = sorted((r.pk, r.text) for r in rows(store))
    with pytest.raises(InvalidInput):
        # A valid item first: it must not stay half-added.
        ws.add("s1", [{"role": "user", "content": TEXTS[2]}, bad], now=T0 + timedelta(minutes=1))
    assert snapshot(ws.session("s1")) == before_memory
    assert sorted((r.pk, r.text) for r in rows(store)) == before_rows
    # A new session is left empty, in memory and in the store.
    with pytest.raises(InvalidInput):
        ws.add("s9", [{"role": "user", "content": TEXTS[2]}, bad], now=T0)
    assert ws.session("s9").items == ()
    assert rows(store, session="s9") == []


def test_bad_session_id(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter)
    with pytest.raises(InvalidInput):
        ws.add('s1" or 1==1', [{"role": "user", "content": "hi"}], now=T0)
    assert rows(store) == []


def test_forget_removes_every_row_of_the_session(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter)
    ws.add("s1", [{"role": "user", "content": t} for t in TEXTS[:4]], now=T0)
    ws.add("s2", [{"role": "user", "content": TEXTS[4]}], now=T0)
    other = make(store, counter, tenant="t2")
    other.add("s1", [{"role": "user", "content": TEXTS[5]}], now=T0)
    assert ws.forget("s1") == 4
    assert rows(store, session="s1") == []
    assert ws.session("s1").items == ()
    assert make(store, counter).session("s1").items == ()
    # Other sessions and other tenants keep theirs.
    assert [i.content for i in ws.session("s2").items] == [TEXTS[4]]
    assert [r.text for r in rows(store, tenant="t2", session="s1")] == [TEXTS[5]]
    with pytest.raises(NotFound):
        ws.forget("s1")


def test_forget_empty_session_raises_not_found(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    ws = make(store, counter)
    with pytest.raises(NotFound):
        ws.forget("never-used")
    with pytest.raises(InvalidInput):
        ws.forget("bad id")


def test_forget_only_touches_working_rows(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    versions = VersionStore(store, STATE)
    versions.put("t1", "working", "other-session", 7)
    ws = make(store, counter)
    ws.add("version", [{"role": "user", "content": TEXTS[0]}], now=T0)
    ws.forget("version")
    assert versions.get("t1", "working", "other-session") == 7


def test_forget_cannot_delete_api_keys(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    keys = KeyStore(store, STATE)
    key = keys.create("tenant-a")
    ws = make(store, counter, tenant=KEY_TENANT)
    ws.add("apikey", [{"role": "user", "content": TEXTS[0]}], now=T0)
    ws.forget("apikey")
    assert keys.tenant_of(key) == "tenant-a"


def test_tenants_are_isolated(store: InMemoryRecordStore, counter: TiktokenCounter) -> None:
    a, b = make(store, counter, tenant="a"), make(store, counter, tenant="b")
    a.add("s1", [{"role": "user", "content": TEXTS[0]}], now=T0)
    b.add("s1", [{"role": "user", "content": TEXTS[1]}], now=T0)
    assert [i.content for i in make(store, counter, tenant="a").session("s1").items] == [TEXTS[0]]
    assert [i.content for i in make(store, counter, tenant="b").session("s1").items] == [TEXTS[1]]


def test_unrecorded_leaves_out_the_items_a_turn_already_added(
    store: InMemoryRecordStore, counter: TiktokenCounter
) -> None:
    ws = make(store, counter)
    turn = [{"role": "user", "content": TEXTS[0], "metadata": {"turn_id": "t1"}},
            {"role": "assistant", "content": TEXTS[1], "metadata": {"turn_id": "t1"}}]
    assert ws.unrecorded("s1", turn) == turn
    ws.add("s1", turn, now=T0)
    assert ws.unrecorded("s1", turn) == []
    # Another turn, and items of no turn, are always new; so is the turn in another session.
    other = {"role": "user", "content": TEXTS[0], "metadata": {"turn_id": "t2"}}
    plain = {"role": "user", "content": TEXTS[0]}
    assert ws.unrecorded("s1", [*turn, other, plain]) == [other, plain]
    assert ws.unrecorded("s2", turn) == turn
    # A fresh instance reads the turn ids back from the store.
    assert make(store, counter).unrecorded("s1", turn) == []
