"""The placement directory: each layer's shard count and epoch, and the one place they change.

The count lives in the store (:mod:`strata.store.placement`, one row per layer); this module's
actor, ``strata-placement`` (named, detached, one per stack), is its only writer, so two scale
commands never interleave, and answers the routers' reads from memory. It holds nothing the row
does not, and finishes a change it finds half done (docs/scaling.md, "Handoff with fencing").

A change of layer ``L`` from n to n' shards, one at a time:

1. the row records the intent (``next_shards``): a shard that starts from now on already
   serves by the new count;
2. growing: the new shards start;
3. every shard adopts the new view and drops the tenants it loses, under their locks (the fence);
4. the row is published: routers place by n' from their next refresh;
5. shrinking: the shards past n', holding nothing now, are killed.

:class:`PlacementDirectory` is the plain class; :class:`Directory` is its typed handle, the only
code that calls ``.remote()`` on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError

from strata.config import StrataSettings
from strata.config.stack import MAX_SHARDS
from strata.errors import InvalidInput
from strata.layers import LAYERS, Layer
from strata.store.layout import open_store
from strata.store.placement import Placement, PlacementStore
from strata_actors.errors import unwrap

__all__ = ["DIRECTORY_NAME", "Directory", "PlacementDirectory", "ShardStatus", "check_scale"]

_log = logging.getLogger(__name__)

DIRECTORY_NAME = "strata-placement"
#: How long the fence waits for a shard that does not answer (restarting) before giving up the
#: change for now: it stays recorded, and the next change, or a retry, finishes it.
_FENCE_TIMEOUT_S = 120.0


def check_scale(layer: str, shards: int) -> Layer:
    """``layer`` as a layer name, if ``shards`` is a count it may have.

    Raises:
        InvalidInput: an unknown layer (``field="layer"``), or a count out of range (``field="shards"``).
    """
    if layer not in LAYERS:
        raise InvalidInput(f"unknown layer {layer!r}: one of {', '.join(LAYERS)}", field="layer")
    if not 1 <= shards <= MAX_SHARDS:
        raise InvalidInput(f"shards must be between 1 and {MAX_SHARDS}, not {shards}", field="shards")
    return layer


@dataclass(frozen=True)
class ShardStatus:
    """One shard as ``strata status`` lists it."""

    layer: str
    shard: int
    #: The Ray node it runs on (None: it did not answer).
    node_id: str | None
    #: Tenants it holds in memory now.
    tenants_loaded: int | None
    #: The placement epoch it serves by.
    epoch: int | None


class PlacementDirectory:
    """The directory actor (async: reads answer while a change runs).

    Args:
        settings: the stack's settings (the store, and each layer's first count).
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        self._settings_dict = settings
        self._settings = StrataSettings.from_dict(settings)
        self._rows: PlacementStore | None = None
        self._placements: dict[str, Placement] = {}
        self._changing = asyncio.Lock()
        self._reading = asyncio.Lock()
        #: Changes found begun (recorded, not published) when the rows were first read.
        self._resuming: set[asyncio.Task[None]] = set()

    async def _table(self) -> PlacementStore:
        if self._rows is None:
            store, collections = await asyncio.to_thread(open_store, self._settings)
            self._rows = PlacementStore(store, collections.state)
        return self._rows

    async def placement(self, layer: str) -> Placement:
        """The layer's row; made from the settings' count the first time it is asked for."""
        found = self._placements.get(layer)
        if found is not None:
            return found
        # One reader at a time: the first readers arrive together (every router's first call),
        # and two opens of a fresh store at once race to create its collections (milvus-lite
        # then answers "File exists" to one of them).
        async with self._reading:
            found = self._placements.get(layer)
            if found is None:
                rows = await self._table()
                found = await asyncio.to_thread(rows.get, layer)
                if found is None:
                    found = Placement(layer, int(getattr(self._settings.actors, f"{layer}_shards")))
                    await asyncio.to_thread(rows.put, found)
                self._placements[layer] = found
                if found.next_shards is not None:  # a change this actor's last life began: finish it
                    task = asyncio.get_running_loop().create_task(self._resume(layer))
                    self._resuming.add(task)
                    task.add_done_callback(self._resuming.discard)
            return found

    async def _resume(self, layer: str) -> None:
        try:
            async with self._changing:
                current = self._placements[layer]
                if current.next_shards is not None:
                    await self._finish(current)
        except Exception as exc:  # the next scale of the layer finishes it
            _log.warning("%s: the change to %s shards begun earlier is not finished: %s",
                         layer, self._placements[layer].next_shards, exc)

    async def placements(self) -> dict[str, Placement]:
        return {layer: await self.placement(layer) for layer in LAYERS}

    async def scale(self, layer: str, shards: int) -> Placement:
        """Change the layer's count to ``shards`` (a change found half done is finished first);
        returns the row as published."""
        check_scale(layer, shards)
        async with self._changing:
            current = await self.placement(layer)
            if current.next_shards is not None:
                current = await self._finish(current)
            if shards == current.shards:
                return current
            intent = current.begin(shards)
            await asyncio.to_thread((await self._table()).put, intent)
            self._placements[layer] = intent
            return await self._finish(intent)

    async def _finish(self, intent: Placement) -> Placement:
        # Here, not at the top: the router imports this module for its reads of the directory.
        from strata_actors.router import LayerRouter

        if intent.next_shards is None:
            return intent
        layer = check_scale(intent.layer, intent.next_shards)

        def handle(shard: int) -> Any:  # a fresh lookup each time: made if missing, or gone meanwhile
            return LayerRouter(self._settings).shard_handle(layer, shard)

        shards = range(max(intent.shards, intent.next_shards))
        moved = await asyncio.wait_for(
            asyncio.gather(*(self._adopt(handle, n, intent) for n in shards)), _FENCE_TIMEOUT_S
        )
        published = intent.publish()
        await asyncio.to_thread((await self._table()).put, published)
        self._placements[layer] = published
        for n in shards[published.shards:]:
            ray.kill(handle(n), no_restart=True)
        _log.info("%s: %d -> %d shards at epoch %d; %d tenants dropped by their old shards",
                  layer, intent.shards, published.shards, published.epoch, sum(moved))
        return published

    @staticmethod
    async def _adopt(handle: Callable[[int], Any], shard: int, intent: Placement) -> int:
        """The fence on one shard, until it answers: a restarting one reads the intent itself, and
        one killed by an earlier shrink whose name was not yet free is looked up (made) again."""
        while True:
            try:
                left: int = await handle(shard).adopt_placement.remote(intent.fenced)
                return left
            except RayActorError:
                await asyncio.sleep(0.5)

    async def status(self) -> list[ShardStatus]:
        """Every shard of every layer: its node, resident tenants and epoch."""
        from strata_actors.router import LayerRouter

        router = LayerRouter(self._settings)
        handles = [(layer, n, router.shard_handle(layer, n))
                   for layer in LAYERS for n in range((await self.placement(layer)).shards)]

        async def one(layer: str, shard: int, handle: Any) -> ShardStatus:
            try:
                ping, node = await asyncio.wait_for(asyncio.gather(
                    handle.ping.remote(), handle.__ray_call__.remote(_node_id)), 30)
                return ShardStatus(layer, shard, str(node), int(ping["tenants_loaded"]), int(ping["epoch"]))
            except Exception:
                return ShardStatus(layer, shard, None, None, None)

        return list(await asyncio.gather(*(one(*h) for h in handles)))


