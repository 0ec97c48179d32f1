"""A tenant's slot in a shard, at the edges of its life (issue 18): a slot that was forgotten
or evicted is dead, and a call that reaches its lock goes to the current slot; versions are
never handed out twice. No Ray: the plain :class:`~strata_actors.shard.LayerShard` over the
in-memory reference store, with gates that hold a store call where a race needs it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from strata.config import StrataSettings
from strata.errors import VersionConflict
from strata.store.records import InMemoryRecordStore, Record
from strata.store.versions import VersionStore
from strata_actors.shard import LayerShard

_ROWS = "rows"
_STATE = "state"
T = "tenant-a"


class _GatedStore(InMemoryRecordStore):
    """Holds the next version read (after reading) or version write (before writing) until released."""

    def __init__(self) -> None:
        super().__init__()
        for name in (_ROWS, _STATE):
            self.ensure_collection(name, dim=2)
        self.hold_read, self.hold_write = threading.Event(), threading.Event()
        self.reached, self.release = threading.Event(), threading.Event()

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]:
        rows = super().get(collection, tenant=tenant, pks=pks)
        if collection == _STATE and self.hold_read.is_set():
            self.hold_read.clear()
            self.reached.set()
            self.release.wait(10)
        return rows

    def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if collection == _STATE and self.hold_write.is_set():
            self.hold_write.clear()
            self.reached.set()
            self.release.wait(10)
        super().upsert(collection, records)


class _Collections:
    state = _STATE  # where a forget's tombstones are read from (actors/forgetting.py)


class _Shard(LayerShard[list[str]]):
    """A layer that is a list of texts, one durable row each."""

    def __init__(self) -> None:
        super().__init__(StrataSettings.from_dict({}).model_dump(), 0)
        self.store = _GatedStore()
        self.counters = VersionStore(self.store, _STATE)

    async def _backend(self) -> Any:
        return self.store, _Collections(), self.counters

    def make_layer(self, tenant: str, store: Any, collections: Any) -> list[str]:
        return sorted(r.text for r in self.store.scan(_ROWS, tenant=tenant))

    def tenant_rows(self, collections: Any) -> tuple[str, list[str] | None]:
        return _ROWS, None

    async def add(self, text: str, **kwargs: Any) -> int:
        def write(layer: list[str]) -> str:
            self.store.upsert(_ROWS, [Record(f"{T}/{text}", T, "s", "row", 0, text)])
            return text

        _, version = await self.mutate(T, "scope", None, write, lambda layer, t: layer.append(t), **kwargs)
        return version


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never met")


async def _holding(shard: _Shard) -> tuple[asyncio.Task[None], asyncio.Event]:
    """A call that holds the tenant's lock until the returned event is set."""
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold(layer: list[str]) -> None:
        holding.set()
        await release.wait()

    task = asyncio.create_task(shard.run_locked(T, hold))
    await holding.wait()
    return task, release


@pytest.mark.parametrize("end", ["evict", "forget"])
async def test_a_writer_queued_behind_an_eviction_or_forget_writes_through_the_current_slot(end: str) -> None:
    shard = _Shard()
    assert await shard.add("before") == 1
    old = shard._tenants[T]
    holder, release = await _holding(shard)
    ending = asyncio.create_task(shard.evict(T) if end == "evict" else shard.forget_tenant(T))
    await _until(lambda: old.lockers == 2)
    # Queued behind the eviction (or forget); its version write is held, so a writer that
    # arrives next would read the durable counter before it lands.
    shard.store.hold_write.set()
    queued = asyncio.create_task(shard.add("queued"))
    await _until(lambda: old.lockers == 3)
    release.set()
    await asyncio.to_thread(shard.store.reached.wait, 10)
    late = asyncio.create_task(shard.add("late"))
    # Old code: "late" loads a fresh slot, reads the counter (1) and claims 2 beside "queued".
    await _until(lambda: late.done() or (T in shard._tenants and shard._tenants[T].lockers >= 2))
    shard.store.release.set()
    versions = await asyncio.gather(queued, late, holder, ending)
    assert sorted(versions[:2]) == [2, 3], f"versions {versions[:2]} (one claimed twice?)"
    assert old.dead and shard._tenants[T] is not old
    current = shard._tenants[T].layer
    if end == "evict":
        assert sorted(current) == ["before", "late", "queued"]  # nothing acknowledged is lost
    else:  # the forget deleted "before"; the writes queued behind it landed in the emptied tenant
        assert sorted(current) == ["late", "queued"]
    assert sorted(r.text for r in shard.store.scan(_ROWS, tenant=T)) == sorted(current)
    assert shard.counters.get(T, "layer", "scope") == 3


async def test_a_version_read_outside_the_lock_never_lowers_the_cached_one() -> None:
    """The CI flake of test_crash (an episodic version acknowledged twice after a restart): a
    read of the version outside the lock (a replayed turn's answer) began before a write
    claimed the next version, and wrote the older value into the cache when it ended."""
    shard = _Shard()
    await shard._load(T)  # a fresh slot: no version cached, as after a restart
    shard.store.hold_read.set()
    reading = asyncio.create_task(shard.version(T, "scope"))  # reads 0, then waits
    await asyncio.to_thread(shard.store.reached.wait, 10)
    assert await shard.add("first") == 1
    shard.store.release.set()
    assert await reading in (0, 1)
    assert await shard.add("second") == 2


async def test_work_begun_before_a_forget_is_refused_after_it() -> None:
    """A background job (a skill being learned, a document being indexed) notes the tenant's
    generation when it begins; its write after a forget is refused, and writes nothing."""
    shard = _Shard()
    await shard.add("kept")
    before = shard.generation(T)
    assert await shard.add("same generation", generation=before) == 2
    await shard.forget_tenant(T)
    with pytest.raises(VersionConflict, match="forgotten"):
        await shard.add("from before the forget", generation=before)
    assert shard.store.scan(_ROWS, tenant=T) == []
    assert await shard.add("new", generation=shard.generation(T)) == 3  # the refused write claimed nothing
    assert [r.text for r in shard.store.scan(_ROWS, tenant=T)] == ["new"]


def test_keyed_locks_exclude_per_key_and_keep_nothing_once_released() -> None:
    from strata_actors.residency import KeyedLocks

    locks = KeyedLocks()
    inside: dict[str, int] = {}
    most: dict[str, int] = {}

    async def work(key: str) -> None:
        async with locks.hold(key):
            inside[key] = inside.get(key, 0) + 1
            most[key] = max(most.get(key, 0), inside[key])
            await asyncio.sleep(0.001)
            inside[key] -= 1

    async def run() -> None:
        await asyncio.gather(*(work(f"tenant-{n % 50}") for n in range(500)))

    asyncio.run(run())
    assert most == {f"tenant-{n}": 1 for n in range(50)}  # one holder per key at a time
    assert len(locks) == 0  # 50 tenants served, no lock left behind
