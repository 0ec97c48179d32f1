"""Which actor owns which tenant, and the one place ``ray.remote`` is applied.

Tenants are sharded: layer ``L`` has n named, detached actors ``strata-L-0 … strata-L-(n-1)``,
and tenant ``t`` lives on shard ``owner_shard(t, n)`` (:mod:`strata_actors.placement`). n is
the placement directory's (:mod:`strata_actors.directory`; ``actors.<L>_shards`` at first
start): the router caches it with its epoch per layer, sends the epoch with every call, and
reads the directory again when a shard refuses a call for a tenant that moved. A fixed, small set of actors
hosts any number of tenants (DESIGN.md measured ~0.8 s and ~50–90 MiB per actor process, so one actor
per tenant does not reach 1,000 tenants on a node); inside a shard, a
tenant's state is loaded on first use and evicted when idle (see
:mod:`strata_actors.residency`). Any process that knows the settings finds the same
actor for a tenant, and creates it if it does not exist yet.

Callers get typed handles (``router.episodic(tenant)``, see :mod:`strata_actors.handles`);
the raw actor handles (:meth:`LayerRouter.handle`, :meth:`LayerRouter.all_handles`) are for
operating the actors (killing, placing) and for tests.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import ray

from strata.config import StrataSettings
from strata.errors import StoreUnavailable, TenantMoved
from strata.ids import validate_id
from strata.layers import LAYERS, Layer
from strata.store.placement import ShardView
from strata_actors.directory import Directory
from strata_actors.episodic import EpisodicShard
from strata_actors.handles import (
    EpisodicHandle,
    LayerHandle,
    ProceduralHandle,
    ReadBatcher,
    SemanticHandle,
    SessionLayerHandle,
    WorkingHandle,
)
from strata_actors.placement import owner_shard
from strata_actors.procedural import ProceduralShard
from strata_actors.semantic import SemanticShard
from strata_actors.working import WorkingShard

__all__ = ["LAYER_CLASSES", "LayerRouter", "actor_name", "shard_resources", "shutdown_ray"]

#: How long a call for a tenant that is moving waits for the move to be published, polling the
#: directory this often, before it answers 503 (docs/scaling.md: callers wait briefly).
_MOVE_WAIT_S = 30.0
_MOVE_POLL_S = 0.05

#: Each layer's shard actor class.
LAYER_CLASSES: dict[Layer, type] = {
    "working": WorkingShard,
    "episodic": EpisodicShard,
    "semantic": SemanticShard,
    "procedural": ProceduralShard,
}
#: Each layer's typed handle.
_HANDLES: dict[Layer, type[LayerHandle]] = {
    h.layer: h for h in (WorkingHandle, EpisodicHandle, SemanticHandle, ProceduralHandle)
}


def shutdown_ray() -> None:
    """``ray.shutdown()``, with no garbage collection in another thread while it runs.

    An actor handle freed by the collector checks that Ray is connected, then tells the core
    worker; a shutdown between the two makes Ray end the whole process ("The core worker has
    already been shutdown ... The process will exit"; seen in the test suite, where a thread
    writing audit rows collected handles left in reference cycles by earlier tests). So the
    collector runs first, here, and is off until the shutdown is done."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        ray.shutdown()
    finally:
        if enabled:
            gc.enable()


def shard_resources(settings: StrataSettings) -> dict[str, float]:
    """What a layer shard asks Ray for (:meth:`LayerRouter.shard_handle` says why)."""
    cpus = settings.actors.shard_num_cpus
    return {"num_cpus": cpus} if cpus > 0 else {"num_cpus": 0, "memory": 2**20}


def actor_name(layer: Layer, shard: int) -> str:
    return f"strata-{layer}-{shard}"


