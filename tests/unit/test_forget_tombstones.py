"""Forget tombstones (issue 42, docs/scaling.md): their rows, the shard's memory of them, and a
shard refusing writes under one. No Ray: the rows over the in-memory reference store, and the
plain :class:`~strata_actors.shard.LayerShard` on it."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from strata.errors import ForgetInProgress, InvalidInput
from strata.ids import SYSTEM_TENANT
from strata.store.records import InMemoryRecordStore, Record
from strata.store.tombstones import Tombstone, TombstoneStore
from strata_actors.forgetting import CALL, RESUME_AFTER_S, StandingForgets
from tests.unit.list_shard import ROWS, STATE, ListShard, list_store

LAYERS = ("working", "episodic", "semantic", "procedural")


# -- the rows ---------------------------------------------------------------------


def test_a_tenants_tombstones_are_read_in_one_read_and_not_another_tenants() -> None:
    rows = TombstoneStore(list_store(), STATE)
    whole = Tombstone.begin("acme", LAYERS)
    session = Tombstone.begin("acme", ("working", "episodic"), session="s1")
    rows.put(whole)
    rows.put(session)
    rows.put(Tombstone.begin("acme-2", LAYERS))
    assert sorted(rows.of_tenant("acme"), key=lambda t: t.session or "") == [whole, session]
    assert rows.of_tenant("other") == []
    with pytest.raises(InvalidInput):
        Tombstone.begin("acme", LAYERS, session="no/slash")


def test_a_forget_is_finished_when_every_layer_marked_its_part_of_that_forget() -> None:
    store = list_store()
    rows = TombstoneStore(store, STATE)
    first = Tombstone.begin("acme", LAYERS)
    rows.put(first)
    for layer in ("working", "episodic", "semantic"):
        rows.mark_done(first, layer)
    (found,), stray = rows.pending()
    assert found.tombstone == first and found.done == {"working", "episodic", "semantic"}
    assert not found.finished and stray == []
    rows.mark_done(first, "procedural")
    assert rows.pending()[0][0].finished

    # A second forget of the tenant overwrites the tombstone: the first one's marks do not count.
    second = Tombstone.begin("acme", LAYERS)
    rows.put(second)
    (found,), stray = rows.pending()
    assert found.tombstone == second and found.done == frozenset() and len(stray) == 4
    assert rows.remove(first) is False  # the second stands: nothing deleted
    assert rows.of_tenant("acme") == [second]
    rows.mark_done(second, "working")
    assert rows.remove(second) is True
    first_marks = [f"{SYSTEM_TENANT}/forgotten/acme/{first.forget_id}/{layer}" for layer in LAYERS]
    assert rows.of_tenant("acme") == [] and rows.pending() == ([], first_marks)
    # Only the system tenant's rows: a forget of the tenant never deletes its own tombstone.
    assert store.scan(STATE, tenant="acme") == []


def test_a_tenants_forget_and_its_sessions_forget_are_two_tombstones() -> None:
    rows = TombstoneStore(list_store(), STATE)
    whole, session = Tombstone.begin("acme", LAYERS), Tombstone.begin("acme", ("working",), session="s1")
    rows.put(whole)
    rows.put(session)
    rows.mark_done(session, "working")
    found = {f.tombstone.key: f for f in rows.pending()[0]}
    assert found[("acme", "s1")].finished and not found[("acme", None)].finished
    assert rows.remove(session) and rows.of_tenant("acme") == [whole]


def test_what_a_tombstone_refuses() -> None:
    whole, session = Tombstone.begin("t", LAYERS), Tombstone.begin("t", ("working", "episodic"), session="s1")
    assert whole.refuses("anything", None) and whole.refuses("s2", "s2")
    assert session.refuses("s1", None) and session.refuses("episodic", "s1")  # by scope, or by the call's session
    assert session.refuses("episodic", None)  # a write whose session is not known: refused to be safe
    assert not session.refuses("s2", "s2") and not session.refuses("episodic", "s2")


def test_a_refused_write_crosses_the_actor_boundary_and_answers_503_with_retry_after() -> None:
    from strata_serve.errors import error_response

    refused = ForgetInProgress("tenant 't' is being forgotten", tenant="t", session_id=None, retry_after_s=1)
    again = pickle.loads(pickle.dumps(refused))  # noqa: S301  round-trips its own object, as Ray does
    assert type(again) is ForgetInProgress and again.details == refused.details
    response = error_response(again)
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert json.loads(bytes(response.body))["error"] == "ForgetInProgress"


# -- the shard's memory of them ------------------------------------------------------


def test_memory_keeps_what_was_noted_while_a_read_of_the_store_ran() -> None:
    standing = StandingForgets()
    old, new = Tombstone.begin("t", LAYERS), Tombstone.begin("u", LAYERS)
    standing.note(old)
    since = standing.mark()
    standing.note(new)  # e.g. a forget's part began while the read ran
    standing.sync([], since=since)  # the read found neither
    assert standing.of("t") == [] and standing.of("u") == [new]
    standing.sync([old], since=standing.mark(), tenant="t")  # a load of t found it: noted again
    assert standing.of("t") == [old]


def test_a_lift_only_lifts_its_own_forget() -> None:
    standing = StandingForgets()
    first, second = Tombstone.begin("t", LAYERS), Tombstone.begin("t", LAYERS)
    standing.note(first)
    standing.note(second)
    assert standing.lift(first) is False and standing.of("t") == [second]
    assert standing.lift(second) is True and standing.of("t") == []


# -- a shard under a tombstone --------------------------------------------------------


class _Shard(ListShard):
    def __init__(self, store: InMemoryRecordStore) -> None:
        super().__init__(store, shards=1)

    async def add(self, tenant: str, session_id: str, text: str) -> int:
        def write(layer: list[str]) -> str:
            self.store.upsert(ROWS, [Record(f"{tenant}/{text}", tenant, session_id, "row", 0, text)])
            return text

        _, version = await self.mutate(tenant, "episodic", None, write, lambda layer, t: layer.append(t))
        return version

    async def forget_session(self, tenant: str, session_id: str) -> dict[str, Any]:
        def delete(layer: list[str]) -> int:
            return self.store.delete(ROWS, tenant=tenant, session=session_id)

        removed, version = await self.remove(tenant, "episodic", None, delete, lambda layer: layer.clear())
        return {"removed": removed, "version": version}


async def test_after_its_part_a_layer_refuses_writes_until_the_forget_is_lifted() -> None:
    store = list_store()
    shard = _Shard(store)
    await shard.add("t", "s1", "before")
    await shard.add("other", "s1", "kept")
    tombstone = Tombstone.begin("t", ("episodic", "semantic"))
    TombstoneStore(store, STATE).put(tombstone)
    assert await shard.forget(tombstone) == {"removed": 1}
    with pytest.raises(ForgetInProgress) as refused:
        await shard.add("t", "s1", "during")
    assert refused.value.status_code == 503 and refused.value.details["retry_after_s"] == 1
    assert "tenant 't' is being forgotten" in refused.value.message
    await shard.add("other", "s1", "still written")  # another tenant is not held up

    # A restarted shard (or a moved tenant's new owner) reads the tombstone when it loads the tenant.
    fresh = _Shard(store)
    with pytest.raises(ForgetInProgress):
        await fresh.add("t", "s1", "during")
    assert [f.done for f in TombstoneStore(store, STATE).pending()[0]] == [{"episodic"}]

    TombstoneStore(store, STATE).remove(tombstone)  # every layer's part done
    assert await shard.lift_forget(tombstone) is True
    await shard.add("t", "s1", "after")
    assert await shard.texts("t") == ["after"]
    # The fresh shard was not told: its periodic check finds the row gone.
    await fresh.check_forgets()
    await fresh.add("t", "s1", "after too")
    assert sorted(r.text for r in store.scan(ROWS, tenant="t")) == ["after", "after too"]


async def test_a_sessions_forget_refuses_that_sessions_writes_only() -> None:
    store = list_store()
    shard = _Shard(store)
    await shard.add("t", "s1", "one")
    await shard.add("t", "s2", "two")
    tombstone = Tombstone.begin("t", ("episodic",), session="s1")
    TombstoneStore(store, STATE).put(tombstone)
    assert (await shard.forget(tombstone))["removed"] == 1  # its own change is not refused
    # The session of a write is the call's: what LayerShard.call records.
    CALL.set(("add", ("t", "s2", "three"), {}))
    await shard.add("t", "s2", "three")
    CALL.set(("add", ("t", "s1", "again"), {}))
    with pytest.raises(ForgetInProgress, match="session 's1' of tenant 't'"):
        await shard.add("t", "s1", "again")
    CALL.set(None)
    with pytest.raises(ForgetInProgress):  # a write that names no session: refused to be safe
        await shard.add("t", "s2", "unknown")


async def test_the_periodic_check_finishes_a_forget_its_caller_left() -> None:
    store = list_store()
    shard = _Shard(store)
    await shard.add("t", "s1", "doomed")
    tombstone = Tombstone.begin("t", ("episodic",))
    TombstoneStore(store, STATE).put(tombstone)  # the caller wrote it, then died
    await shard.add("t", "s1", "before its part")  # not told yet: taken, and the part deletes it
    begun = tombstone.begun_ms / 1000
    assert await shard.check_forgets(now=lambda: begun + 1) == 0  # too young: its caller may still be at it
    later = begun + RESUME_AFTER_S + 1
    assert await shard.check_forgets(now=lambda: later) == 1
    assert store.scan(ROWS, tenant="t") == []
    assert TombstoneStore(store, STATE).pending() == ([], [])  # every part done: removed
    await shard.add("t", "s1", "after")
    assert await shard.texts("t") == ["after"]
