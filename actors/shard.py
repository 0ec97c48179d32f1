"""Ownership and versioning shared by every layer actor.

A shard actor owns the state of many tenants for one layer; each tenant
lives on exactly one shard (see :mod:`strata_actors.router`), so the shard is the
single writer of that tenant's rows and in-memory index.

Versioning is optimistic. Each (tenant, layer, scope) has a durable counter;
a mutation may carry ``expected_version`` and fails with
:class:`~strata.errors.VersionConflict` when it differs. The new version is
claimed durably *before* the mutation runs, so a crash between the two
leaves a gap, never a reused version. Mutations of one tenant run one at a
time (a per-tenant lock); reads do not wait for it, and see either the
state before a mutation or after it, since the in-memory state changes
only in one step after the durable write.

Tenant state is loaded on first use and evicted after ``idle_evict_s``
without calls; it comes back from the store on the next call, so eviction
and an actor restart are the same thing to a caller.

The edges of a tenant's life. A slot that is evicted or forgotten is marked
*dead* (under its lock, or with no call at its lock) and leaves the shard; a
call that then takes a dead slot's lock goes back to the current slot, loaded
fresh from the store. So two slots of a tenant never both write, and a fresh
slot continues from the durable version counters (a forget never deletes
them), never handing out a version twice. A write that overlaps a forget is
ordered before the forget's delete (and deleted by it) or after it: it lands
in the emptied tenant, acknowledged after the layer acknowledged the forget.
Work that read the tenant before a forget and writes later (a skill job, a
document indexed in the background, a summary) carries the tenant's
:meth:`LayerShard.generation`; a forget changes it, and such a write is
refused (``VersionConflict``, nothing written) rather than re-create what
the forget removed.

Expiry (TTL): before a shard answers any call for a tenant, it purges the
tenant's items whose deadline has passed (from every store, as a versioned
change, derived artefacts included), so an expired item is never returned.
A sweep every ``ttl.sweep_interval_s`` asks the store which rows have
expired and purges those tenants too, loaded or not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import numpy as np

from strata.access.audit import AuditLog
from strata.access.audit import entry as audit_entry
from strata.clock import now_ms
from strata.config import StrataSettings
from strata.errors import StrataError, VersionConflict
from strata.ids import SYSTEM_TENANT, validate_id
from strata.providers.embedder import Embedder, make_embedder
from strata.providers.llm import LLM, LLMUsage
from strata.store.layout import Collections, open_store
from strata.store.records import RecordStore
from strata.store.ttl import EXPIRES
from strata.store.vector_models import VectorModel, check_collection, check_tenant
from strata.store.versions import VersionStore

__all__ = ["EXPIRY_KEY_ID", "KeyedLocks", "LayerShard", "WholeRecordExpiry", "owner_shard"]

#: The audit history's key id of a purge by TTL (no key made that change).
EXPIRY_KEY_ID = "ttl"

_L = TypeVar("_L")
_R = TypeVar("_R")
_log = logging.getLogger(__name__)


def owner_shard(tenant: str, shards: int) -> int:
    """The shard of a layer with ``shards`` actors that owns ``tenant``."""
    return zlib.crc32(tenant.encode()) % shards


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
class _Tenant(Generic[_L]):
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


class WholeRecordExpiry:
    """Expiry hooks for a layer whose records expire whole, each its own version scope
    (a document, a skill): the layer keeps ``expiries`` by record id, and ``delete(id)`` /
    ``drop(id)`` remove a record from the store and from memory."""

    def due(self, layer: Any) -> int | None:
        return cast(int | None, layer.expiries.due())

    def expiring(self, layer: Any, at_ms: int) -> dict[str, Any]:
        return {record_id: record_id for record_id in layer.expiries.expired(at_ms)}

    def delete_expired(self, layer: Any, scope: str, expired: Any) -> int:
        return int(layer.delete(expired))

    def drop_expired(self, layer: Any, scope: str, expired: Any) -> None:
        layer.drop(expired)


class LayerShard(Generic[_L]):
    """Base of the layer actors: tenant slots, versions, lazy load, eviction."""

    layer_name = "layer"
    #: Row kinds that may carry a deadline (``payload.expires_ms``), for the sweep.
    expiring_kinds: tuple[str, ...] = ()
    #: The :class:`Collections` field naming the collection of this layer's vectors (None: it
    #: keeps none): checked against the configured embedder when the store is opened.
    vectors_in: str | None = None
    #: The reads a caller may send several of in one actor call (:meth:`reads`).
    batched_reads: frozenset[str] = frozenset()

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        self.settings = StrataSettings.from_dict(settings)
        self.shard = shard
        self._store: RecordStore | None = None
        self._collections: Collections | None = None
        self._versions: VersionStore | None = None
        self._tenants: dict[str, _Tenant[_L]] = {}
        #: Forgets begun and ended per tenant in this actor's life (see :meth:`generation`).
        self._generations: dict[str, int] = {}
        self._loading: dict[str, asyncio.Future[_Tenant[_L]]] = {}
        #: Loads started by :meth:`reads` for tenants not in memory (held until done).
        self._warming: set[asyncio.Task[None]] = set()
        self._evictor: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        #: Items purged because they expired, since this actor started.
        self.expired_items = 0
        #: The LLM this shard calls, if any: its usage is reported by :meth:`llm_usage`.
        self.llm: LLM | None = None
        self._embedder: Embedder | None = None

    # -- to be provided by each layer ---------------------------------------

    def make_layer(self, tenant: str, store: RecordStore, collections: Collections) -> _L:
        raise NotImplementedError

    def load_layer(self, layer: _L) -> None:
        """Blocking load of a tenant's durable state (runs in a worker thread)."""

    # -- expiry, for layers whose items may carry a TTL -----------------------------

    def due(self, layer: _L) -> int | None:
        """The earliest deadline (epoch ms) of the items in memory; None: nothing expires."""
        return None

    def expiring(self, layer: _L, at_ms: int) -> dict[str, Any]:
        """What has expired at ``at_ms``, by version scope (pure: no change yet)."""
        return {}

    def delete_expired(self, layer: _L, scope: str, expired: Any) -> int:
        """Blocking: remove ``expired`` (from :meth:`expiring`) from the store; rows removed."""
        return 0

    def drop_expired(self, layer: _L, scope: str, expired: Any) -> None:
        """Remove ``expired`` from memory (after :meth:`delete_expired`)."""

    def load_for_expiry(self, layer: _L, sessions: set[str]) -> None:
        """Blocking: load state the layer reads lazily (the sessions the sweep found)."""

    def after_expiry(self, tenant: str) -> None:
        """Called on the event loop after items of ``tenant`` were purged."""

    # -- embedding, for layers that embed in the actor ------------------------------

    def embedder(self) -> Embedder:
        """The configured embedder, loaded on first use (blocking: call it off the event loop)."""
        if self._embedder is None:
            self._embedder = make_embedder(self.settings.embedding)
        return self._embedder

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stored texts (turns, summaries, chunks, skills)."""
        embedder = await asyncio.to_thread(self.embedder)
        return await asyncio.to_thread(embedder.embed, list(texts))

    async def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Queries: what searches the stored texts."""
        embedder = await asyncio.to_thread(self.embedder)
        return await asyncio.to_thread(embedder.embed_query, list(texts))

    # -- plumbing -------------------------------------------------------------

    async def _backend(self) -> tuple[RecordStore, Collections, VersionStore]:
        if self._store is None or self._collections is None or self._versions is None:
            store, collections = await asyncio.to_thread(open_store, self.settings)
            vectors = self._vector_collection(collections)
            if vectors is not None:  # before any use: a store of another embedder's vectors is refused
                await asyncio.to_thread(check_collection, store, collections.state, vectors, self._vector_model)
            self._store, self._collections = store, collections
            self._versions = VersionStore(store, collections.state)
        if self._evictor is None:
            self._evictor = asyncio.get_running_loop().create_task(self._evict_idle())
        if self._sweeper is None and self.expiring_kinds:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())
        return self._store, self._collections, self._versions

    @property
    def _vector_model(self) -> VectorModel:
        return VectorModel.of(self.settings.embedding)

    def _vector_collection(self, collections: Collections) -> str | None:
        """The collection of this layer's vectors; None for a layer without."""
        return None if self.vectors_in is None else str(getattr(collections, self.vectors_in))

    async def _tenant(self, tenant: str, *, scope: str | None = None) -> _Tenant[_L]:
        """The tenant's slot, loaded, with what has expired purged (for reads: a write
        takes :meth:`_locked`). ``scope``: a version scope the caller reads next, read
        from the store with the tenant's load when the tenant is cold (:meth:`_load`)."""
        slot = await self._load(tenant, scope=scope)
        if self._expired(slot):
            if slot.holder is asyncio.current_task():
                await self._expire_locked(tenant, slot)
            else:
                async with self._locked(tenant) as slot:
                    pass
        return slot

    def _expired(self, slot: _Tenant[_L]) -> bool:
        due = self.due(slot.layer)
        return due is not None and due <= now_ms()

    @asynccontextmanager
    async def _locked(self, tenant: str) -> AsyncIterator[_Tenant[_L]]:
        """The tenant's current slot, its lock held, what has expired purged.

        A slot found dead once its lock is taken (evicted or forgotten meanwhile) is
        let go, and the current one taken instead (loaded fresh from the store)."""
        while True:
            slot = await self._load(tenant)
            async with self._hold(slot):
                if slot.dead:
                    continue
                if self._expired(slot):
                    await self._expire_locked(tenant, slot)
                yield slot
                return

    async def _load(self, tenant: str, *, scope: str | None = None) -> _Tenant[_L]:
        """The tenant's slot, loading it if it is not in memory.

        A load's store reads run at once, not one after the other: the tenant's vector-model
        mark, its rows, and the durable version of ``scope`` when given. On a Milvus server
        each is a strong read that waits for the server's next time tick (~200 ms by
        default), so a cold tenant cost three ticks a layer. Reading the version beside the
        rows is safe because no one else writes this tenant: this shard owns it, and its
        own writes wait for the load (they go through this slot)."""
        validate_id(tenant, field="tenant")
        slot = self._tenants.get(tenant)
        if slot is not None:
            slot.last_used = time.monotonic()
            return slot
        pending = self._loading.get(tenant)
        if pending is not None:  # another call is loading it: share that load
            return await asyncio.shield(pending)
        future: asyncio.Future[_Tenant[_L]] = asyncio.get_running_loop().create_future()
        self._loading[tenant] = future
        try:
            store, collections, versions = await self._backend()
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
            slot = _Tenant(layer)
            if scope is not None:
                slot.versions[scope] = int(cast(int, done[-1]))
            self._make_room()
            self._tenants[tenant] = slot
            future.set_result(slot)
            return slot
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody shares it
            raise
        finally:
            self._loading.pop(tenant, None)

    @asynccontextmanager
    async def _hold(self, slot: _Tenant[_L]) -> AsyncIterator[None]:
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

    async def _claim(self, tenant: str, slot: _Tenant[_L], scope: str) -> int:
        """Durably claim the next version of ``scope`` (the caller holds the lock)."""
        _, _, versions = await self._backend()
        new = await self._version(tenant, slot, scope) + 1
        await asyncio.to_thread(versions.put, tenant, self.layer_name, scope, new)
        slot.versions[scope] = new
        return new

    async def _expire_locked(self, tenant: str, slot: _Tenant[_L]) -> int:
        """Purge what has expired, one versioned change per scope (the caller holds the lock)."""
        purged, entries = 0, []
        for scope, expired in self.expiring(slot.layer, now_ms()).items():
            version = await self._claim(tenant, slot, scope)
            purged += await asyncio.to_thread(self.delete_expired, slot.layer, scope, expired)
            self.drop_expired(slot.layer, scope, expired)
            entries.append(audit_entry("expire", self.layer_name, scope, key_id=EXPIRY_KEY_ID, version=version))
        if entries:
            self.expired_items += purged
            self.after_expiry(tenant)
            store, collections, _ = await self._backend()
            try:  # best effort, as every audit row: the purge is durable already
                await asyncio.to_thread(AuditLog(store, collections.state).append, tenant, entries)
            except StrataError as exc:
                _log.warning("audit of expired %s items of tenant %s not written: %s", self.layer_name, tenant, exc.message)
        return purged

    async def sweep(self) -> int:
        """Purge every expired row of this shard's tenants, loaded or not; returns rows removed."""
        store, collections, _ = await self._backend()
        collection, _ = self.tenant_rows(collections)
        rows = await asyncio.to_thread(store.expired, collection, now_ms=now_ms(), kinds=self.expiring_kinds)
        shards = int(getattr(self.settings.actors, f"{self.layer_name}_shards"))
        found: dict[str, tuple[set[str], list[str]]] = {}
        for tenant, session, pk in rows:
            if tenant != SYSTEM_TENANT and owner_shard(tenant, shards) == self.shard:
                sessions, pks = found.setdefault(tenant, (set(), []))
                sessions.add(session)
                pks.append(pk)
        purged = 0
        for tenant, (sessions, pks) in found.items():
            async with self._locked(tenant) as slot:
                await asyncio.to_thread(self.load_for_expiry, slot.layer, sessions)
                purged += await self._expire_locked(tenant, slot)
                purged += await asyncio.to_thread(self._delete_stragglers, store, collection, tenant, pks)
        return purged

    @staticmethod
    def _delete_stragglers(store: RecordStore, collection: str, tenant: str, pks: list[str]) -> int:
        """Delete the rows among ``pks`` that are still there and expired (none, when memory
        mirrors the store). Read again under the lock: a row the sweep saw may have been
        purged and written anew, with the same key and a later deadline, meanwhile."""
        at = now_ms()
        stale = [r.pk for r in store.get(collection, tenant=tenant, pks=pks) if 0 < int(r.payload.get(EXPIRES) or 0) <= at]
        return store.delete(collection, tenant=tenant, pks=stale) if stale else 0

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.ttl.sweep_interval_s)
            try:
                await self.sweep()
            except Exception as exc:
                _log.warning("%s shard %d: TTL sweep failed: %s", self.layer_name, self.shard, exc)

    async def version(self, tenant: str, scope: str) -> int:
        """The current version of (tenant, scope)."""
        return await self._version(tenant, await self._tenant(tenant, scope=scope), scope)

    async def versions(self, tenant: str, scopes: Sequence[str]) -> dict[str, int]:
        """The current version of (tenant, scope) for each of ``scopes``: those not in memory
        read in one store read, not one each (a page of 50 documents was 50 reads one after
        the other, and on a Milvus server each strong read waits for its next time tick,
        ~200 ms by default)."""
        return await self._versions_of(tenant, await self._tenant(tenant), scopes)

    async def _version(self, tenant: str, slot: _Tenant[_L], scope: str) -> int:
        return (await self._versions_of(tenant, slot, [scope]))[scope]

    async def _versions_of(self, tenant: str, slot: _Tenant[_L], scopes: Sequence[str]) -> dict[str, int]:
        unknown = [scope for scope in dict.fromkeys(scopes) if scope not in slot.versions]
        if unknown:
            _, _, versions = await self._backend()
            durable = await asyncio.to_thread(versions.get_many, tenant, self.layer_name, unknown)
            # Reads take no lock: a claim may have cached a newer version while this one was
            # read, and writing the older value over it would hand that version out again.
            for scope, value in durable.items():
                slot.versions[scope] = max(value, slot.versions.get(scope, 0))
        return {scope: slot.versions[scope] for scope in scopes}

    async def read(self, tenant: str, scope: str, fn: Callable[[_L], _R]) -> tuple[_R, int]:
        """Run a read of the tenant's layer on the event loop; returns its result and
        the version read. Layers whose mutations change memory in a worker thread
        read through :meth:`run_locked` instead."""
        while True:
            slot = await self._tenant(tenant, scope=scope)
            version = await self._version(tenant, slot, scope)
            if not slot.dead:  # forgotten while the version was read: read the current slot
                return fn(slot.layer), version

    async def mutate(
        self,
        tenant: str,
        scope: str,
        expected_version: int | None,
        write: Callable[[_L], _R],
        apply: Callable[[_L, _R], Any] | None = None,
        *,
        generation: int | None = None,
    ) -> tuple[Any, int]:
        """Run a mutation under the tenant's lock; returns its result and the new version.

        ``write`` does the blocking, durable part in a worker thread; ``apply``
        then updates in-memory state on the actor's event loop, so reads running
        concurrently never see a half-applied change.

        Args:
            generation: the tenant's :meth:`generation` when the work behind this write
                began, for work that read the tenant earlier (a job): the write is refused
                if the tenant was forgotten since.

        Raises:
            VersionConflict: ``expected_version`` is not the current version, or the
                tenant was forgotten since ``generation``.
        """
        return await self.mutate_versioned(
            tenant, scope, expected_version, lambda layer, _: write(layer), apply, generation=generation
        )

    async def mutate_versioned(
        self,
        tenant: str,
        scope: str,
        expected_version: int | None,
        write: Callable[[_L, int], _R],
        apply: Callable[[_L, _R], Any] | None = None,
        *,
        generation: int | None = None,
    ) -> tuple[Any, int]:
        """:meth:`mutate` for a ``write`` that records the version it makes (``write(layer, version)``)."""
        loaded = self._tenants.get(tenant)
        known = loaded.versions.get(scope) if loaded is not None else None
        if expected_version is not None and known is not None and expected_version < known:
            # Versions only grow: stale already, no need to queue for the lock to say so.
            raise self._conflict(scope, known, expected_version)
        async with self._locked(tenant) as slot:
            current = await self._version(tenant, slot, scope)
            if generation is not None and generation != self.generation(tenant):
                raise VersionConflict(
                    f"the tenant was forgotten while this {self.layer_name} change was being prepared: "
                    "nothing was written; send it again to write into the emptied tenant",
                    current_version=current,
                    layer=self.layer_name,
                )
            if expected_version is not None and expected_version != current:
                raise self._conflict(scope, current, expected_version)
            new = await self._claim(tenant, slot, scope)
            result: Any = await asyncio.to_thread(write, slot.layer, new)
            if apply is not None:
                result = apply(slot.layer, result)
            slot.last_used = time.monotonic()
            return result, new

    async def remove(
        self,
        tenant: str,
        scope: str,
        expected_version: int | None,
        delete: Callable[[_L], int],
        drop: Callable[[_L], None],
    ) -> tuple[int, int]:
        """A delete as a mutation: ``delete`` removes the durable rows (worker thread) and
        returns how many, ``drop`` then removes them from memory. Returns the rows
        removed and the new version."""

        def forget(layer: _L, removed: int) -> int:
            drop(layer)
            return removed

        removed, version = await self.mutate(tenant, scope, expected_version, delete, forget)
        return int(removed), version

    def _conflict(self, scope: str, current: int, expected: int) -> VersionConflict:
        return VersionConflict(
            f"{self.layer_name} state of {scope!r} is at version {current}, not {expected}: read it again and retry",
            current_version=current,
            layer=self.layer_name,
        )

    async def run_locked(self, tenant: str, fn: Callable[[_L], Awaitable[_R]]) -> _R:
        """Run an async step under the tenant's lock without claiming a version."""
        async with self._locked(tenant) as slot:
            return await fn(slot.layer)

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

    def _retire(self, tenant: str, slot: _Tenant[_L]) -> None:
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
        idle_s = self.settings.actors.idle_evict_s
        while True:
            await asyncio.sleep(min(idle_s / 4, 60.0))
            for tenant in self._idle_since(time.monotonic() - idle_s):
                self._retire(tenant, self._tenants[tenant])

    # -- forgetting a whole tenant ------------------------------------------------

    def tenant_rows(self, collections: Collections) -> tuple[str, list[str] | None]:
        """Where this layer keeps a tenant's rows: a collection, and the kinds there (None = all).
        Version counters are never among them: they carry no content, and a forgotten
        tenant's versions must not be reused."""
        raise NotImplementedError

    def generation(self, tenant: str) -> int:
        """How many times a forget of ``tenant`` began or ended in this actor's life (odd while
        one runs). Work that reads the tenant and writes later notes it when it begins, and
        passes it to :meth:`mutate`: a forget in between makes that write a conflict."""
        return self._generations.get(tenant, 0)

    async def forget_tenant(self, tenant: str) -> dict[str, Any]:
        """Delete every row this layer holds for ``tenant`` and drop it from memory.

        Under the tenant's lock: writes queued behind the forget find its slot dead and land in
        the emptied tenant (acknowledged after this call returns); work begun before it and
        written after it is refused (see :meth:`generation`)."""
        validate_id(tenant, field="tenant")
        store, collections, _ = await self._backend()
        collection, kinds = self.tenant_rows(collections)
        async with self._locked(tenant) as slot:
            before = self.generation(tenant)
            self._generations[tenant] = before + 1
            try:
                removed = await asyncio.to_thread(store.delete, collection, tenant=tenant, kinds=kinds)
                removed += await self.forget_derived(tenant)
            except BaseException:
                # Nothing forgotten for certain: the caller retries. Work begun before goes on
                # (work begun during it sees a new generation), and memory reloads from the store.
                self._generations[tenant] = before
                raise
            finally:
                self._retire(tenant, slot)
            self._generations[tenant] = before + 2
        return {"removed": removed}

    async def forget_derived(self, tenant: str) -> int:
        """Rows of ``tenant`` a layer keeps elsewhere (e.g. pending jobs), and its background work
        (a running job is refused at the lock by :meth:`generation`); none by default. Called
        under the tenant's lock."""
        return 0

    # -- remote methods common to all layers -------------------------------------

    async def reads(self, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[tuple[str, Any]]:
        """Several reads in one actor call (``(method, args, kwargs)``, the tenant first in
        args), run concurrently, each answered as ``("ok", result)``, ``("error", exc)`` or
        ``("cold", None)``: an actor call costs about 1.5 ms of CPU between the two processes
        whatever it carries, so concurrent requests' reads of one shard share one.

        A read of a tenant not in memory is not run here: its load from the store would hold
        up the warm reads sent with it. Its load is started, and the caller sends that read
        on its own (which waits for the load)."""

        async def one(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
            if method not in self.batched_reads:
                return "error", StrataError(f"{method!r} is not a read of the {self.layer_name} layer")
            tenant = args[0] if args else None
            if not isinstance(tenant, str) or tenant not in self._tenants:
                if isinstance(tenant, str):
                    self._warm(tenant)
                return "cold", None
            try:
                return "ok", await getattr(self, method)(*args, **kwargs)
            except Exception as exc:
                return "error", exc

        return list(await asyncio.gather(*(one(*call) for call in calls)))

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

    async def ping(self) -> dict[str, Any]:
        """Health of this shard: loaded tenants, and whether its store answers."""
        store, _, _ = await self._backend()
        await asyncio.to_thread(store.ping)
        return {
            "layer": self.layer_name, "shard": self.shard, "tenants_loaded": len(self._tenants),
            "expired_items": self.expired_items,
        }

    async def llm_usage(self) -> LLMUsage:
        """This shard's LLM calls and tokens since it started (all tenants), for cost reports: a copy."""
        usage = getattr(self.llm, "usage", None)
        return dataclasses.replace(usage) if isinstance(usage, LLMUsage) else LLMUsage()

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
