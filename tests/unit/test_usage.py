"""Usage: the replica's call counter, its flush to the store's state collection (two replicas'
rows summed, a failed flush kept for the next), the window checks, the items count, and the
middleware that counts a tenant route by its key's tenant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI, Header

from strata.access.keys import KeyStore
from strata.access.usage import HOUR_S, USAGE_KIND, CallCounter, Window, calls_from_rows, held_items
from strata.config import AuthSettings, ServeSettings, StrataSettings
from strata.errors import InvalidInput, StoreUnavailable
from strata.ids import SYSTEM_TENANT
from strata.store.layout import Collections
from strata.store.records import InMemoryRecordStore, Record
from strata_serve.auth import Authenticate, KeyGate
from strata_serve.errors import install_handlers
from strata_serve.usage import CountCalls, UsageBook

T0 = 1_800_000_000.0  # an hour's start plus 2,400 s
NAMES = Collections(episodic="ep", semantic="sem", procedural="proc", state="state", keys="keys", dim=4)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class FlakyStore(InMemoryRecordStore):
    def __init__(self) -> None:
        super().__init__()
        self.down = False
        for name in ("ep", "sem", "proc", "state", "keys"):
            self.ensure_collection(name, dim=4)

    def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if self.down:
            raise StoreUnavailable("Milvus does not answer")
        super().upsert(collection, records)


def usage_rows(store: InMemoryRecordStore) -> list[Record]:
    return store.scan("state", tenant=SYSTEM_TENANT, kinds=[USAGE_KIND], with_vectors=False)


ALL = Window(since=0, until=2**40)


def test_two_replicas_write_rows_of_their_own_and_a_read_sums_them() -> None:
    store, clock = FlakyStore(), Clock()
    a, b = CallCounter(replica="a", clock=clock), CallCounter(replica="b", clock=clock)
    for _ in range(3):
        a.count("acme", "search")
    b.count("acme", "search")
    b.count("acme", "record_turn")
    b.count("other", "search")
    assert a.flush(store, "state") == 1 and b.flush(store, "state") == 2
    a.count("acme", "search")  # the same bucket again: the row is rewritten with the running total
    assert a.flush(store, "state") == 1
    assert a.flush(store, "state") == 0  # nothing new: no write
    hour = int(T0) // HOUR_S * HOUR_S
    assert calls_from_rows(usage_rows(store), ALL) == {
        "acme": {hour: {"search": 5, "record_turn": 1}},
        "other": {hour: {"search": 1}},
    }
    clock.now += HOUR_S  # the next hour is a bucket of its own
    a.count("acme", "search")
    a.flush(store, "state")
    calls = calls_from_rows(usage_rows(store), ALL)["acme"]
    assert calls == {hour: {"search": 5, "record_turn": 1}, hour + HOUR_S: {"search": 1}}
    assert calls_from_rows(usage_rows(store), Window(since=hour + HOUR_S, until=hour + 2 * HOUR_S)) == {
        "acme": {hour + HOUR_S: {"search": 1}}
    }


def test_a_failed_flush_keeps_the_counts_for_the_next() -> None:
    store, clock = FlakyStore(), Clock()
    counter = CallCounter(replica="a", clock=clock)
    counter.count("acme", "search")
    store.down = True
    with pytest.raises(StoreUnavailable):
        counter.flush(store, "state")
    counter.count("acme", "search")
    store.down = False
    assert counter.flush(store, "state") == 1
    assert calls_from_rows(usage_rows(store), ALL)["acme"] == {int(T0) // HOUR_S * HOUR_S: {"search": 2}}


def test_a_bucket_counted_while_its_row_was_written_stays_due() -> None:
    store, clock = FlakyStore(), Clock()
    counter = CallCounter(replica="a", clock=clock)
    counter.count("acme", "search")
    rows = counter.pending()
    store.upsert("state", rows)
    counter.count("acme", "search")  # between the write and its mark
    counter.written(rows)
    assert counter.flush(store, "state") == 1
    assert calls_from_rows(usage_rows(store), ALL)["acme"] == {int(T0) // HOUR_S * HOUR_S: {"search": 2}}


def test_old_buckets_are_let_go_once_written() -> None:
    store, clock = FlakyStore(), Clock()
    counter = CallCounter(replica="a", clock=clock)
    counter.count("acme", "search")
    counter.flush(store, "state")
    clock.now += 5 * HOUR_S
    counter.count("acme", "search")
    counter.flush(store, "state")
    assert [r.payload["calls"] for r in counter.pending()] == []
    assert len(counter._buckets) == 1


def test_a_window_is_whole_hours_and_a_bad_one_names_its_field() -> None:
    now = datetime(2026, 12, 7, 5, 30, tzinfo=UTC)
    w = Window.resolve(None, None, now=now)
    assert (w.until - w.since) == 25 * HOUR_S and w.until == int(datetime(2026, 12, 7, 6, tzinfo=UTC).timestamp())
    naive = Window.resolve(datetime(2026, 12, 7, 1, 15), datetime(2026, 12, 7, 1, 15), now=now)
    assert naive.until - naive.since == HOUR_S  # an empty window still reads its hour
    with pytest.raises(InvalidInput) as after:
        Window.resolve(now, now - timedelta(hours=1), now=now)
    assert after.value.details["field"] == "since" and "after until" in after.value.message
    with pytest.raises(InvalidInput) as long:
        Window.resolve(now - timedelta(days=40), now, now=now)
    assert "at most 31 days" in long.value.message


def test_items_held_are_counted_per_layer_for_one_tenant() -> None:
    store = FlakyStore()

    def row(collection: str, tenant: str, session: str, kind: str, n: int) -> None:
        store.upsert(collection, [Record(pk=f"{tenant}/{kind}/{session}/{i}", tenant=tenant, session=session,
                                         kind=kind, ts_ms=0, text="x") for i in range(n)])

    row("ep", "acme", "s1", "turn", 3)
    row("ep", "acme", "s2", "turn", 2)
    row("ep", "acme", "s1", "summary", 1)
    row("ep", "other", "s1", "turn", 7)
    row("sem", "acme", "d1", "doc", 1)
    row("sem", "acme", "d1", "parent", 2)
    row("sem", "acme", "d1", "child", 4)
    row("proc", "acme", "k1", "skill", 2)
    row("proc", "acme", "k1", "skill_version", 5)
    row("state", "acme", "s1", "working", 6)
    row("state", "acme", "s1", "idempotency", 9)
    assert held_items(store, NAMES, "acme") == {
        "working": {"items": 6},
        "episodic": {"turns": 5, "summaries": 1, "sessions": 2},
        "semantic": {"documents": 1, "passages": 4},
        "procedural": {"skills": 2},
    }


# -- the middleware ------------------------------------------------------------------------


def counted_app(store: FlakyStore) -> tuple[FastAPI, KeyStore, UsageBook]:
    keys = KeyStore(store, "keys")
    settings = StrataSettings(auth=AuthSettings(admin_key="sk-configured-admin"), serve=ServeSettings(usage_flush_s=60))
    gate = KeyGate(settings, keys=keys)
    book = UsageBook(settings, backend=(store, NAMES))
    app = FastAPI()
    install_handlers(app)
    app.add_middleware(CountCalls, book=lambda: book)
    app.add_middleware(Authenticate, gate=lambda: gate)

    @app.get("/v1/documents")
    async def list_documents(authorization: str | None = Header(default=None)) -> dict[str, str]:
        return {"tenant": (await gate.caller(authorization, "list_documents")).tenant}

    @app.get("/v1/admin/keys")
    async def admin_list_keys(authorization: str | None = Header(default=None)) -> dict[str, str]:
        await gate.admin(authorization)
        return {}

    return app, keys, book


async def test_the_middleware_counts_tenant_routes_by_the_keys_tenant_and_a_read_flushes_first() -> None:
    store = FlakyStore()
    app, keys, book = counted_app(store)
    acme, other = keys.create("acme"), keys.create("other")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for key, n in ((acme, 3), (other, 1)):
            for _ in range(n):
                answer = await client.get("/v1/documents", headers={"Authorization": f"Bearer {key}"})
                assert answer.status_code == 200
        # an admin route (refused to a tenant key, answered to the admin) is not a tenant's call
        assert (await client.get("/v1/admin/keys", headers={"Authorization": f"Bearer {acme}"})).status_code == 403
        admin = {"Authorization": "Bearer sk-configured-admin"}
        assert (await client.get("/v1/admin/keys", headers=admin)).status_code == 200
        assert (await client.get("/v1/documents")).status_code == 401  # no key: not counted
        assert (await client.get("/v1/nowhere", headers={"Authorization": f"Bearer {acme}"})).status_code == 404
    assert usage_rows(store) == []  # nothing written on the request's path
    calls = await book.calls(ALL, None)
    totals = {t: {r: n for h in hours.values() for r, n in h.items()} for t, hours in calls.items()}
    assert totals == {"acme": {"list_documents": 3}, "other": {"list_documents": 1}}
    assert len(usage_rows(store)) == 2
    await book.aclose()
