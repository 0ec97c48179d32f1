"""KeyStore against the in-memory reference store: scopes, listing, rotation, revocation."""

from __future__ import annotations

import argparse
import json
import pickle
from typing import Any

import pytest

from strata.access.keys import KeyInfo, KeyStore, hash_key
from strata.access.scopes import Forbidden, Need, authorize
from strata.errors import InvalidInput, NotFound
from strata.ids import SYSTEM_TENANT
from strata.store.records import InMemoryRecordStore, Record

STATE = "state"


class Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture()
def store() -> InMemoryRecordStore:
    s = InMemoryRecordStore()
    s.ensure_collection(STATE, dim=2)
    return s


@pytest.fixture()
def keys(store: InMemoryRecordStore) -> KeyStore:
    return KeyStore(store, STATE, clock=Clock())


def all_rows(store: InMemoryRecordStore) -> list[Record]:
    return store.scan(STATE, tenant=SYSTEM_TENANT)


def dumped(rows: list[Record]) -> str:
    return json.dumps([[r.pk, r.tenant, r.session, r.kind, r.text, r.payload] for r in rows])


def test_create_then_lookup_gives_tenant_scopes_and_id(keys: KeyStore) -> None:
    full = keys.create("t1")
    scoped = keys.issue("t1", read_only=True, session_id="s1", name="ci bot")
    info = keys.lookup(full)
    assert info is not None and info.tenant == "t1" and info.scopes == "all" and info.active
    assert info.key_id == hash_key(full)[:12]
    got = keys.lookup(scoped.key)
    assert got is not None
    assert (got.read_only, got.session_id, got.name, got.scopes) == (True, "s1", "ci bot", "read-only, session s1")
    assert got == KeyInfo(**scoped.model_dump(exclude={"key"}))
    assert keys.tenant_of(full) == keys.tenant_of(scoped.key) == "t1"
    assert "sk-strata" not in repr(scoped)  # the secret stays out of logs


def test_raw_keys_appear_in_no_row(store: InMemoryRecordStore, keys: KeyStore) -> None:
    made = [keys.create("t1"), keys.issue("t2", read_only=True, name="n").key, keys.issue_admin().key]
    made.append(keys.rotate(hash_key(made[0])[:12]).key)
    keys.revoke(hash_key(made[1])[:12])
    rows = all_rows(store)
    assert len(rows) == 4
    text = dumped(rows)
    for key in made:
        assert key not in text and key.removeprefix("sk-strata-") not in text
        assert any(r.pk.endswith(hash_key(key)) for r in rows)
    # Keys are out of every tenant's reach.
    assert store.scan(STATE, tenant="t1") == [] and store.scan(STATE, tenant="t2") == []


