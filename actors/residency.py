"""Residency: which tenants a shard holds in memory, and how they come and go.

A shard actor owns the state of many tenants for one layer (which tenants:
:mod:`strata_actors.placement`). A tenant's state is a :class:`TenantSlot`: the layer's
in-memory state and the cache of its durable version counters. It is loaded from the store on
first use and evicted after ``idle_evict_s`` without calls, or for room past
``max_resident_tenants``; it comes back from the store on the next call, so eviction and an
actor restart are the same thing to a caller.

The edges of a tenant's life. A slot that is evicted or forgotten is marked *dead* (under its
lock, or with no call at its lock) and leaves the shard; a call that then takes a dead slot's
lock goes back to the current slot, loaded fresh from the store. So two slots of a tenant never
both write, and a fresh slot continues from the durable version counters (a forget never
deletes them), never handing out a version twice.

:class:`TenantResidency` is the bottom of a layer actor's classes: expiry
(:mod:`strata_actors.expiry`) and the calls a layer answers (:mod:`strata_actors.shard`) build
on it.

Which tenants a shard may hold changes when its layer is scaled (docs/scaling.md): the shard
keeps a view of its layer's placement (count and epoch, :mod:`strata.store.placement`), reads it
from the store when it opens the store and is told each change (:meth:`TenantResidency.adopt_placement`).
Every load of a tenant, and every write once it holds the tenant's lock, is checked against that
view and the epoch its caller placed the call by (:data:`CALLER_EPOCH`): a tenant it does not own
is refused with :class:`~strata.errors.TenantMoved`, and a change drops the tenants it loses
under their locks, after the writes in flight, so none is written by two shards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from strata.config import StrataSettings
from strata.errors import TenantMoved
from strata.ids import validate_id
from strata.store.layout import Collections, open_store
from strata.store.placement import PlacementStore, ShardView
from strata.store.records import RecordStore
from strata.store.vector_models import VectorModel, check_collection, check_tenant
from strata.store.versions import VersionStore
from strata_actors.placement import owner_shard, serves

__all__ = ["CALLER_EPOCH", "KeyedLocks", "TenantResidency", "TenantSlot"]

#: The placement epoch the current call's caller placed it by (None: placed by none, e.g. an
#: operator's direct call, or the shard's own background loops). Set per call by
#: :meth:`LayerShard.call <strata_actors.shard.LayerShard.call>`; tasks a call starts inherit it.
CALLER_EPOCH: ContextVar[int | None] = ContextVar("strata_caller_epoch", default=None)

_L = TypeVar("_L")
_log = logging.getLogger(__name__)


class KeyedLocks:
    """One asyncio lock per key (a tenant), held in the map only while someone holds or
    awaits it: a shard that serves thousands of tenants keeps no lock per tenant ever seen."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]


@dataclass
class TenantSlot(Generic[_L]):
    """One tenant's state on its shard: the layer, its lock, and its cached version counters."""

    layer: _L
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The task holding ``lock``: a call it makes that purges expired items must not wait for it.
    holder: asyncio.Task[Any] | None = None
    versions: dict[str, int] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    #: Calls holding or waiting for ``lock``: eviction for room or idleness passes over a slot
    #: with any (they would only reload it).
    lockers: int = 0
    #: Evicted or forgotten: a call that takes ``lock`` now goes back to the current slot.
    dead: bool = False


