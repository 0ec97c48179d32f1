"""A forget of a tenant or a session is atomic across layers (issue 42, docs/scaling.md "Forget
tombstones"): a layer that did its part refuses writes until every layer did theirs, a forget
whose caller died is finished by the shards, and two forgets of one tenant at once both end.
Real Ray, real milvus-lite; the layers' parts are held back at the handle (the network boundary)
to hold a forget in the middle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import ray

from strata.errors import ForgetInProgress
from strata.schema import LAYERS
from strata.store.layout import open_store
from strata.store.tombstones import Tombstone, TombstoneStore
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.integration.layers import until_up

pytestmark = pytest.mark.usefixtures("ray_local")

#: Longer than this is a hang, not a slow machine (two busy cores).
HANG_S = 180.0
SECRET = "Quokka-Lantern"


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    return settings_for(milvus)


async def _fill(client: InClusterClient) -> None:
    await client.record_turns("s1", [{"user": f"The door code is {SECRET}.", "agent": "Noted."}])
    await client.add_working_items("s2", [{"role": "user", "content": f"Remember {SECRET} for later"}])
    await client.index_document(f"# Door\n\n{SECRET} opens the north door.", doc_id="door")
    await client.extract_skill(f"Open the {SECRET} door", [{"command": "door open --north"}])


def _rows(settings: Any, tenant: str) -> dict[str, list[Any]]:
    """Every row of ``tenant`` in the store, by collection (the state's version counters and
    audit trail left out: they carry no content, and a forget keeps them)."""
    store, names = open_store(settings)
    found = {name: store.scan(name, tenant=tenant, with_vectors=False)
             for name in (names.episodic, names.semantic, names.procedural)}
    found["state"] = [r for r in store.scan(names.state, tenant=tenant, with_vectors=False)
                      if r.kind not in ("version", "audit")]
    return found


def _tombstones(settings: Any) -> TombstoneStore:
    store, names = open_store(settings)
    return TombstoneStore(store, names.state)


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not after {HANG_S:.0f} s"
        await asyncio.sleep(0.5)


async def _write_when_taken(write: Callable[[], Awaitable[Any]]) -> Any:
    """``write``, sent again while a shard not yet told of the forget's end refuses it (each
    shard learns it at the latest at its next check)."""
    deadline = time.monotonic() + HANG_S
    while True:
        try:
            return await write()
        except ForgetInProgress:
            assert time.monotonic() < deadline, f"writes still refused after {HANG_S:.0f} s"
            await asyncio.sleep(0.5)


class _Held:
    """A layer's handle whose next forget part waits for ``release`` (after setting ``reached``)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.reached, self.release = asyncio.Event(), asyncio.Event()
        self.holding = True

    async def forget(self, tombstone: Tombstone) -> Any:
        if self.holding:
            self.holding = False
            self.reached.set()
            await self.release.wait()
        return await self._handle.forget(tombstone)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _hold(client: InClusterClient, layer: str) -> _Held:
    """Hold ``layer``'s next forget part in ``client``'s flow."""
    router = client._flow.router
    real = router.layer
    held = _Held(real(layer, client._tenant))  # type: ignore[arg-type]

    def layer_of(name: Any, tenant: str) -> Any:
        return held if name == layer and tenant == client._tenant else real(name, tenant)

    router.layer = layer_of  # type: ignore[method-assign,assignment]
    return held


async def test_a_layer_that_did_its_part_refuses_writes_until_every_layer_did(settings: Any) -> None:
    tenant = "atomic"
    client = InClusterClient(tenant, settings)
    await _fill(client)
    held = _hold(client, "procedural")
    forgetting = asyncio.create_task(client._flow.forget_tenant(tenant))
    await asyncio.wait_for(held.reached.wait(), HANG_S)
    rows = _tombstones(settings)

    async def three_parts_done() -> bool:
        pending, _ = await asyncio.to_thread(rows.pending)
        return any(f.tombstone.tenant == tenant and f.done == {"working", "episodic", "semantic"} for f in pending)

    await _until(three_parts_done, "the other layers' parts")
    # Every layer that did its part refuses; the emptied tenant takes nothing yet.
    with pytest.raises(ForgetInProgress, match="tenant 'atomic' is being forgotten"):
        await client.record_turns("s1", [{"user": "written during the forget", "agent": "no"}])
    with pytest.raises(ForgetInProgress):
        await client.add_working_items("s3", [{"role": "user", "content": "written during the forget"}])
    with pytest.raises(ForgetInProgress):
        await client.index_document("# During\n\nwritten during the forget", doc_id="during")
    # The layer whose part has not begun still takes writes: its part deletes them.
    await client.extract_skill("Open the side door", [{"command": "door open --side"}])
    assert not forgetting.done()

    held.release.set()
    removed = await asyncio.wait_for(forgetting, HANG_S)
    assert set(removed) == set(LAYERS) and all(n > 0 for n in removed.values())
    assert all(rows == [] for rows in _rows(settings, tenant).values())
    assert rows.of_tenant(tenant) == []

    # After the forget is acknowledged, writes go to the emptied tenant.
    await client.record_turns("s1", [{"user": "written after the forget", "agent": "kept"}])
    left = _rows(settings, tenant)
    names = open_store(settings)[1]
    assert [r.text for r in left[names.episodic] if r.kind == "turn"] != []
    assert all("after the forget" in r.text for r in left[names.episodic] if r.kind == "turn")
    assert left[names.procedural] == [] and left[names.semantic] == []


