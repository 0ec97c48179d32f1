"""A shard keeps at most ``actors.max_resident_tenants`` tenants in memory (no Ray, no store:
the residency logic is the plain :class:`~strata_actors.shard.LayerShard`)."""

from __future__ import annotations

import asyncio
from typing import Any

from strata.config import StrataSettings
from strata_actors.shard import LayerShard


class _Shard(LayerShard[list[str]]):
    def __init__(self, **actors: Any) -> None:
        super().__init__(StrataSettings.from_dict({"actors": actors}).model_dump(), 0)
        self.loads: list[str] = []

    async def _backend(self) -> Any:
        return None, None, None

    def make_layer(self, tenant: str, store: Any, collections: Any) -> list[str]:
        self.loads.append(tenant)
        return [tenant]


def _age(shard: _Shard, tenant: str, seconds: float) -> None:
    shard._tenants[tenant].last_used -= seconds


async def test_loading_past_the_cap_evicts_the_least_recently_used() -> None:
    shard = _Shard(max_resident_tenants=3, resident_grace_s=5.0)
    for tenant, age in (("a", 30), ("b", 10), ("c", 20)):
        await shard._load(tenant)
        _age(shard, tenant, age)
    await shard._load("d")
    assert sorted(shard._tenants) == ["b", "c", "d"]  # a was used longest ago
    await shard._load("a")  # comes back from the store
    assert sorted(shard._tenants) == ["a", "b", "d"] and shard.loads.count("a") == 2


async def test_busy_and_recent_tenants_stay_over_the_cap() -> None:
    shard = _Shard(max_resident_tenants=2, resident_grace_s=5.0)
    await shard._load("locked")
    await shard._load("recent")
    _age(shard, "locked", 60)
    slot = shard._tenants["locked"]
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with shard._hold(slot):
            holding.set()
            await release.wait()

    async def wait_for_it() -> None:
        async with shard._hold(slot):
            pass

    holder = asyncio.create_task(hold())
    await holding.wait()
    waiter = asyncio.create_task(wait_for_it())
    await asyncio.sleep(0)
    assert slot.lockers == 2
    await shard._load("new")
    assert sorted(shard._tenants) == ["locked", "new", "recent"]  # nothing could go
    release.set()
    await asyncio.gather(holder, waiter)
    assert slot.lockers == 0
    slot.lockers = 1  # between a release and its waiter's turn the lock is free: the count keeps the slot
    _age(shard, "recent", 60)
    _age(shard, "new", 30)
    await shard._load("newer")
    assert sorted(shard._tenants) == ["locked", "newer"]  # two over the cap: "recent" and "new" go
    slot.lockers = 0
    await shard._load("newest")
    assert "locked" not in shard._tenants  # now it may go