@pytest.mark.parametrize("tenant", [SYSTEM_TENANT, 'a" or 1==1', "", "a b", "x" * 129])
def test_reserved_or_bad_tenant_is_refused_and_writes_nothing(
    store: InMemoryRecordStore, keys: KeyStore, tenant: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        keys.create(tenant)
    assert info.value.details["field"] == "tenant"
    if tenant == SYSTEM_TENANT:
        assert "reserved" in info.value.message
    assert all_rows(store) == []


@pytest.mark.parametrize(("kw", "field"), [({"session_id": "bad id"}, "session_id"), ({"name": "a\nb"}, "name"),
                                           ({"name": "x" * 101}, "name")])
def test_bad_session_or_name_is_refused(store: InMemoryRecordStore, keys: KeyStore, kw: dict[str, Any],
                                        field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        keys.issue("t1", **kw)
    assert info.value.details["field"] == field
    assert all_rows(store) == []


def test_list_by_tenant_shows_ids_and_revoked_never_secrets(keys: KeyStore) -> None:
    a1 = keys.issue("a", name="first")
    a2 = keys.issue("a", read_only=True)
    b = keys.issue("b")
    admin = keys.issue_admin()
    keys.revoke(a1.key_id)
    listed = keys.list("a")
    assert [i.key_id for i in listed] == [a1.key_id, a2.key_id]  # oldest first
    assert listed[0].revoked_at is not None and listed[1].revoked_at is None
    assert {i.key_id for i in keys.list()} == {a1.key_id, a2.key_id, b.key_id, admin.key_id}
    text = json.dumps([i.model_dump(mode="json") for i in keys.list()])
    for created in (a1, a2, b, admin):
        assert created.key not in text and hash_key(created.key) not in text
    assert keys.list("nobody") == []
    with pytest.raises(InvalidInput):
        keys.list("bad tenant")


def test_revoke_stops_the_key_at_once_for_every_replica(store: InMemoryRecordStore, keys: KeyStore) -> None:
    key = keys.create("t1")
    other = keys.create("t1")
    replica = KeyStore(store, STATE)
    assert replica.tenant_of(key) == "t1"
    revoked = keys.revoke(hash_key(key)[:12])
    assert revoked.revoked_at is not None and not revoked.active
    assert keys.lookup(key) is None and replica.lookup(key) is None and replica.tenant_of(key) is None
    assert replica.tenant_of(other) == "t1"
    again = keys.revoke(revoked.key_id)  # idempotent: the first revocation time stays
    assert again.revoked_at == revoked.revoked_at


def test_revoke_and_rotate_refuse_unknown_and_malformed_ids(keys: KeyStore) -> None:
    keys.create("t1")
    with pytest.raises(NotFound):
        keys.revoke("0123456789ab")
    with pytest.raises(NotFound):
        keys.rotate("0123456789ab")
    for bad in ("abc", "0123456789AB", 'x" or 1==1', "0123456789abc"):
        with pytest.raises(InvalidInput):
            keys.revoke(bad)


def test_rotate_keeps_tenant_scopes_and_name_and_revokes_the_old_key(keys: KeyStore) -> None:
    old = keys.issue("t1", read_only=True, session_id="s9", name="agent")
    new = keys.rotate(old.key_id)
    assert new.key != old.key and new.key_id != old.key_id
    assert (new.tenant, new.read_only, new.session_id, new.name, new.admin) == ("t1", True, "s9", "agent", False)
    assert keys.lookup(old.key) is None
    assert keys.lookup(new.key) == KeyInfo(**new.model_dump(exclude={"key"}))
    with pytest.raises(InvalidInput, match="revoked"):
        keys.rotate(old.key_id)
    admin = keys.issue_admin(name="ops")
    rotated = keys.rotate(admin.key_id)
    got = keys.lookup(rotated.key)
    assert got is not None and got.admin and got.name == "ops" and keys.lookup(admin.key) is None


def test_admin_key_is_no_tenant_key(keys: KeyStore) -> None:
    admin = keys.issue_admin()
    info = keys.lookup(admin.key)
    assert info is not None and info.admin and info.tenant == SYSTEM_TENANT and info.scopes == "admin"
    assert keys.tenant_of(admin.key) is None  # `strata up`'s dev-key check must not take it for a tenant's
    with pytest.raises(Forbidden, match="admin"):
        authorize(info, Need(reads=frozenset({"semantic"})), session=None)


def test_rows_from_before_scopes_still_authenticate(store: InMemoryRecordStore, keys: KeyStore) -> None:
    key = "sk-strata-" + "L" * 32
    digest = hash_key(key)
    store.upsert(STATE, [Record(pk=f"{SYSTEM_TENANT}/apikey/{digest}", tenant=SYSTEM_TENANT, session="apikey",
                                kind="apikey", ts_ms=1_700_000_000_000, text="",
                                payload={"tenant": "demo", "key_id": digest[:12]})])
    info = keys.lookup(key)
    assert info is not None and info.tenant == "demo" and info.scopes == "all"
    assert info.layers == {"working", "episodic", "semantic", "procedural"}
    assert [i.key_id for i in keys.list("demo")] == [digest[:12]]
    keys.revoke(digest[:12])
    assert keys.tenant_of(key) is None


def test_garbage_keys_are_unknown(keys: KeyStore) -> None:
    real = keys.create("t1")
    for garbage in ("", real[:-1], real + "x", "sk-strata-\ud800", "Bearer " + real, "sk-strata-" + "a" * 300):
        assert keys.lookup(garbage) is None


def test_forbidden_is_a_403_that_survives_pickling() -> None:
    from strata_serve.errors import error_response

    err = pickle.loads(pickle.dumps(Forbidden("this key is read-only: it may call GET routes")))  # noqa: S301  round-trips its own object, as Ray does at the actor boundary
    assert isinstance(err, Forbidden) and err.message.startswith("this key is read-only")
    response = error_response(err)
    assert response.status_code == 403
    assert json.loads(bytes(response.body))["error"] == "Forbidden"


# --- the CLI over the same store ---------------------------------------------------


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: KeyStore,
            *argv: str) -> list[str]:
    from strata_cli import keys as keys_cli

    monkeypatch.setattr(keys_cli, "_keys", lambda args: keys)
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    keys_cli.add_arguments(parser)
    args = parser.parse_args(list(argv))
    assert args.fn(args) == 0
    return capsys.readouterr().out.splitlines()


def test_cli_prints_new_keys_last_and_lists_without_secrets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], keys: KeyStore
) -> None:
    out = run_cli(monkeypatch, capsys, keys, "create", "t1", "--read-only", "--session", "s1", "--name", "bot")
    key = out[-1]
    info = keys.lookup(key)
    assert info is not None and info.scopes == "read-only, session s1" and info.name == "bot"
    assert info.key_id in out[0] and key not in out[0]
    admin = run_cli(monkeypatch, capsys, keys, "create-admin")[-1]
    assert keys.lookup(admin) is not None
    rotated = run_cli(monkeypatch, capsys, keys, "rotate", info.key_id)[-1]
    assert keys.lookup(key) is None and keys.tenant_of(rotated) == "t1"
    listing = "\n".join(run_cli(monkeypatch, capsys, keys, "list", "t1"))
    assert listing.splitlines()[0].split() == ["ID", "TENANT", "SCOPES", "NAME", "CREATED", "REVOKED"]
    assert info.key_id in listing and hash_key(rotated)[:12] in listing
    for secret in (key, rotated, admin):
        assert secret not in listing and hash_key(secret) not in listing
    revoked = run_cli(monkeypatch, capsys, keys, "revoke", hash_key(rotated)[:12])
    assert "revoked" in revoked[0] and keys.lookup(rotated) is None
