"""MilvusRecordStore against a real milvus-lite server and a real Milvus server: scoping,
how fresh each read is, restarts, outages."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from strata.errors import InvalidInput, StoreUnavailable
from strata.store.milvus import MilvusRecordStore
from strata.store.records import Record
from tests.conftest import MilvusServer

STORES = ("lite", "server")
#: An outage test stops its milvus-lite: one of its own (tests/conftest.py).
OWN_MILVUS = True
DIM = 8


def lite_only(milvus: MilvusServer, why: str) -> None:
    if milvus.kind != "lite":
        pytest.skip(why)


def open_store(milvus: MilvusServer) -> MilvusRecordStore:
    """A store over a connection of its own, as another process (shard, replica) has."""
    return MilvusRecordStore(milvus.uri, token=milvus.token, timeout_s=3)


def rec(tenant: str, session: str, n: int, *, kind: str = "turn") -> Record:
    v = np.zeros(DIM, np.float32)
    v[n % DIM] = 1.0
    return Record(pk=f"{tenant}/{session}/t{n}", tenant=tenant, session=session, kind=kind,
                  ts_ms=1000 * n, text=f"text {n} 你好", payload={"n": n, "nested": {"ok": True}}, vector=v)


@pytest.fixture(scope="module")
def store(milvus: MilvusServer) -> MilvusRecordStore:
    s = open_store(milvus)
    s.ensure_collection("store_test", dim=DIM)
    return s


def test_upsert_scan_get_delete_are_tenant_scoped(store: MilvusRecordStore) -> None:
    store.upsert("store_test", [rec("a", "s1", n) for n in range(5)] + [rec("b", "s1", n) for n in range(3)])
    rows = store.scan("store_test", tenant="a")
    assert sorted(r.payload["n"] for r in rows) == [0, 1, 2, 3, 4]
    assert rows[0].vector is not None and rows[0].vector.shape == (DIM,)
    assert {r.tenant for r in store.scan("store_test", tenant="b")} == {"b"}
    # Another tenant's primary key is not readable through tenant a.
    assert store.get("store_test", tenant="a", pks=["b/s1/t0"]) == []
    assert [r.text for r in store.get("store_test", tenant="b", pks=["b/s1/t0"])] == ["text 0 你好"]
    assert store.delete("store_test", tenant="a", session="s1", pks=["a/s1/t1"]) == 1
    assert store.delete("store_test", tenant="a", session="s1") == 4
    assert store.scan("store_test", tenant="a") == []
    assert len(store.scan("store_test", tenant="b")) == 3


def test_deletes_by_key_keep_to_their_tenant_session_and_kinds(store: MilvusRecordStore) -> None:
    store.upsert("store_test", [rec("g", "s1", 0), rec("g", "s2", 1), rec("g", "s1", 2, kind="summary"),
                                rec("h", "s1", 0)])
    # Keys are read first and deleted by key alone: the scope still applies to each key.
    assert store.delete("store_test", tenant="g", pks=["h/s1/t0", "g/s1/t9"]) == 0
    assert store.delete("store_test", tenant="g", session="s1", pks=["g/s2/t1"]) == 0
    assert store.delete("store_test", tenant="g", kinds=["turn"], pks=["g/s1/t2"]) == 0
    assert store.delete("store_test", tenant="g", pks=["g/s1/t0", "g/s2/t1"]) == 2
    assert [r.pk for r in store.scan("store_test", tenant="g")] == ["g/s1/t2"]
    assert [r.pk for r in store.get("store_test", tenant="h", pks=["h/s1/t0", "g/s1/t2"])] == ["h/s1/t0"]


def test_a_scan_past_one_query_reads_every_row_in_key_order(
    store: MilvusRecordStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strata.store.milvus as module

    store.upsert("store_test", [rec("f", "s", n) for n in range(7)])
    monkeypatch.setattr(module, "_QUERY_LIMIT", 3)  # the iterator takes over from a full first query
    assert [r.pk for r in store.scan("store_test", tenant="f")] == sorted(f"f/s/t{n}" for n in range(7))
    monkeypatch.undo()
    assert [r.pk for r in store.scan("store_test", tenant="f")] == sorted(f"f/s/t{n}" for n in range(7))


def test_a_page_after_a_key_is_the_next_rows_of_the_scope_in_key_order(store: MilvusRecordStore) -> None:
    order = np.random.default_rng(3).permutation(30)
    store.upsert("store_test", [rec("pg", "s", int(n)) for n in order[:15]])
    store.upsert("store_test", [rec("pg", "s", int(n)) for n in order[15:]]
                 + [rec("pg", "other", 1), rec("pg", "s", 99, kind="summary"), rec("ph", "s", 5)])
    expected = sorted(f"pg/s/t{n}" for n in range(30))
    for _flushed in (False, True):  # the second pass reads what the flush at the end of the first wrote
        seen, after = [], "pg/s"
        while rows := store.scan_after("store_test", tenant="pg", session="s", kinds=["turn"], after=after, limit=7):
            assert len(rows) <= 7 and all(r.vector is None for r in rows)
            seen += [r.pk for r in rows]
            after = rows[-1].pk
        assert seen == expected
        tail = sorted(pk for pk in [*expected, "pg/other/t1", "pg/s/t99"] if pk > "pg/s/t25")  # t26.. t3, t4.. t99
        assert [r.pk for r in store.scan_after("store_test", tenant="pg", after="pg/s/t25", limit=100)] == tail
        store._connect().flush("store_test")
    with pytest.raises(InvalidInput):
        store.scan_after("store_test", tenant="pg", after='pg/s" or pk != "', limit=5)


def test_scans_and_deletes_name_the_tenants_milvus_lite_partition(
    store: MilvusRecordStore, milvus: MilvusServer
) -> None:
    lite_only(milvus, "a server prunes partitions by the key itself")
    # milvus-lite's 16 partition-key buckets are found; each tenant's scan names its own
    # and still finds every row (a wrong bucket would find none), here and after a flush.
    assert store._buckets["store_test"] == 16
    tenants = [f"p{n}" for n in range(40)]
    assert len({tuple(store._partitions("store_test", t) or ()) for t in tenants}) > 8
    store.upsert("store_test", [rec(t, "s", n) for t in tenants for n in range(3)])
    for tenant in tenants:
        assert sorted(r.pk for r in store.scan("store_test", tenant=tenant)) == [f"{tenant}/s/t{n}" for n in range(3)]
    store._connect().flush("store_test")
    assert all(len(store.scan("store_test", tenant=t, with_vectors=False)) == 3 for t in tenants)
    assert store.delete("store_test", tenant="p7", session="s") == 3
    assert store.scan("store_test", tenant="p7") == [] and len(store.scan("store_test", tenant="p8")) == 3


def test_partition_layouts_other_than_milvus_lites_are_not_pruned() -> None:
    from strata.store.milvus import _lite_buckets

    assert _lite_buckets(["_default", *(f"_pk_{n}" for n in range(16))]) == 16
    assert _lite_buckets([f"_default_{n}" for n in range(64)]) == 0  # a Milvus server's partition-key layout
    assert _lite_buckets(["_default", "_pk_0", "_pk_2"]) == 0
    assert _lite_buckets(["_default", "tenant_a"]) == 0 and _lite_buckets(["_default"]) == 0


def test_servers_that_misplace_upserted_rows_are_known_by_their_version() -> None:
    from strata.store.milvus import _places_upserts_by_key

    assert not _places_upserts_by_key("v2.3.5-lite")  # the test server: milvus-io/milvus#30607
    assert not _places_upserts_by_key("v2.3.9") and not _places_upserts_by_key("some cloud")
    assert _places_upserts_by_key("v2.3.10") and _places_upserts_by_key("v2.4.0") and _places_upserts_by_key("2.6.1")


def test_a_tenant_s_upserted_rows_are_found_and_deleted_by_its_filter(store: MilvusRecordStore) -> None:
    # On the test server (2.3.5) an upserted row lands outside its tenant's partition: a
    # pruned `tenant == ...` filter found none of 20 rows, and deleted none.
    store.upsert("store_test", [rec("u", "s", n) for n in range(20)])
    store.upsert("store_test", [rec("u", "s", n) for n in range(20)])  # again: replaced, not doubled
    assert len(store.scan("store_test", tenant="u")) == 20
    # A server counts each pk's versions.
    assert store.delete("store_test", tenant="u", session="s", kinds=["turn"]) in (20, 40)
    assert store.scan("store_test", tenant="u") == []


def test_the_ttl_sweep_walks_only_collections_that_hold_deadlines(milvus: MilvusServer) -> None:
    writer, sweeper = open_store(milvus), open_store(milvus)
    for s in (writer, sweeper):
        s.ensure_collection("deadline_test", dim=DIM)
    writer.upsert("deadline_test", [rec("d", "s", n) for n in range(3)])
    assert sweeper.expired("deadline_test", now_ms=10**13, kinds=["turn"]) == []
    assert "deadline_test" not in sweeper._deadlines  # no marker yet: nothing was walked
    writer.upsert("deadline_test", [replace(rec("d", "s", 7), payload={"expires_ms": 5})])
    # The other process (a shard's sweeper) finds the marker the writer left, then the row:
    # at once on milvus-lite; on a server the sweep's bounded read may miss the last few
    # seconds' writes, and a later sweep takes them.
    deadline = time.monotonic() + (0 if milvus.kind == "lite" else 30)
    while (
        not (found := sweeper.expired("deadline_test", now_ms=10**13, kinds=["turn"])) and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert found == [("d", "s", "d/s/t7")]
    assert "deadline_test" in sweeper._deadlines
    assert sweeper.expired("deadline_test", now_ms=4, kinds=["turn"]) == []
    # The marker is no tenant's row and no layer's kind.
    assert [r.pk for r in writer.scan("deadline_test", tenant="d")] == [f"d/s/t{n}" for n in (0, 1, 2, 7)]


def test_upsert_replaces_by_primary_key(store: MilvusRecordStore) -> None:
    store.upsert("store_test", [rec("c", "s", 1)])
    store.upsert("store_test", [Record(**{**rec("c", "s", 1).__dict__, "text": "changed"})])
    assert [r.text for r in store.scan("store_test", tenant="c")] == ["changed"]


@pytest.mark.parametrize("tenant", ['a" or tenant != "x', "a\\", "a b", "", "\uff41", "%"])  # \uff41: a full-width a
def test_filter_injection_is_refused_before_reaching_milvus(store: MilvusRecordStore, tenant: str) -> None:
    with pytest.raises(InvalidInput):
        store.scan("store_test", tenant=tenant)
    with pytest.raises(InvalidInput):
        store.delete("store_test", tenant=tenant)


def test_outage_fails_fast_and_restart_recovers(store: MilvusRecordStore, milvus: MilvusServer) -> None:
    lite_only(milvus, "the server is shared by the session; tests/integration/test_crash.py stops it")
    store.upsert("store_test", [rec("d", "s", n) for n in range(3)])
    milvus.kill()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        store.upsert("store_test", [rec("d", "s", 9)])
    assert time.monotonic() - started < 10
    assert "Milvus" in info.value.message
    milvus.start()
    # The restarted server has the collection released; the store loads it and retries.
    assert sorted(r.payload["n"] for r in store.scan("store_test", tenant="d")) == [0, 1, 2]
    store.upsert("store_test", [rec("d", "s", 9)])
    assert len(store.scan("store_test", tenant="d")) == 4


def test_every_read_but_the_sweep_sees_another_process_s_last_write(milvus: MilvusServer) -> None:
    """The rule of :mod:`strata.store.milvus`: a write acknowledged to one process is read at
    once by any other, by key, by scan, by the tenant list and by a delete by key. A server's
    default read ("Bounded") misses such a write (a key created a moment ago answered 401)."""
    writer, reader = open_store(milvus), open_store(milvus)
    for s in (writer, reader):
        s.ensure_collection("fresh_test", dim=DIM)
    for n in range(5):
        tenant = f"fresh{n}"
        writer.upsert("fresh_test", [rec(tenant, "s", n)])
        assert [r.pk for r in reader.get("fresh_test", tenant=tenant, pks=[f"{tenant}/s/t{n}"])] == [f"{tenant}/s/t{n}"]
        writer.upsert("fresh_test", [replace(rec(tenant, "s", n), text="changed")])
        assert [r.text for r in reader.scan("fresh_test", tenant=tenant)] == ["changed"]
        assert tenant in reader.tenants("fresh_test")
        writer.upsert("fresh_test", [rec(tenant, "s", n + 100)])
        assert reader.delete("fresh_test", tenant=tenant, pks=[f"{tenant}/s/t{n + 100}"]) == 1
        assert [r.pk for r in writer.scan("fresh_test", tenant=tenant)] == [f"{tenant}/s/t{n}"]
        writer.delete("fresh_test", tenant=tenant)
        assert reader.scan("fresh_test", tenant=tenant) == []
        assert reader.get("fresh_test", tenant=tenant, pks=[f"{tenant}/s/t{n}"]) == []