def _node_id(_actor: Any) -> str:
    return str(ray.get_runtime_context().get_node_id())


class Directory:
    """The typed handle on the directory actor, made if it does not exist yet.

    Example::

        placement = await Directory(settings).scale("episodic", 4)

    Raises (every method):
        strata.errors.InvalidInput: from :meth:`scale`, a layer or count it cannot have.
        strata.errors.StoreUnavailable: the store or the actor does not answer.
    """

    def __init__(self, settings: StrataSettings) -> None:
        self._settings = settings
        self._actor: Any = None

    @property
    def actor(self) -> Any:
        if self._actor is None:
            remote_cls: Any = ray.remote(PlacementDirectory)
            self._actor = remote_cls.options(
                name=DIRECTORY_NAME,
                namespace=self._settings.ray.namespace,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=self._settings.actors.max_restarts,
                max_task_retries=0,
                max_concurrency=64,
                num_cpus=0,
                memory=2**20,  # a token, as the layer shards ask (router.py says why)
            ).remote(self._settings.to_dict())
        return self._actor

    async def _call(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self.actor, method).remote(*args)
        except Exception as exc:
            raise unwrap(exc) from None

    async def placement(self, layer: Layer) -> Placement:
        found: Placement = await self._call("placement", layer)
        return found

    async def placements(self) -> dict[str, Placement]:
        found: dict[str, Placement] = await self._call("placements")
        return found

    async def scale(self, layer: str, shards: int) -> Placement:
        """Change ``layer``'s shard count to ``shards``, moving the tenants whose owner changes;
        returns the layer's row once published."""
        check_scale(layer, shards)
        found: Placement = await self._call("scale", layer, shards)
        return found

    async def status(self) -> list[ShardStatus]:
        found: list[ShardStatus] = await self._call("status")
        return found
