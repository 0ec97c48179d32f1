"""Audit rows are queued by the request and written in batches off its path (no Ray, no store:
the in-memory record store, counting its calls)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from strata.access.audit import AuditEntry, AuditLog, AuditWriter, entry
from strata.config import StrataSettings
from strata.errors import InvalidInput, StoreUnavailable
from strata.store.records import InMemoryRecordStore, Record
from strata_actors.orchestration.audit import AuditFlow

STATE = "state"


class _Store(InMemoryRecordStore):
    """Counts upserts; refuses the first ``fail`` of them as an unreachable store would."""

    def __init__(self, fail: int = 0) -> None:
        super().__init__()
        self.ensure_collection(STATE, dim=2)
        self.upserts: list[int] = []
        self.fail = fail

    def upsert(self, collection: str, records: Any) -> None:
        if self.fail:
            self.fail -= 1
            raise StoreUnavailable("the store is down")
        self.upserts.append(len(records))
        super().upsert(collection, records)

    def ops(self, tenant: str) -> list[str]:
        return [e.record_id for e in AuditLog(self, STATE).read(tenant, limit=1000)]


def _writer(store: _Store, **options: Any) -> AuditWriter:
    return AuditWriter(lambda: AuditLog(store, STATE), **{"flush_interval_s": 60.0, **options})


def _add(writer: AuditWriter, tenant: str, *ids: str) -> None:
    for record_id in ids:
        writer.add(tenant, entry("record_turns", "episodic", record_id, key_id="k"))


def _until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.005)


class _Flow(AuditFlow):
    def __init__(self, store: _Store, **audit: Any) -> None:
        settings = StrataSettings.from_dict({"pii": {"enabled": False}, "audit": {"flush_interval_s": 60.0, **audit}})
        super().__init__(settings, embed=None, embed_query=None, router=object(), llm=object())  # type: ignore[arg-type]
        self.store = store

    def _open_audit_log(self) -> AuditLog:
        return AuditLog(self.store, STATE)


async def test_concurrent_writes_share_one_store_call() -> None:
    store = _Store()
    flow = _Flow(store, flush_interval_s=0.02)
    await asyncio.gather(*(flow._record("acme", "k", "record_turns", "episodic", f"s{i}", i) for i in range(200)))
    assert store.upserts == []  # nothing was written on the request path
    _until(lambda: sum(store.upserts) == 200)
    assert len(store.upserts) <= 5  # one, unless the gather outlasts the 20 ms interval
    assert sorted(store.ops("acme")) == sorted(f"s{i}" for i in range(200))
    await flow.aclose()


async def test_the_history_includes_the_writes_just_before_it() -> None:
    store = _Store()
    flow = _Flow(store)  # a minute between batches: only the read writes them
    for op in ("record_turns", "index_document", "delete_skill"):
        await flow._record("acme", "k1", op, "episodic", "x", 1)
    await flow._record("other", "k2", "record_turns", "episodic", "y", 1)
    history = await flow.audit("acme")
    assert [e.op for e in history.entries] == ["record_turns", "index_document", "delete_skill"]
    assert store.upserts == [3]  # only acme's entries, in one call
    assert flow._audit is not None and flow._audit.pending == 1


async def test_an_invalid_tenant_is_not_queued() -> None:
    writer = _writer(_Store())
    with pytest.raises(InvalidInput):
        writer.add("no such/tenant", entry("record_turns", "episodic", "s1", key_id="k"))
    assert writer.pending == 0
    flow = _Flow(_Store())
    await flow._record("no such/tenant", "k", "record_turns", "episodic", "s1", 1)  # logged, not raised


def test_one_flush_writes_many_tenants_in_one_call_and_batches_by_max_batch() -> None:
    store = _Store()
    writer = _writer(store, max_batch=4)
    _add(writer, "a", "a1", "a2")
    _add(writer, "b", "b1")
    assert writer.flush() == 3 and store.upserts == [3]
    assert store.ops("a") == ["a1", "a2"] and store.ops("b") == ["b1"]
    _add(writer, "a", *(f"x{i}" for i in range(10)))
    assert writer.flush() == 10 and store.upserts == [3, 4, 4, 2]


def test_max_batch_queued_starts_a_batch_without_waiting_for_the_interval() -> None:
    store = _Store()
    writer = _writer(store, max_batch=10)
    _add(writer, "a", *(f"x{i}" for i in range(10)))
    _until(lambda: sum(store.upserts) == 10)
    writer.close()


def test_a_refused_batch_is_kept_and_written_later() -> None:
    store = _Store(fail=2)
    writer = _writer(store)
    _add(writer, "a", "a1", "a2")
    for _ in range(2):
        with pytest.raises(StoreUnavailable):
            writer.flush()
        assert writer.pending == 2
    _add(writer, "a", "a3")
    assert writer.flush() == 3
    assert store.ops("a") == ["a1", "a2", "a3"] and writer.failures == 2 and writer.dropped == 0


def test_the_thread_retries_with_backoff_and_loses_nothing() -> None:
    store = _Store(fail=2)
    writer = _writer(store, flush_interval_s=0.01, retry_first_s=0.01, retry_max_s=0.02)
    _add(writer, "a", "a1", "a2", "a3")
    _until(lambda: writer.written == 3)
    assert store.ops("a") == ["a1", "a2", "a3"] and writer.failures == 2 and store.upserts == [3]
    writer.close()


def test_past_max_pending_the_oldest_are_dropped_and_counted() -> None:
    store = _Store(fail=10**6)
    # No retry within the test: a batch the thread has out of the queue is not pending, so
    # the counts hold only once the refused batch is back (a clean-clone run saw 5 pending
    # and 1 dropped with 2 in flight).
    writer = _writer(store, max_batch=2, max_pending=5, retry_first_s=60.0)
    _add(writer, "a", *(f"x{i}" for i in range(8)))
    _until(lambda: writer.dropped == 3 and writer.pending == 5)
    with pytest.raises(StoreUnavailable):
        writer.flush()
    store.fail = 0
    writer.flush()
    assert store.ops("a") == [f"x{i}" for i in range(3, 8)]


async def test_aclose_writes_what_is_queued_and_stops_the_thread() -> None:
    store = _Store()
    writer = _writer(store)
    _add(writer, "a", "a1", "a2")
    thread = writer._thread
    assert thread is not None and thread.is_alive()
    await writer.aclose()
    assert store.ops("a") == ["a1", "a2"] and not thread.is_alive() and writer.pending == 0
    _add(writer, "a", "a3")  # a write after the close is still written
    writer.close()
    assert store.ops("a") == ["a1", "a2", "a3"]


def test_close_gives_up_on_a_store_that_stays_down_within_its_timeout() -> None:
    store = _Store(fail=10**6)
    writer = _writer(store, retry_first_s=0.01)
    _add(writer, "a", "a1")
    started = time.monotonic()
    writer.close(timeout_s=0.1)
    assert time.monotonic() - started < 1.0 and writer.pending == 1


def test_settings_bound_the_batch_by_the_queue() -> None:
    with pytest.raises(ValueError, match="max_pending"):
        StrataSettings.model_validate({"audit": {"max_batch": 500, "max_pending": 100}})
    with pytest.raises(ValueError):
        AuditWriter(lambda: AuditLog(_Store(), STATE), max_batch=0)


def test_rows_are_content_free_state_rows_of_the_tenant() -> None:
    store = _Store()
    writer = _writer(store)
    _add(writer, "a", "a1")
    writer.flush()
    [row] = store.scan(STATE, tenant="a")
    assert isinstance(row, Record) and row.kind == "audit" and row.text == "" and row.pk.startswith("a/audit/")


async def test_pages_by_cursor_miss_no_entry_that_shares_a_time() -> None:
    """Paging by ``since`` skips what shares the last entry's time; ``next_after`` skips nothing."""
    store = _Store()
    flow = _Flow(store)
    at = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    log = AuditLog(store, STATE)
    log.append("acme", [AuditEntry(at, "k", "record_turns", "episodic", f"s{i}", i) for i in range(7)])
    log.append("acme", [AuditEntry(at + timedelta(seconds=1), "k", "delete_skill", "procedural", "x", 1)])
    log.append("other", [AuditEntry(at, "k", "record_turns", "episodic", "theirs", 1)])
    seen, after, pages = [], None, 0
    while True:
        page = await flow.audit("acme", after=after, limit=3)
        seen += [e.record_id for e in page.entries]
        pages += 1
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == [*(f"s{i}" for i in range(7)), "x"] and pages == 3
    late = await flow.audit("acme", since=at, limit=3)  # ``since`` still filters, the cursor pages
    assert [e.record_id for e in late.entries] == ["x"] and late.next_after is None
    for bad in ("../other", "x" * 10, "1-2/3"):
        with pytest.raises(InvalidInput, match="next_after"):
            await flow.audit("acme", after=bad)
    await flow.aclose()


