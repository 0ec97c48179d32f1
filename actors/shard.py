"""The calls every layer actor answers: versioned reads and mutations, batched reads, health.

A shard actor owns the state of many tenants for one layer; each tenant lives on exactly one
shard (:mod:`strata_actors.placement`), so the shard is the single writer of that tenant's rows
and in-memory index. Which tenants it holds in memory, and how they load and leave, is
:mod:`strata_actors.residency`; purging what has expired before a call is answered is
:mod:`strata_actors.expiry`; forgetting a tenant or a session, in one layer and across them,
:mod:`strata_actors.forgetting`. :class:`LayerShard` builds on these; each layer's actor
(``working``, ``episodic``, ``semantic``, ``procedural``) subclasses it.

Versioning is optimistic. Each (tenant, layer, scope) has a durable counter;
a mutation may carry ``expected_version`` and fails with
:class:`~strata.errors.VersionConflict` when it differs. The new version is
claimed durably *before* the mutation runs, so a crash between the two
leaves a gap, never a reused version. Mutations of one tenant run one at a
time (a per-tenant lock); reads do not wait for it, and see either the
state before a mutation or after it, since the in-memory state changes
only in one step after the durable write.

A write that overlaps a forget is ordered before the forget's delete (and deleted by it) or
after it; after it, it is refused (``ForgetInProgress``) until every layer has done its part
of the forget, and then lands in the emptied tenant. Work that read the tenant before a forget
and writes later (a skill job, a document indexed in the background, a summary) carries the
tenant's :meth:`LayerShard.generation`; a forget changes it, and such a write is refused
(``VersionConflict``, nothing written) rather than re-create what the forget removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import ray

from strata.counting import count_tokens, on_behalf_of, process_counter
from strata.errors import StrataError, VersionConflict
from strata.providers.embedder import Embedder, embed_counted, make_embedder
from strata.providers.llm import LLM, LLMUsage
from strata_actors.forgetting import CALL, TenantForgets
from strata_actors.load import ShardLoad
from strata_actors.meter import send_to_collector
from strata_actors.residency import CALLER_EPOCH

__all__ = ["LayerShard"]

_log = logging.getLogger(__name__)

_L = TypeVar("_L")
_R = TypeVar("_R")


class LayerShard(ShardLoad, TenantForgets[_L]):
    """Base of the layer actors: versioned reads and mutations, forgets, batched reads, health."""

    #: The reads a caller may send several of in one actor call (:meth:`reads`).
    batched_reads: frozenset[str] = frozenset()

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        super().__init__(settings, shard)
        #: The LLM this shard calls, if any: its usage is reported by :meth:`llm_usage`.
        self.llm: LLM | None = None
        self._embedder: Embedder | None = None
        self._usage_writer: asyncio.Task[None] | None = None
        if self.settings.llm.enabled:
            send_to_collector(self.settings)
        #: The store opened as the actor starts (in an actor only: Ray runs an async actor's
        #: constructor on its event loop), not at its first call.
        self._opening: asyncio.Task[None] | None = None
        if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
            self._opening = asyncio.get_running_loop().create_task(self._open_at_start())

    async def _open_at_start(self) -> None:
        """Open the store now: the loops that opening starts (background jobs to take up,
        forgets to finish) run after a restart even when no call comes."""
        CALLER_EPOCH.set(None)
        try:
            await self._backend()
        except StrataError as exc:  # the first call opens it, or says why not
            _log.warning("%s shard %d could not open the store at start: %s", self.layer_name, self.shard, exc.message)

    # -- embedding, for layers that embed in the actor ------------------------------

    def embedder(self) -> Embedder:
        """The configured embedder, loaded on first use (blocking: call it off the event loop)."""
        if self._embedder is None:
            self._embedder = make_embedder(self.settings.embedding)
        return self._embedder

    async def embed(self, texts: Sequence[str], *, tenant: str) -> np.ndarray:
        """Stored texts (turns, summaries, chunks, skills) of ``tenant``, whose usage counts the tokens."""
        self.count_usage()
        return await asyncio.to_thread(self.embed_now, texts, tenant=tenant)

    async def embed_query(self, texts: Sequence[str], *, tenant: str) -> np.ndarray:
        """Queries of ``tenant``: what searches the stored texts."""
        self.count_usage()
        return await asyncio.to_thread(self.embed_now, texts, tenant=tenant, query=True)

    def embed_now(self, texts: Sequence[str], *, tenant: str, query: bool = False) -> np.ndarray:
        """:meth:`embed` (:meth:`embed_query` with ``query``), blocking: for a write step in a worker thread."""
        vectors, tokens = embed_counted(self.embedder(), list(texts), query=query)
        count_tokens("embedding", sum(tokens), tenant=tenant)
        return vectors

    # -- usage: this process's counts, written every serve.usage_flush_s ----------------

    @contextlib.asynccontextmanager
    async def on_behalf_of(self, tenant: str) -> AsyncIterator[None]:
        """The LLM calls made inside (in worker threads started inside too) count their tokens
        for ``tenant`` (:func:`strata.counting.on_behalf_of`)."""
        self.count_usage()
        with on_behalf_of(tenant):
            yield

    def count_usage(self) -> None:
        """Make sure the task writing this process's usage counts runs (on the event loop;
        called where a count is made: an embedding, a call of the LLM on a tenant's behalf)."""
        if self._usage_writer is None or self._usage_writer.done():
            self._usage_writer = asyncio.get_running_loop().create_task(self._write_usage())

    def __ray_shutdown__(self) -> None:
        """Ray calls this when the actor exits gracefully (not when it is killed): the counts
        made since the last write are written, if the store was ever opened."""
        if self._store is not None and self._collections is not None:
            with contextlib.suppress(StrataError):
                process_counter().flush(self._store, self._collections.state)

    async def _write_usage(self) -> None:
        while True:
            await asyncio.sleep(self.settings.serve.usage_flush_s)
            try:
                store, collections, _ = await self._backend()
                await asyncio.to_thread(process_counter().flush, store, collections.state)
            except StrataError as exc:  # kept for the next flush
                _log.warning("usage counts not written, kept for the next flush: %s", exc.message)

    # -- versioned reads and mutations ------------------------------------------------

    async def version(self, tenant: str, scope: str) -> int:
        """The current version of (tenant, scope)."""
        return await self._version(tenant, await self._tenant(tenant, scope=scope), scope)

    async def versions(self, tenant: str, scopes: Sequence[str]) -> dict[str, int]:
        """The current version of (tenant, scope) for each of ``scopes``: those not in memory
        read in one store read, not one each (a page of 50 documents was 50 reads one after
        the other, and on a Milvus server each strong read waits for its next time tick,
        ~200 ms by default)."""
        return await self._versions_of(tenant, await self._tenant(tenant), scopes)

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
            ForgetInProgress: the tenant, or the session written, is being forgotten
                (:meth:`~strata_actors.forgetting.TenantForgets.refuse_if_forgetting`).
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
            await self.refuse_if_forgetting(tenant, scope)
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

    # -- remote methods common to all layers -------------------------------------

    async def call(self, epoch: int | None, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``method(*args, **kwargs)`` for a caller that placed the call at placement ``epoch``:
        how the router's handles call a shard, so the fence (:data:`CALLER_EPOCH`) knows it.

        Raises:
            TenantMoved: this shard does not serve the tenant at that epoch.
        """
        if method.startswith("_") or method in ("call", "reads") or not callable(getattr(self, method, None)):
            raise StrataError(f"{method!r} is not a call of the {self.layer_name} layer")
        CALLER_EPOCH.set(epoch)  # this call's task only
        CALL.set((method, args, kwargs))
        result = getattr(self, method)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def reads(
        self, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]], epoch: int | None = None
    ) -> list[tuple[str, Any]]:
        """Several reads in one actor call (``(method, args, kwargs)``, the tenant first in
        args), run concurrently, each answered as ``("ok", result)``, ``("error", exc)`` or
        ``("cold", None)``: an actor call costs about 1.5 ms of CPU between the two processes
        whatever it carries, so concurrent requests' reads of one shard share one.

        A read of a tenant not in memory is not run here: its load from the store would hold
        up the warm reads sent with it. Its load is started, and the caller sends that read
        on its own (which waits for the load). ``epoch``: as for :meth:`call`."""
        CALLER_EPOCH.set(epoch)

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

    async def ping(self) -> dict[str, Any]:
        """Health of this shard: loaded tenants, and whether its store answers."""
        store, _, _ = await self._backend()
        await asyncio.to_thread(store.ping)
        return {
            "layer": self.layer_name, "shard": self.shard, "tenants_loaded": len(self._tenants),
            "expired_items": self.expired_items, "epoch": self._placement.epoch, "shards": self._placement.shards,
        }

    async def llm_usage(self) -> LLMUsage:
        """This shard's LLM calls and tokens since it started (all tenants), for cost reports: a copy."""
        usage = getattr(self.llm, "usage", None)
        return dataclasses.replace(usage) if isinstance(usage, LLMUsage) else LLMUsage()