async def test_a_sessions_forget_refuses_that_session_only_until_both_layers_did_their_part(settings: Any) -> None:
    tenant = "session-atomic"
    client = InClusterClient(tenant, settings)
    await client.record_turns("s1", [{"user": f"In s1: {SECRET}", "agent": "ok"}])
    await client.record_turns("s2", [{"user": "In s2: nothing secret", "agent": "ok"}])
    held = _hold(client, "episodic")
    forgetting = asyncio.create_task(client._flow.forget_session(tenant, "s1"))
    await asyncio.wait_for(held.reached.wait(), HANG_S)
    rows = _tombstones(settings)

    async def working_done() -> bool:
        pending, _ = await asyncio.to_thread(rows.pending)
        return any(f.tombstone.key == (tenant, "s1") and f.done == {"working"} for f in pending)

    await _until(working_done, "working memory's part")
    with pytest.raises(ForgetInProgress, match="session 's1' of tenant 'session-atomic'"):
        await client.add_working_items("s1", [{"role": "user", "content": "written during the forget"}])
    await client.add_working_items("s2", [{"role": "user", "content": "another session goes on"}])
    held.release.set()
    result = await asyncio.wait_for(forgetting, HANG_S)
    assert result.removed["working"] > 0 and result.removed["episodic"] > 0
    assert (await client.get_working("s1")).items == []
    await client.add_working_items("s1", [{"role": "user", "content": "after the forget"}])
    assert [i.content for i in (await client.get_working("s1")).items] == ["after the forget"]
    assert "In s2" in " ".join(i.content for i in (await client.get_working("s2")).items)


async def test_a_forget_whose_caller_died_is_finished_by_the_shards_and_leaves_nothing(settings: Any) -> None:
    tenant = "orphaned"
    client = InClusterClient(tenant, settings)
    await _fill(client)
    # The caller wrote the tombstone, two layers did their part, and the caller died.
    tombstone = Tombstone.begin(tenant, LAYERS)
    rows = _tombstones(settings)
    rows.put(tombstone)
    router = LayerRouter(settings)
    for layer in ("working", "episodic"):
        await router.layer(layer, tenant).forget(tombstone)
    with pytest.raises(ForgetInProgress):
        await client.record_turns("s1", [{"user": "written while orphaned", "agent": "no"}])
    assert _rows(settings, tenant)[open_store(settings)[1].semantic] != []  # not done there yet

    # The other layers' shards die too; restarted, they find the tombstone and do their part.
    restarted = [router.handle("semantic", tenant), router.handle("procedural", tenant)]
    for actor in restarted:
        ray.kill(actor, no_restart=False)
    for actor in restarted:
        await until_up(actor, timeout_s=HANG_S)

    async def removed() -> bool:
        return await asyncio.to_thread(rows.of_tenant, tenant) == []

    await _until(removed, "the orphaned forget")
    assert all(found == [] for found in _rows(settings, tenant).values())
    assert rows.pending()[0] == [] or all(f.tombstone.tenant != tenant for f in rows.pending()[0])
    await _write_when_taken(lambda: client.record_turns("s1", [{"user": "after", "agent": "kept"}]))
    await _write_when_taken(lambda: client.index_document("# After\n\nafter the forget", doc_id="after"))


async def test_two_forgets_of_one_tenant_at_once_both_end_and_leave_no_tombstone(settings: Any) -> None:
    tenant = "twice"
    client = InClusterClient(tenant, settings)
    await _fill(client)
    held = _hold(client, "semantic")
    first = asyncio.create_task(client._flow.forget_tenant(tenant))
    await asyncio.wait_for(held.reached.wait(), HANG_S)
    second = await asyncio.wait_for(client._flow.forget_tenant(tenant), HANG_S)  # not held: runs through
    assert set(second) == set(LAYERS)
    held.release.set()
    await asyncio.wait_for(first, HANG_S)
    assert _tombstones(settings).pending() == ([], []) or all(
        f.tombstone.tenant != tenant for f in _tombstones(settings).pending()[0])
    assert all(found == [] for found in _rows(settings, tenant).values())
    await _write_when_taken(lambda: client.record_turns("s1", [{"user": "after both", "agent": "kept"}]))
