"""KeyStore against a real milvus-lite server: the rows, revocation seen by another replica, lookup cost."""

from __future__ import annotations

import json
import statistics
import time

import pytest

from strata.access.keys import KeyStore, hash_key, open_keys
from strata.config import StrataSettings
from strata.errors import InvalidInput, NotFound
from strata.ids import SYSTEM_TENANT
from strata.store.layout import Collections, open_store
from strata.store.records import RecordStore
from tests.conftest import MilvusServer, settings_for

#: Each test runs on milvus-lite and on a Milvus server (tests/conftest.py).
STORES = ("lite", "server")
Opened = tuple[RecordStore, Collections, StrataSettings]


@pytest.fixture(scope="module")
def opened(milvus: MilvusServer) -> Opened:
    settings = settings_for(milvus)
    store, names = open_store(settings)
    return store, names, settings


@pytest.fixture()
def keys(opened: Opened) -> KeyStore:
    store, names, _ = opened
    return open_keys(store, names)


def replica(opened: Opened) -> KeyStore:
    """A KeyStore over a connection of its own, as another API replica has."""
    store, names = open_store(opened[2])
    return open_keys(store, names)


def test_scopes_round_trip_and_only_hashes_are_stored(
    opened: Opened, keys: KeyStore
) -> None:
    store, names, _ = opened
    full = keys.issue("it-a")
    scoped = keys.issue("it-a", read_only=True, session_id="s1", name="bot 机器人")
    admin = keys.issue_admin()
    got = keys.lookup(scoped.key)
    assert got is not None
    assert (got.tenant, got.read_only, got.session_id, got.name) == ("it-a", True, "s1", "bot 机器人")
    full_info = keys.lookup(full.key)
    assert full_info is not None and full_info.session_id is None and full_info.scopes == "all"
    assert keys.tenant_of(admin.key) is None
    rows = store.scan(names.keys, tenant=SYSTEM_TENANT, with_vectors=False)
    text = json.dumps([[r.pk, r.session, r.kind, r.text, r.payload] for r in rows], ensure_ascii=False)
    for created in (full, scoped, admin):
        assert created.key not in text and created.key.removeprefix("sk-strata-") not in text
        assert f"{SYSTEM_TENANT}/apikey/{hash_key(created.key)}" in {r.pk for r in rows}
    assert store.scan(names.state, tenant="it-a") == []
    assert store.scan(names.keys, tenant="it-a") == []


def test_keys_of_an_older_data_dir_move_out_of_the_state_collection(opened: Opened) -> None:
    """Keys lived in the state collection before they had one of their own: adopted once, still valid."""
    store, names, _ = opened
    old = KeyStore(store, names.state).issue("it-old")
    moved = KeyStore(store, names.keys).adopt(names.state)
    assert moved >= 1
    assert [r for r in store.scan(names.state, tenant=SYSTEM_TENANT, with_vectors=False) if r.kind == "apikey"] == []
    found = KeyStore(store, names.keys).lookup(old.key)
    assert found is not None and found.tenant == "it-old"
    assert KeyStore(store, names.keys).adopt(names.state) == 0  # nothing left to move


def test_reserved_tenant_writes_nothing(opened: Opened, keys: KeyStore) -> None:
    before = len(keys.list())
    with pytest.raises(InvalidInput, match="reserved"):
        keys.create(SYSTEM_TENANT)
    assert len(keys.list()) == before


def test_an_idempotent_answer_kept_by_one_replica_is_replayed_by_another(opened: Opened) -> None:
    from strata.access.idempotency import Answer, IdempotencyStore

    store, names, _ = opened
    mine = IdempotencyStore(store, names.state, ttl_s=60)
    theirs = IdempotencyStore(open_store(opened[2])[0], names.state, ttl_s=60)
    for n in range(3):
        answer = Answer(f"print-{n}", 201, {"x-strata-version": str(n)}, "é" * (20_000 * n + 1))
        assert mine.put("it-idem", f"k{n}", answer)
        assert theirs.get("it-idem", f"k{n}") == answer  # the retry reached the other replica at once


def test_revoke_and_rotate_are_seen_at_once_by_another_replica(
    opened: Opened, keys: KeyStore
) -> None:
    other = replica(opened)
    key = keys.issue("it-b", session_id="s2", name="agent")
    assert other.tenant_of(key.key) == "it-b"
    rotated = keys.rotate(key.key_id)
    assert other.lookup(key.key) is None  # the very next lookup, no cache to expire
    new = other.lookup(rotated.key)
    assert new is not None and (new.tenant, new.session_id, new.name) == ("it-b", "s2", "agent")
    other.revoke(rotated.key_id)
    assert keys.lookup(rotated.key) is None
    listed = {i.key_id: i for i in keys.list("it-b")}
    assert set(listed) == {key.key_id, rotated.key_id}
    assert all(i.revoked_at is not None for i in listed.values())
    with pytest.raises(NotFound):
        keys.revoke("ffffffffffff")


def test_uncached_lookup_costs_a_few_milliseconds(keys: KeyStore, milvus: MilvusServer) -> None:
    key = keys.create("it-c")
    for _ in range(20):  # warm the connection
        keys.lookup(key)
    samples = []
    for _ in range(300 if milvus.kind == "lite" else 20):
        started = time.perf_counter()
        assert keys.lookup(key) is not None
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    median, p99 = statistics.median(samples), samples[int(len(samples) * 0.99)]
    print(f"\nKeyStore.lookup on {milvus.kind}: median {median:.2f} ms, p99 {p99:.2f} ms over {len(samples)} calls")
    if milvus.kind == "server":
        return  # a strong read waits for the server's time tick (200 ms): the key cache is what keeps it rare
    assert median < 20, f"a key lookup took {median:.1f} ms (median); authentication runs on every request"