def test_a_page_reads_the_page_not_the_history() -> None:
    """Paging through 60 entries five at a time reads each row about once (the store's
    ``scan`` of the whole history is never called); ``since`` and the cursor bound the read."""
    read: list[int] = []

    class Counting(_Store):
        def scan(self, *args: Any, **kwargs: Any) -> list[Record]:
            raise AssertionError("a page scanned the whole history")

        def scan_after(self, collection: str, **kwargs: Any) -> list[Record]:
            rows = super().scan_after(collection, **kwargs)
            read.append(len(rows))
            return rows

    store = Counting()
    log = AuditLog(store, STATE)
    at = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    log.append("acme", [AuditEntry(at + timedelta(seconds=i // 2), "k", "record_turns", "episodic", f"s{i}", i)
                        for i in range(60)])
    log.append("other", [AuditEntry(at, "k", "record_turns", "episodic", "theirs", 1)])
    seen, after = [], None
    while True:
        entries, after = log.page("acme", after=after, limit=5)
        seen += [e.record_id for e in entries]
        if after is None:
            break
    assert seen == [f"s{i}" for i in range(60)] and sum(read) <= 60 + 12
    read.clear()
    since = [e.record_id for e in log.read("acme", since=at + timedelta(seconds=10), limit=4)]
    assert since == ["s22", "s23", "s24", "s25"] and sum(read) == 5  # the entries at 10 s are not read
    assert [e.record_id for e in log.read("acme", since=datetime(1969, 1, 1, tzinfo=UTC), limit=2)] == ["s0", "s1"]
    assert log.read("acme", since=datetime(9999, 12, 31, tzinfo=UTC)) == []