class TenantResidency(Generic[_L]):
    """The tenants a layer actor holds: their slots, the store they load from, eviction."""

    layer_name = "layer"
    #: The :class:`Collections` field naming the collection of this layer's vectors (None: it
    #: keeps none): checked against the configured embedder when the store is opened.
    vectors_in: str | None = None

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        self.settings = StrataSettings.from_dict(settings)
        self.shard = shard
        self._store: RecordStore | None = None
        self._collections: Collections | None = None
        self._versions: VersionStore | None = None
        self._tenants: dict[str, TenantSlot[_L]] = {}
        self._loading: dict[str, asyncio.Future[TenantSlot[_L]]] = {}
        #: Loads started by :meth:`reads` for tenants not in memory (held until done).
        self._warming: set[asyncio.Task[None]] = set()
        #: Drops of the tenants a newer placement gave away, read from the store by a call.
        self._adopting: set[asyncio.Task[int]] = set()
        self._evictor: asyncio.Task[None] | None = None
        #: Held while the store opens: the actor's start and its first calls open it once.
        self._opening_store = asyncio.Lock()
        #: The layer's placement as this shard serves it: the settings' count until the store's
        #: row is read (when the store opens), then the directory's (docs/scaling.md).
        self._placement = ShardView(0, int(getattr(self.settings.actors, f"{self.layer_name}_shards", 1)))

    # -- to be provided by each layer ---------------------------------------

    def make_layer(self, tenant: str, store: RecordStore, collections: Collections) -> _L:
        raise NotImplementedError

    def load_layer(self, layer: _L) -> None:
        """Blocking load of a tenant's durable state (runs in a worker thread)."""

    def loaded(self, tenant: str, layer: _L) -> None:
        """A tenant was loaded and is resident (on the event loop): start work its rows left
        undone, if any (the episodic layer's passages still to embed)."""

    def load_begun(self, tenant: str) -> None:
        """A tenant's load began (on the event loop): start reading what its writes are checked
        against besides its rows, beside them (a forget's tombstones:
        :mod:`strata_actors.forgetting`); nothing by default."""

    def tenant_rows(self, collections: Collections) -> tuple[str, list[str] | None]:
        """Where this layer keeps a tenant's rows: a collection, and the kinds there (None = all).
        Version counters are never among them: they carry no content, and a forgotten
        tenant's versions must not be reused."""
        raise NotImplementedError

    # -- the store, and a tenant's slot ------------------------------------------------

    async def _backend(self) -> tuple[RecordStore, Collections, VersionStore]:
        if self._store is None or self._collections is None or self._versions is None:
            async with self._opening_store:
                if self._store is None or self._collections is None or self._versions is None:
                    await self._open_store()
        if self._evictor is None:
            self._evictor = asyncio.get_running_loop().create_task(self._evict_idle())
        return cast(tuple[RecordStore, Collections, VersionStore], (self._store, self._collections, self._versions))

    async def _open_store(self) -> None:
        store, collections = await asyncio.to_thread(open_store, self.settings)
        vectors = self._vector_collection(collections)
        if vectors is not None:  # before any use: a store of another embedder's vectors is refused
            await asyncio.to_thread(check_collection, store, collections.state, vectors, self._vector_model)
        row = await asyncio.to_thread(PlacementStore(store, collections.state).get, self.layer_name)
        if row is not None and row.fenced.epoch >= self._placement.epoch:
            self._placement = row.fenced
        self._store, self._collections = store, collections
        self._versions = VersionStore(store, collections.state)

    @property
    def _vector_model(self) -> VectorModel:
        return VectorModel.of(self.settings.embedding)

    def _vector_collection(self, collections: Collections) -> str | None:
        """The collection of this layer's vectors; None for a layer without."""
        return None if self.vectors_in is None else str(getattr(collections, self.vectors_in))

    def _owns(self, tenant: str) -> bool:
        """Whether this shard owns ``tenant`` under its view (:mod:`strata_actors.placement`)."""
        return owner_shard(tenant, self._placement.shards) == self.shard

    # -- the fence: only the owner under the current epoch answers --------------------

    async def _fence(self, tenant: str) -> None:
        """Refuse a call for ``tenant`` unless this shard serves it to this caller; a caller
        of a newer epoch than this shard knows makes it read the directory's row first."""
        if self._store is None:
            await self._backend()  # reads the row
        epoch = CALLER_EPOCH.get()
        if epoch is not None and epoch > self._placement.epoch and self._store is not None and self._collections:
            row = await asyncio.to_thread(PlacementStore(self._store, self._collections.state).get, self.layer_name)
            if row is not None and row.fenced.epoch > self._placement.epoch:
                self._placement = row.fenced
                # The tenants it lost leave in the background: this call may hold one's lock.
                task = asyncio.get_running_loop().create_task(self.adopt_placement(row.fenced))
                self._adopting.add(task)
                task.add_done_callback(self._adopting.discard)
        self._check_fence(tenant)

    def _check_fence(self, tenant: str) -> None:
        if not serves(self._placement, self.shard, tenant, CALLER_EPOCH.get()):
            raise TenantMoved(
                f"{self.layer_name} shard {self.shard} does not hold this tenant at placement epoch "
                f"{self._placement.epoch} (the layer was scaled): retry",
                epoch=self._placement.epoch, retry_after_s=1,
            )

    async def adopt_placement(self, view: ShardView) -> int:
        """Serve by ``view`` from now on (the directory's call during a change), and drop the
        tenants it gives to other shards, each under its lock: a write in flight finishes first,
        one waiting for the lock is then refused. Returns how many tenants left."""
        if view.epoch < self._placement.epoch:
            return 0
        self._placement = view
        for future in [f for t, f in self._loading.items() if not self._owns(t)]:
            with contextlib.suppress(BaseException):  # a failed load holds nothing to drop
                await asyncio.shield(future)
        left = 0
        for tenant in [t for t in self._tenants if not self._owns(t)]:
            slot = self._tenants.get(tenant)
            if slot is None:
                continue
            async with self._hold(slot):
                if not slot.dead:
                    self._retire(tenant, slot)
                    left += 1
        return left

    async def _load(self, tenant: str, *, scope: str | None = None) -> TenantSlot[_L]:
        """The tenant's slot, loading it if it is not in memory.

        A load's store reads run at once, not one after the other: the tenant's vector-model
        mark, its rows, and the durable version of ``scope`` when given. On a Milvus server
        each is a strong read that waits for the server's next time tick (~200 ms by
        default), so a cold tenant cost three ticks a layer. Reading the version beside the
        rows is safe because no one else writes this tenant: this shard owns it, and its
        own writes wait for the load (they go through this slot)."""
        validate_id(tenant, field="tenant")
        await self._fence(tenant)
        slot = self._tenants.get(tenant)
        if slot is not None:
            slot.last_used = time.monotonic()
            return slot
        pending = self._loading.get(tenant)
        if pending is not None:  # another call is loading it: share that load
            return await asyncio.shield(pending)
        future: asyncio.Future[TenantSlot[_L]] = asyncio.get_running_loop().create_future()
        self._loading[tenant] = future
        try:
            store, collections, versions = await self._backend()
            self.load_begun(tenant)
            vectors = self._vector_collection(collections)
            layer = self.make_layer(tenant, store, collections)
            reads: list[Awaitable[Any]] = []
            if vectors is not None:  # a tenant `strata reindex --tenant` moved to another model
                reads.append(
                    asyncio.to_thread(check_tenant, store, collections.state, tenant, vectors, self._vector_model)
                )
            reads.append(asyncio.to_thread(self.load_layer, layer))
            if scope is not None:
                reads.append(asyncio.to_thread(versions.get, tenant, self.layer_name, scope))
            done = await asyncio.gather(*reads, return_exceptions=True)
            for result in done:  # the model check's error first: it says why the rows may not load
                if isinstance(result, BaseException):
                    raise result
            slot = TenantSlot(layer)
            if scope is not None:
                slot.versions[scope] = int(cast(int, done[-1]))
            self._make_room()
            self._tenants[tenant] = slot
            self.loaded(tenant, layer)
            future.set_result(slot)
            return slot
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody shares it
            raise
        finally:
            self._loading.pop(tenant, None)

    @asynccontextmanager
    async def _hold(self, slot: TenantSlot[_L]) -> AsyncIterator[None]:
        """The slot's lock, noting which task holds it (callers check ``slot.dead`` once in)."""
        slot.lockers += 1
        try:
            async with slot.lock:
                slot.holder = asyncio.current_task()
                try:
                    yield
                finally:
                    slot.holder = None
        finally:
            slot.lockers -= 1

    # -- the slot's version counters (cached; the store holds them) -------------------

    async def _claim(self, tenant: str, slot: TenantSlot[_L], scope: str, *, at_least: int = 0) -> int:
        """Durably claim the next version of ``scope``, or ``at_least`` if that is higher (a
        restored skill keeps its versions); the caller holds the lock."""
        _, _, versions = await self._backend()
        new = max(await self._version(tenant, slot, scope) + 1, at_least)
        await asyncio.to_thread(versions.put, tenant, self.layer_name, scope, new)
        slot.versions[scope] = new
        return new

    async def _version(self, tenant: str, slot: TenantSlot[_L], scope: str) -> int:
        return (await self._versions_of(tenant, slot, [scope]))[scope]

    async def _versions_of(self, tenant: str, slot: TenantSlot[_L], scopes: Sequence[str]) -> dict[str, int]:
        unknown = [scope for scope in dict.fromkeys(scopes) if scope not in slot.versions]
        if unknown:
            _, _, versions = await self._backend()
            durable = await asyncio.to_thread(versions.get_many, tenant, self.layer_name, unknown)
            # Reads take no lock: a claim may have cached a newer version while this one was
            # read, and writing the older value over it would hand that version out again.
            for scope, value in durable.items():
                slot.versions[scope] = max(value, slot.versions.get(scope, 0))
        return {scope: slot.versions[scope] for scope in scopes}

    # -- eviction -------------------------------------------------------------------

    def _make_room(self) -> None:
        """Evict least recently used tenants until one more fits under ``max_resident_tenants``.

        A tenant whose lock is held or awaited, or that was called within ``resident_grace_s``,
        stays: evicting it would only make those calls load it again (a call holding an evicted
        slot finds it dead at its lock and goes to the current one). So the shard may briefly
        hold more than the cap when that many tenants are busy at once.
        """
        excess = len(self._tenants) + 1 - self.settings.actors.max_resident_tenants
        if excess <= 0:
            return
        for tenant in self._idle_since(time.monotonic() - self.settings.actors.resident_grace_s)[:excess]:
            self._retire(tenant, self._tenants[tenant])

    def _retire(self, tenant: str, slot: TenantSlot[_L]) -> None:
        """Mark ``slot`` dead and drop it: the next call loads the tenant again. The caller holds
        the slot's lock, or no call is at it (nobody is between claiming and writing a version)."""
        slot.dead = True
        if self._tenants.get(tenant) is slot:
            del self._tenants[tenant]

    def _idle_since(self, cutoff: float) -> list[str]:
        """Tenants that may be evicted: unused since ``cutoff``, no call at their lock; oldest first."""
        idle = sorted((slot.last_used, tenant) for tenant, slot in self._tenants.items()
                      if slot.last_used < cutoff and not slot.lockers)
        return [tenant for _, tenant in idle]

    async def _evict_idle(self) -> None:
        CALLER_EPOCH.set(None)  # a loop of the shard's own, not of the call that started it
        idle_s = self.settings.actors.idle_evict_s
        while True:
            await asyncio.sleep(min(idle_s / 4, 60.0))
            for tenant in self._idle_since(time.monotonic() - idle_s):
                self._retire(tenant, self._tenants[tenant])

    # -- remote methods -------------------------------------------------------------

    def _warm(self, tenant: str) -> None:
        """Start loading ``tenant`` unless it is loading; a failure is the next call's to see."""
        if tenant in self._loading:
            return

        async def load() -> None:
            try:
                await self._load(tenant)
            except Exception:
                _log.debug("%s shard %d: warming %r failed", self.layer_name, self.shard, tenant, exc_info=True)

        task = asyncio.get_running_loop().create_task(load())
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    async def evict(self, tenant: str) -> bool:
        """Drop a tenant's in-memory state (it reloads from the store on next use)."""
        slot = self._tenants.get(tenant)
        if slot is None:
            return False
        async with self._hold(slot):
            if slot.dead:  # evicted or forgotten while this call waited
                return False
            self._retire(tenant, slot)
        return True
