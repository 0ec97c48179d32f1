"""The fence of a move (issue 42, docs/scaling.md): a shard answers a tenant's calls only while it
owns the tenant under its placement view and the caller's epoch; a change of the view drops the
tenants it loses after their writes in flight, and refuses the writes queued behind them. No Ray:
the plain :class:`~strata_actors.shard.LayerShard` over the in-memory reference store."""

from __future__ import annotations

import asyncio

import pytest

from strata.errors import TenantMoved
from strata.store.placement import Placement, PlacementStore, ShardView
from strata.store.records import InMemoryRecordStore, Record
from strata_actors.placement import owner_shard, serves
from strata_actors.residency import CALLER_EPOCH
from tests.unit.list_shard import ROWS, STATE, ListShard, list_store

#: Tenants that shard 0 of 2 owns, and that go to shard 2 when the layer grows to 3.
STAYS = next(t for t in (f"t{i}" for i in range(100)) if owner_shard(t, 2) == 0 == owner_shard(t, 3))
MOVES = next(t for t in (f"t{i}" for i in range(100)) if owner_shard(t, 2) == 0 and owner_shard(t, 3) == 2)


class _Shard(ListShard):
    def __init__(self, store: InMemoryRecordStore) -> None:
        super().__init__(store, shards=2)

    async def add(self, tenant: str, text: str) -> int:
        def write(layer: list[str]) -> str:
            self.store.upsert(ROWS, [Record(f"{tenant}/{text}", tenant, "s", "row", 0, text)])
            return text

        _, version = await self.mutate(tenant, "scope", None, write, lambda layer, t: layer.append(t))
        return version


def test_serves_the_callers_epoch_and_the_one_before_for_tenants_that_stayed() -> None:
    view = ShardView(epoch=5, shards=3, prev_shards=2)
    assert serves(view, 0, STAYS, 5) and serves(view, 0, STAYS, 4) and serves(view, 0, STAYS, None)
    assert not serves(view, 0, STAYS, 3)  # two epochs old: its count may name a third owner
    assert not serves(view, 0, MOVES, 5) and serves(view, 2, MOVES, 5)
    assert not serves(view, 2, MOVES, 4)  # the caller placed it on shard 0: it is sent on again


def test_a_change_is_recorded_before_it_is_published() -> None:
    row = Placement("episodic", 2, epoch=3, prev_shards=1)
    intent = row.begin(4)
    assert intent.published == row.published == ShardView(3, 2, 1)
    assert intent.fenced == ShardView(4, 4, 2)  # shards serve by the next count at once
    assert intent.publish() == Placement("episodic", 4, 4, prev_shards=2)
    store = list_store()
    rows = PlacementStore(store, STATE)
    assert rows.get("episodic") is None
    rows.put(intent)
    assert rows.get("episodic") == intent


async def test_a_move_drops_the_tenant_after_its_write_in_flight_and_refuses_the_next() -> None:
    shard = _Shard(list_store())
    CALLER_EPOCH.set(0)
    await shard.add(MOVES, "first")
    await shard.add(STAYS, "kept")
    holding, release = asyncio.Event(), asyncio.Event()

    async def slow(layer: list[str]) -> None:
        holding.set()
        await release.wait()

    in_flight = asyncio.create_task(shard.run_locked(MOVES, slow))
    await holding.wait()
    queued = asyncio.create_task(shard.add(MOVES, "queued"))
    adopting = asyncio.create_task(shard.adopt_placement(ShardView(1, 3, 2)))
    await asyncio.sleep(0.01)
    assert not adopting.done()  # the fence waits for the write in flight
    release.set()
    assert await adopting == 1 and MOVES not in shard._tenants
    await in_flight
    with pytest.raises(TenantMoved) as refused:
        await queued
    assert refused.value.epoch == 1
    with pytest.raises(TenantMoved):
        await shard.texts(MOVES)
    assert await shard.texts(STAYS) == ["kept"]  # a caller of the epoch before, for a tenant that stayed
    CALLER_EPOCH.set(1)
    assert await shard.add(STAYS, "again") == 2


async def test_a_caller_of_a_newer_epoch_makes_the_shard_read_the_directory() -> None:
    store = list_store()
    shard = _Shard(store)
    CALLER_EPOCH.set(0)
    await shard.add(MOVES, "first")
    PlacementStore(store, STATE).put(Placement("episodic", 3, 1, prev_shards=2))  # published elsewhere
    CALLER_EPOCH.set(1)
    with pytest.raises(TenantMoved):
        await shard.add(MOVES, "second")
    assert shard._placement == ShardView(1, 3, 2)