class LayerRouter:
    """Maps (layer, tenant) to the owning actor's handle, creating actors on demand."""

    def __init__(self, settings: StrataSettings) -> None:
        self._settings = settings
        self._settings_dict = settings.to_dict()
        self._handles: dict[tuple[Layer, int], Any] = {}
        #: One per shard: concurrent reads of a shard share actor calls (handles.ReadBatcher).
        self._batchers: dict[tuple[Layer, int], ReadBatcher] = {}
        self.directory = Directory(settings)
        #: Each layer's placement as published by the directory, once read.
        self._views: dict[Layer, ShardView] = {}

    # -- typed handles: how the orchestration calls the layers ------------------------------

    def working(self, tenant: str) -> WorkingHandle:
        return WorkingHandle(route=self._route("working", tenant))

    def episodic(self, tenant: str) -> EpisodicHandle:
        return EpisodicHandle(route=self._route("episodic", tenant))

    def semantic(self, tenant: str) -> SemanticHandle:
        return SemanticHandle(route=self._route("semantic", tenant))

    def procedural(self, tenant: str) -> ProceduralHandle:
        return ProceduralHandle(route=self._route("procedural", tenant))

    def layer(self, layer: Layer, tenant: str) -> LayerHandle:
        """The shard of ``layer`` that owns ``tenant``, for the calls every layer answers."""
        return _HANDLES[layer](route=self._route(layer, tenant))

    def _route(self, layer: Layer, tenant: str) -> _TenantRoute:
        validate_id(tenant, field="tenant")
        return _TenantRoute(self, layer, tenant)

    # -- the placement: each layer's shard count, as the directory publishes it ----------

    async def view(self, layer: Layer) -> ShardView:
        """The layer's placement, read from the directory the first time."""
        found = self._views.get(layer)
        return found if found is not None else await self._refresh(layer)

    async def refresh(self) -> None:
        """Read every layer's placement again (for the calls on every shard of a layer)."""
        await asyncio.gather(*(self._refresh(layer) for layer in LAYERS))

    async def _refresh(self, layer: Layer) -> ShardView:
        view = (await self.directory.placement(layer)).published
        known = self._views.get(layer)
        if known is None or view.epoch > known.epoch:
            self._views[layer] = known = view
        return known

    async def moved(self, layer: Layer, error: StoreUnavailable, epoch: int) -> bool:
        """After the owner of a tenant at ``epoch`` refused a call or was gone: whether the
        layer's placement is newer now. A shard that refused it at a newer epoch than the
        directory has published is in the middle of a change: wait for it (up to 30 s)."""
        need = max(epoch + 1, error.epoch if isinstance(error, TenantMoved) else 0)
        waits = isinstance(error, TenantMoved) and error.epoch > epoch
        deadline = time.monotonic() + (_MOVE_WAIT_S if waits else 0.0)
        while True:
            if (await self._refresh(layer)).epoch >= need:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_MOVE_POLL_S)

    def knows(self, layer: Layer, shard: int) -> bool:
        """Whether this router holds a handle on ``shard`` of ``layer`` already."""
        return (layer, shard) in self._handles

    async def replaced(self, layer: Layer, shard: int, actor: Any) -> bool:
        """After ``actor``, this router's handle on ``shard``, was found dead: whether the shard's
        name now holds another actor (a shrink killed the shard, a later grow started it again),
        which then replaces it here. A call to a dead actor never ran, and the one it killed held
        no tenant (the fence had dropped them all), so the call may go to the new one."""
        try:
            current = await asyncio.to_thread(
                ray.get_actor, actor_name(layer, shard), namespace=self._settings.ray.namespace)
        except ValueError:  # no such actor: the next lookup makes it
            if self._handles.get((layer, shard)) is actor:
                del self._handles[(layer, shard)]
            return False
        if current._actor_id == actor._actor_id:
            return False
        self._handles[(layer, shard)] = current
        return True

    def _owner(self, layer: Layer, tenant: str) -> tuple[Any, ReadBatcher]:
        """The actor of the shard that owns ``tenant`` under the last view read (the settings'
        count at epoch 0, the directory's first row, before any), and its read batcher."""
        view = self._views.get(layer) or ShardView(0, self.shards(layer))
        return self._shard_for(layer, owner_shard(tenant, view.shards), view.epoch)

    def _shard_for(self, layer: Layer, shard: int, epoch: int) -> tuple[Any, ReadBatcher]:
        """The actor of ``shard``, and its read batcher for calls placed at ``epoch``."""
        key = (layer, shard)
        actor = self.shard_handle(*key)
        batcher = self._batchers.get(key)
        if batcher is None or batcher.actor is not actor or batcher.epoch != epoch:
            batcher = self._batchers[key] = ReadBatcher(actor, epoch=epoch)
        return actor, batcher

    def session_layer(self, layer: Layer, tenant: str) -> SessionLayerHandle:
        """:meth:`layer` for a layer that keeps memory per session (working, episodic)."""
        handle = self.layer(layer, tenant)
        if not isinstance(handle, SessionLayerHandle):
            raise TypeError(f"the {layer} layer keeps no memory per session")
        return handle

    def layer_shards(self, layer: Layer | None = None) -> list[LayerHandle]:
        """Every shard of ``layer`` (of every layer if None), for the calls every layer answers."""
        names = LAYERS if layer is None else (layer,)
        return [_HANDLES[name](actor) for name in names for actor in self.all_handles(name)]

    # -- raw actor handles ----------------------------------------------------------------

    def shards(self, layer: Layer) -> int:
        """The layer's shard count as last read from the directory (:meth:`refresh`), or the
        settings' first count before any read."""
        known = self._views.get(layer)
        return known.shards if known is not None else int(getattr(self._settings.actors, f"{layer}_shards"))

    def shard_of(self, layer: Layer, tenant: str) -> int:
        validate_id(tenant, field="tenant")
        return owner_shard(tenant, self.shards(layer))

    def handle(self, layer: Layer, tenant: str) -> Any:
        return self.shard_handle(layer, self.shard_of(layer, tenant))

    def shard_handle(self, layer: Layer, shard: int) -> Any:
        key = (layer, shard)
        handle = self._handles.get(key)
        if handle is None:
            remote_cls: Any = ray.remote(LAYER_CLASSES[layer])
            handle = remote_cls.options(
                name=actor_name(layer, shard),
                namespace=self._settings.ray.namespace,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=self._settings.actors.max_restarts,
                # Reads are safe to retry; writes are not retried by Ray (a retried
                # write could apply twice), the caller sees the error instead.
                max_task_retries=0,
                max_concurrency=64,
                # A CPU share (actors.shard_num_cpus): a shard that fits no node is demand the
                # Ray autoscaler meets with a node, and a node counts as idle once its shards
                # left. At 0, a token of memory (1 MiB) instead: Ray's GCS sends an actor that
                # asks for nothing to a random node whatever the strategy (8 shards on 3 nodes:
                # as uneven as 6/1/1); with a request, SPREAD deals them out, at creation and
                # when a dead node's shards restart elsewhere.
                **shard_resources(self._settings),
                scheduling_strategy="SPREAD",
            ).remote(self._settings_dict, shard)
            self._handles[key] = handle
        return handle

    def all_handles(self, layer: Layer) -> list[Any]:
        return [self.shard_handle(layer, n) for n in range(self.shards(layer))]

    def every_handle(self) -> list[Any]:
        """Every shard of every layer."""
        return [handle for layer in LAYER_CLASSES for handle in self.all_handles(layer)]


class _TenantRoute:
    """Where the calls of a handle bound to ``tenant`` go: its owner under the router's view."""

    def __init__(self, router: LayerRouter, layer: Layer, tenant: str) -> None:
        self._router, self._layer, self._tenant = router, layer, tenant
        #: The shard and actor of the last :meth:`target`.
        self._sent: tuple[int, Any] = (-1, None)

    async def target(self) -> tuple[Any, ReadBatcher, int]:
        view = await self._router.view(self._layer)
        shard = owner_shard(self._tenant, view.shards)
        if not self._router.knows(self._layer, shard):
            # Looking a shard up makes it if it is missing: check first that the view is current,
            # or a router that slept through a shrink would start a shard the shrink retired.
            view = await self._router._refresh(self._layer)
            shard = owner_shard(self._tenant, view.shards)
        actor, batcher = self._router._shard_for(self._layer, shard, view.epoch)
        self._sent = (shard, actor)
        return actor, batcher, view.epoch

    async def moved(self, error: StoreUnavailable, epoch: int) -> bool:
        if await self._router.moved(self._layer, error, epoch):
            return True
        return not isinstance(error, TenantMoved) and await self._router.replaced(self._layer, *self._sent)
