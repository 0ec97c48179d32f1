"""Expiry (TTL): a tenant's expired items are purged before any call for it is answered.

Before a shard answers any call for a tenant, it purges the tenant's items whose deadline has
passed (from every store, as a versioned change, derived artefacts included), so an expired
item is never returned. A sweep every ``ttl.sweep_interval_s`` asks the store which rows have
expired and purges those tenants too, loaded or not.

:class:`TenantExpiry` gives the calls of a layer actor (:mod:`strata_actors.shard`) a tenant's
slot with what has expired purged: :meth:`TenantExpiry._tenant` for a read,
:meth:`TenantExpiry._locked` for a write. A layer says what expires through the hooks
(:meth:`~TenantExpiry.due`, :meth:`~TenantExpiry.expiring` ...), or takes
:class:`WholeRecordExpiry` when its records expire whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

from strata.access.audit import AuditLog
from strata.access.audit import entry as audit_entry
from strata.clock import now_ms
from strata.errors import StrataError
from strata.ids import SYSTEM_TENANT
from strata.store.layout import Collections
from strata.store.records import RecordStore
from strata.store.ttl import EXPIRES
from strata.store.versions import VersionStore
from strata_actors.residency import CALLER_EPOCH, TenantResidency, TenantSlot

__all__ = ["EXPIRY_KEY_ID", "TenantExpiry", "WholeRecordExpiry"]

#: The audit history's key id of a purge by TTL (no key made that change).
EXPIRY_KEY_ID = "ttl"

_L = TypeVar("_L")
_log = logging.getLogger(__name__)


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


class TenantExpiry(TenantResidency[_L]):
    """A layer actor's tenants with their expired items purged, and the sweep."""

    #: Row kinds that may carry a deadline (``payload.expires_ms``), for the sweep.
    expiring_kinds: tuple[str, ...] = ()

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        super().__init__(settings, shard)
        self._sweeper: asyncio.Task[None] | None = None
        #: Items purged because they expired, since this actor started.
        self.expired_items = 0

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

    # -- a tenant's slot, with what has expired purged ------------------------------------

    async def _backend(self) -> tuple[RecordStore, Collections, VersionStore]:
        backend = await super()._backend()
        if self._sweeper is None and self.expiring_kinds:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())
        return backend

    async def _tenant(self, tenant: str, *, scope: str | None = None) -> TenantSlot[_L]:
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

    def _expired(self, slot: TenantSlot[_L]) -> bool:
        due = self.due(slot.layer)
        return due is not None and due <= now_ms()

    @asynccontextmanager
    async def _locked(self, tenant: str) -> AsyncIterator[TenantSlot[_L]]:
        """The tenant's current slot, its lock held, what has expired purged.

        A slot found dead once its lock is taken (evicted or forgotten meanwhile) is
        let go, and the current one taken instead (loaded fresh from the store)."""
        while True:
            slot = await self._load(tenant)
            async with self._hold(slot):
                if slot.dead:
                    continue
                self._check_fence(tenant)  # the layer may have been scaled while this call waited
                if self._expired(slot):
                    await self._expire_locked(tenant, slot)
                yield slot
                return

    async def _expire_locked(self, tenant: str, slot: TenantSlot[_L]) -> int:
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
                _log.warning(
                    "audit of expired %s items of tenant %s not written: %s", self.layer_name, tenant, exc.message
                )
        return purged

    async def sweep(self) -> int:
        """Purge every expired row of this shard's tenants, loaded or not; returns rows removed."""
        store, collections, _ = await self._backend()
        collection, _ = self.tenant_rows(collections)
        rows = await asyncio.to_thread(store.expired, collection, now_ms=now_ms(), kinds=self.expiring_kinds)
        found: dict[str, tuple[set[str], list[str]]] = {}
        for tenant, session, pk in rows:
            if tenant != SYSTEM_TENANT and self._owns(tenant):
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
        rows = store.get(collection, tenant=tenant, pks=pks)
        stale = [r.pk for r in rows if 0 < int(r.payload.get(EXPIRES) or 0) <= at]
        return store.delete(collection, tenant=tenant, pks=stale) if stale else 0

    async def _sweep_forever(self) -> None:
        CALLER_EPOCH.set(None)  # a loop of the shard's own, not of the call that started it
        while True:
            await asyncio.sleep(self.settings.ttl.sweep_interval_s)
            try:
                await self.sweep()
            except Exception as exc:
                _log.warning("%s shard %d: TTL sweep failed: %s", self.layer_name, self.shard, exc)

