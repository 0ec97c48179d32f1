"""Forgetting a tenant or a session: a layer's own part, and the tombstone that makes a forget
atomic across layers (docs/scaling.md, "Forget tombstones").

Within one layer a forget is atomic: :meth:`TenantForgets.forget_tenant` deletes under the
tenant's lock, and work that read the tenant before and writes after is refused by its
:meth:`~TenantForgets.generation`. Across layers, the orchestrator writes a tombstone
(:mod:`strata.store.tombstones`) before it asks any layer, and asks each for its part
(:meth:`TenantForgets.forget`). From its part on, a layer refuses every write under the
tombstone (:class:`~strata.errors.ForgetInProgress`, a 503 with Retry-After) until the
tombstone is lifted, which happens only once every layer marked its part done; so no layer takes
a write into the emptied tenant before the whole forget is acknowledged.

The shard keeps the tombstones in memory (:class:`StandingForgets`), so a write costs a dict
lookup, not a store read. Memory is a cache of the rows: a tenant's load reads its tombstones
(beside its rows; its first write waits for that read), so a restarted shard, or the new owner
of a moved tenant, keeps refusing; and every
:data:`FORGET_CHECK_S` each shard reads all tombstones, does its part of any that a crash left
(the orchestrator's replica died, or this shard did mid-part), removes those whose every part is
done, and forgets those removed elsewhere.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any, TypeVar

from strata.errors import ForgetInProgress, InvalidInput, NotFound, StrataError, TenantMoved
from strata.ids import validate_id
from strata.store.layout import Collections
from strata.store.records import RecordStore
from strata.store.tombstones import Tombstone, TombstoneStore
from strata.store.versions import VersionStore
from strata_actors.expiry import TenantExpiry
from strata_actors.residency import CALLER_EPOCH

__all__ = ["CALL", "FORGET_CHECK_S", "RESUME_AFTER_S", "StandingForgets", "TenantForgets"]

#: How often a shard reads the store's tombstones (and finishes what a crash left).
FORGET_CHECK_S = 5.0
#: A tombstone this old whose part this shard has not marked done is one its forget's caller
#: no longer drives (crashed, or failed on another layer): the shard does its part itself. Younger
#: ones are left to the caller, so that the usual forget does not run each part twice.
RESUME_AFTER_S = 5.0

#: The remote call being answered, ``(method, args, kwargs)``: set by
#: :meth:`LayerShard.call <strata_actors.shard.LayerShard.call>`, read only when a session's
#: tombstone stands for the tenant (to learn the session a write is for).
CALL: ContextVar[tuple[str, tuple[Any, ...], dict[str, Any]] | None] = ContextVar("strata_call", default=None)
#: Set while a forget's own part runs: its changes (a session's delete) are not refused.
_IN_FORGET: ContextVar[bool] = ContextVar("strata_in_forget", default=False)

_L = TypeVar("_L")
_log = logging.getLogger(__name__)


class StandingForgets:
    """The tombstones a shard refuses writes under, by tenant and session (a cache of the store's).

    Each entry notes when it was noted (a counter), so that a read of the store begun earlier
    cannot drop one noted while it ran (:meth:`sync`).
    """

    def __init__(self) -> None:
        self._by_tenant: dict[str, dict[str | None, tuple[Tombstone, int]]] = {}
        self._noted = 0

    def of(self, tenant: str) -> list[Tombstone]:
        """The tombstones standing for ``tenant`` and its sessions."""
        held = self._by_tenant.get(tenant)
        return [t for t, _ in held.values()] if held else []

    def note(self, tombstone: Tombstone) -> None:
        """Refuse writes under ``tombstone`` from now on (over an earlier forget's of its scope)."""
        self._noted += 1
        self._by_tenant.setdefault(tombstone.tenant, {})[tombstone.session] = (tombstone, self._noted)

    def lift(self, tombstone: Tombstone) -> bool:
        """Stop refusing under ``tombstone``; a later forget's of the same scope stays."""
        held = self._by_tenant.get(tombstone.tenant, {})
        entry = held.get(tombstone.session)
        if entry is None or entry[0].forget_id != tombstone.forget_id:
            return False
        del held[tombstone.session]
        if not held:
            self._by_tenant.pop(tombstone.tenant, None)
        return True

    def mark(self) -> int:
        """Take before reading the store; give to :meth:`sync` with what the read found."""
        return self._noted

    def sync(self, found: Iterable[Tombstone], *, since: int, tenant: str | None = None) -> None:
        """Make memory what a read of the store begun at mark ``since`` found, for ``tenant``
        (every tenant when None): entries noted before the read and not found were lifted by
        their forget; entries noted since the read began are newer than it and stay."""
        by_key = {t.key: t for t in found if tenant is None or t.tenant == tenant}
        for name in [tenant] if tenant is not None else list(self._by_tenant):
            held = self._by_tenant.get(name, {})
            for session, (_, noted) in list(held.items()):
                if noted <= since and (name, session) not in by_key:
                    del held[session]
            if not held:
                self._by_tenant.pop(name, None)
        for key, tombstone in by_key.items():
            entry = self._by_tenant.get(key[0], {}).get(key[1])
            if entry is None or (entry[1] <= since and entry[0] != tombstone):
                self.note(tombstone)


_SIGNATURES: dict[tuple[str, str], inspect.Signature | None] = {}


def _takes_session(cls: type, method: str) -> inspect.Signature | None:
    """The signature of ``cls.method`` if it has a ``session_id`` parameter (kept per class)."""
    key = (cls.__qualname__, method)
    if key not in _SIGNATURES:
        signature = inspect.signature(getattr(cls, method))
        _SIGNATURES[key] = signature if "session_id" in signature.parameters else None
    return _SIGNATURES[key]


class TenantForgets(TenantExpiry[_L]):
    """A layer actor's forgets: its own part of one, and the refusal of writes under a tombstone."""

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        super().__init__(settings, shard)
        #: Forgets begun and ended per tenant in this actor's life (see :meth:`generation`).
        self._generations: dict[str, int] = {}
        self._standing = StandingForgets()
        #: Reads of a tenant's tombstones begun at its load and not yet in memory (or failed).
        self._forgets_read: dict[str, asyncio.Task[None]] = {}
        self._forget_checker: asyncio.Task[None] | None = None

    # -- one layer's forget ----------------------------------------------------------

    def generation(self, tenant: str) -> int:
        """How many times a forget of ``tenant`` began or ended in this actor's life (odd while
        one runs). Work that reads the tenant and writes later notes it when it begins, and
        passes it to :meth:`~strata_actors.shard.LayerShard.mutate`: a forget in between makes
        that write a conflict."""
        return self._generations.get(tenant, 0)

    async def forget_tenant(self, tenant: str) -> dict[str, Any]:
        """Delete every row this layer holds for ``tenant`` and drop it from memory.

        Under the tenant's lock: writes queued behind the forget find its slot dead and go to the
        emptied tenant (refused there while a tombstone stands: :meth:`forget`); work begun
        before it and written after it is refused (see :meth:`generation`)."""
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

    async def forget_session(self, tenant: str, session_id: str) -> dict[str, Any]:
        """Forget a session (``removed``, ``version``); only layers that keep memory per session do.

        Raises:
            NotFound: the layer holds nothing of the session.
        """
        raise InvalidInput(f"the {self.layer_name} layer keeps no memory per session", field="session_id")

    # -- a forget across layers: this layer's part of it --------------------------------

    async def forget(self, tombstone: Tombstone) -> dict[str, Any]:
        """This layer's part of the forget ``tombstone`` stands for (written to the store by the
        caller first): from now on refuse writes under it, forget the tenant or the session,
        and mark the part done. Idempotent: a part run again forgets what is left (nothing).

        Returns:
            What :meth:`forget_tenant` or :meth:`forget_session` returned.

        Raises:
            NotFound: a session this layer holds nothing of (the part is marked done first).
        """
        if self.layer_name not in tombstone.layers:
            raise InvalidInput(f"this forget does not reach the {self.layer_name} layer", field="layers")
        # Before the flag: the store's first opening starts the shard's loops, which must not inherit it.
        store, collections, _ = await self._backend()
        self._standing.note(tombstone)
        flag = _IN_FORGET.set(True)
        missing: NotFound | None = None
        try:
            if tombstone.session is None:
                result = await self.forget_tenant(tombstone.tenant)
            else:
                try:
                    result = await self.forget_session(tombstone.tenant, tombstone.session)
                except NotFound as exc:
                    result, missing = {}, exc
        finally:
            _IN_FORGET.reset(flag)
        await asyncio.to_thread(TombstoneStore(store, collections.state).mark_done, tombstone, self.layer_name)
        if missing is not None:
            raise missing
        return result

    async def lift_forget(self, tombstone: Tombstone) -> bool:
        """Take writes again under ``tombstone``'s scope: its forget is done in every layer and its
        row removed. Best effort (the periodic check lifts it too); False if not held here."""
        return self._standing.lift(tombstone)

    async def refuse_if_forgetting(self, tenant: str, scope: str) -> None:
        """Refuse a write of version ``scope`` of ``tenant`` under a standing tombstone (the
        caller holds the tenant's lock). Costs two dict lookups when none stands, once the
        tombstones read at the tenant's load are in.

        Raises:
            ForgetInProgress: the tenant, or the session the write is for, is being forgotten.
        """
        await self._forgets_known(tenant)
        standing = self._standing.of(tenant)
        if not standing or _IN_FORGET.get():
            return
        session = self._session_of_call(tenant) if any(t.session is not None for t in standing) else None
        for tombstone in standing:
            if tombstone.refuses(scope, session):
                raise ForgetInProgress(
                    f"{tombstone.describe()} is being forgotten: the {self.layer_name} layer takes no writes "
                    "for it until every layer has forgotten it; retry shortly (the write then goes to the emptied "
                    f"{'session' if tombstone.session else 'tenant'})",
                    tenant=tombstone.tenant, session_id=tombstone.session, retry_after_s=1,
                )

    def _session_of_call(self, tenant: str) -> str | None:
        """The session the remote call being answered is for, if it is a call for ``tenant``
        with a ``session_id`` (how a layer whose version scope is not the session is told it)."""
        call = CALL.get()
        if call is None or not call[1] or call[1][0] != tenant:
            return None
        method, args, kwargs = call
        signature = _takes_session(type(self), method)
        if signature is None:
            return None
        try:
            session = signature.bind(self, *args, **kwargs).arguments.get("session_id")
        except TypeError:
            return None
        return session if isinstance(session, str) else None

    # -- keeping the tombstones in memory, and finishing what a crash left -------------------

    def load_begun(self, tenant: str) -> None:
        """Read the tenant's tombstones beside its load, so that a restarted shard or a moved
        tenant's new owner refuses what the old one did. Reads do not wait for it; the tenant's
        first write does (:meth:`refuse_if_forgetting`)."""
        task = asyncio.get_running_loop().create_task(self._read_forgets(tenant))
        self._forgets_read[tenant] = task

        def done(task: asyncio.Task[None]) -> None:
            # Kept when it failed: the next write reads again (and fails if the store still does).
            if self._forgets_read.get(tenant) is task and not task.cancelled() and task.exception() is None:
                del self._forgets_read[tenant]

        task.add_done_callback(done)

    async def _read_forgets(self, tenant: str) -> None:
        store, collections, _ = await self._backend()
        since = self._standing.mark()
        found = await asyncio.to_thread(TombstoneStore(store, collections.state).of_tenant, tenant)
        self._standing.sync([t for t in found if self.layer_name in t.layers], since=since, tenant=tenant)

    async def _forgets_known(self, tenant: str) -> None:
        """Until the tombstones of ``tenant`` read at its load are in memory (at once once read)."""
        task = self._forgets_read.get(tenant)
        if task is None:
            return
        if task.done() and (task.cancelled() or task.exception() is not None):
            self.load_begun(tenant)
            task = self._forgets_read[tenant]
        await asyncio.shield(task)

    async def _backend(self) -> tuple[RecordStore, Collections, VersionStore]:
        backend = await super()._backend()
        if self._forget_checker is None:
            self._forget_checker = asyncio.get_running_loop().create_task(self._check_forgets_forever())
        return backend

    async def _check_forgets_forever(self) -> None:
        CALLER_EPOCH.set(None)  # a loop of the shard's own, not of the call that started it
        CALL.set(None)
        while True:
            try:
                await self.check_forgets()
            except Exception as exc:
                _log.warning("%s shard %d: checking forgets failed: %s", self.layer_name, self.shard,
                             exc.message if isinstance(exc, StrataError) else repr(exc))
            await asyncio.sleep(FORGET_CHECK_S)

    async def check_forgets(self, *, now: Callable[[], float] = time.time) -> int:
        """Read every tombstone: hold those of this layer in memory (and no other), do this
        shard's part of those its caller left undone (older than :data:`RESUME_AFTER_S`, of a
        tenant it owns), and remove those whose every part is done. Returns the parts done."""
        store, collections, _ = await self._backend()
        rows = TombstoneStore(store, collections.state)
        since = self._standing.mark()
        pending, stray = await asyncio.to_thread(rows.pending)
        mine = [f for f in pending if self.layer_name in f.tombstone.layers]
        self._standing.sync([f.tombstone for f in mine], since=since)
        resume_before_ms = (now() - RESUME_AFTER_S) * 1000
        parts = 0
        for found in mine:
            tombstone, done = found.tombstone, set(found.done)
            if self.layer_name not in done and tombstone.begun_ms <= resume_before_ms and self._owns(tombstone.tenant):
                try:
                    await self.forget(tombstone)
                except NotFound:
                    pass
                except TenantMoved:
                    continue  # the layer was scaled meanwhile: its new owner does it
                parts += 1
                done.add(self.layer_name)
                _log.info("%s shard %d finished its part of the forget of %s", self.layer_name, self.shard,
                          tombstone.describe())
            if done >= set(tombstone.layers) and await asyncio.to_thread(rows.remove, tombstone):
                self._standing.lift(tombstone)
        await asyncio.to_thread(rows.delete_marks, stray)
        return parts
