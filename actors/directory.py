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

Growing starts the new shards and waits for them to run *before* step 1, so that a shard waiting
for a node (the Ray autoscaler adding one) holds up no tenant: none moves until every new owner
runs.

With ``actors.autoscale.enabled`` the directory also runs the autoscaling policy: every
``interval_s`` it reads each shard's load (:mod:`strata_actors.load`), and
:func:`strata_actors.autoscale.decide` says when a layer grows or shrinks by one shard, which it
does by the same :meth:`PlacementDirectory.scale` as ``strata scale`` (docs/scaling.md,
"Autoscaling policy").

:class:`PlacementDirectory` is the plain class; :class:`Directory` is its typed handle, the only
code that calls ``.remote()`` on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError

from strata.config import StrataSettings
from strata.config.stack import MAX_SHARDS
from strata.errors import InvalidInput, StoreUnavailable
from strata.layers import LAYERS, Layer
from strata.store.layout import open_store
from strata.store.placement import Placement, PlacementStore
from strata_actors.autoscale import Decision, LayerSample, decide
from strata_actors.errors import unwrap
from strata_actors.load import LoadReading

__all__ = [
    "DIRECTORY_NAME", "AutoscaleStatus", "Directory", "PlacementDirectory", "ScaleChange", "ShardStatus", "check_scale",
]

_log = logging.getLogger(__name__)

DIRECTORY_NAME = "strata-placement"
#: How long the fence waits for a shard that does not answer (restarting) before giving up the
#: change for now: it stays recorded, and the next change, or a retry, finishes it.
_FENCE_TIMEOUT_S = 120.0
#: The policy's read of one shard's load: one that does not answer within this (64 calls in flight
#: ahead of it, or restarting) leaves its layer unsampled this round.
_LOAD_TIMEOUT_S = 10.0
#: The last changes :meth:`PlacementDirectory.autoscale_status` lists.
_CHANGES_KEPT = 100


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


@dataclass(frozen=True)
class ScaleChange:
    """A change of a layer's count this directory made (in this actor's life; the last 100)."""

    layer: str
    shards_from: int
    shards_to: int
    #: Wall clock (``time.time()``) when it began and when it was published.
    began_at: float
    done_at: float
    #: "policy: <why>", or "command" (``strata scale``, the admin route).
    reason: str


@dataclass(frozen=True)
class AutoscaleStatus:
    """The autoscaling policy as it stands: each layer's last sample and decision, the changes made."""

    enabled: bool
    samples: dict[str, LayerSample] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)
    changes: list[ScaleChange] = field(default_factory=list)


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
        self._changes: list[ScaleChange] = []
        # The policy's state: each layer's samples since its last change (and that change's
        # epoch), its last decision, each shard's last load reading, the shards' handles.
        self._samples: dict[str, list[LayerSample]] = {}
        self._sampled_epoch: dict[str, int] = {}
        self._decisions: dict[str, Decision] = {}
        self._readings: dict[tuple[str, int], LoadReading] = {}
        self._load_handles: dict[tuple[str, int], Any] = {}
        self._policy: asyncio.Task[None] | None = None
        if self._settings.actors.autoscale.enabled:
            # Ray runs an async actor's constructor on its event loop: the policy starts with the
            # actor, and again with each restart of it.
            self._policy = asyncio.get_running_loop().create_task(self._autoscale_forever())

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

    async def scale(self, layer: str, shards: int, reason: str = "command") -> Placement:
        """Change the layer's count to ``shards`` (a change found half done is finished first);
        returns the row as published.

        Raises:
            StoreUnavailable: growing, a new shard did not run within
                ``actors.autoscale.start_timeout_s`` (nothing changed; it was stopped).
        """
        check_scale(layer, shards)
        async with self._changing:
            current = await self.placement(layer)
            if current.next_shards is not None:
                current = await self._finish(current)
            if shards == current.shards:
                return current
            began = time.time()
            if shards > current.shards:
                await self._start(check_scale(layer, shards), range(current.shards, shards))
            intent = current.begin(shards)
            await asyncio.to_thread((await self._table()).put, intent)
            self._placements[layer] = intent
            published = await self._finish(intent)
            self._changes.append(ScaleChange(layer, current.shards, published.shards, began, time.time(), reason))
            del self._changes[:-_CHANGES_KEPT]
            return published

    async def _start(self, layer: Layer, shards: range) -> None:
        """Start ``shards`` of ``layer`` and wait until each answers (they own nothing yet: the
        placement they read names fewer shards). One that does not run in time is stopped."""
        from strata_actors.router import LayerRouter

        router = LayerRouter(self._settings)
        handles = [router.shard_handle(layer, n) for n in shards]
        timeout_s = self._settings.actors.autoscale.start_timeout_s
        try:
            await asyncio.wait_for(asyncio.gather(*(h.ping.remote() for h in handles)), timeout_s)
        except TimeoutError:
            for handle in handles:
                ray.kill(handle, no_restart=True)
            raise StoreUnavailable(
                f"{layer}: shards {shards.start}-{shards.stop - 1} did not start within {timeout_s:g} s (no node had"
                f" room for {self._settings.actors.shard_num_cpus:g} CPU each?); the layer keeps {shards.start}",
                retry_after_s=60,
            ) from None

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

    # -- the autoscaling policy ---------------------------------------------------------

    async def autoscale_status(self) -> AutoscaleStatus:
        return AutoscaleStatus(self._settings.actors.autoscale.enabled,
                               {layer: found[-1] for layer, found in self._samples.items() if found},
                               dict(self._decisions), list(self._changes))

    async def _autoscale_forever(self) -> None:
        policy = self._settings.actors.autoscale
        while True:
            await asyncio.sleep(policy.interval_s)
            for layer in LAYERS:  # one layer after the other: one change at a time
                try:
                    await self._autoscale(layer)
                except Exception as exc:  # a failed change or read is tried again next round
                    _log.warning("autoscaling %s: %s: %s", layer, type(exc).__name__, exc)

    async def _autoscale(self, layer: Layer) -> None:
        policy = self._settings.actors.autoscale
        current = await self.placement(layer)
        if current.next_shards is not None or self._changing.locked():
            return  # a change runs: read the load at the count it leaves
        if self._sampled_epoch.get(layer) != current.epoch:  # changed since: a new history
            self._samples[layer] = []
            self._sampled_epoch[layer] = current.epoch
        sample = await self._sample(layer, current.shards)
        if sample is None:
            return
        samples = self._samples[layer]
        samples.append(sample)
        keep_s = max(policy.grow_window_s, policy.shrink_window_s) + 2 * policy.interval_s
        samples[:] = [s for s in samples if s.at_s >= sample.at_s - keep_s] or [sample]
        floor = int(getattr(self._settings.actors, f"{layer}_shards"))
        decision = self._decisions[layer] = decide(samples, shards=current.shards, floor=floor, policy=policy)
        if decision.changes(current.shards):
            _log.info("autoscaling %s: %d -> %d shards: %s", layer, current.shards, decision.shards, decision.reason)
            await self.scale(layer, decision.shards, reason=f"policy: {decision.reason}")

    async def _sample(self, layer: Layer, shards: int) -> LayerSample | None:
        """The mean over the layer's shards of each one's load since its last reading; None
        until every shard has two readings of one process."""
        readings = await asyncio.gather(*(self._read_load(layer, n) for n in range(shards)))
        rates = []
        for n, reading in enumerate(readings):
            if reading is None:
                return None
            rates.append(reading.rates_since(self._readings.get((layer, n))))
            self._readings[(layer, n)] = reading
        if any(r is None for r in rates):
            return None
        busy = sum(r.busy for r in rates if r is not None) / shards
        queue = sum(r.queue for r in rates if r is not None) / shards
        return LayerSample(time.monotonic(), shards, busy, queue)

    async def _read_load(self, layer: Layer, shard: int) -> LoadReading | None:
        """One shard's load reading; None if it is not running (a layer never called: its
        shards are not started for this) or does not answer in time."""
        from strata_actors.router import actor_name

        key = (layer, shard)
        try:
            handle = self._load_handles.get(key)
            if handle is None:
                handle = self._load_handles[key] = await asyncio.to_thread(
                    ray.get_actor, actor_name(layer, shard), namespace=self._settings.ray.namespace)
            reading: LoadReading = await asyncio.wait_for(handle.load.remote(), _LOAD_TIMEOUT_S)
            return reading
        except Exception:  # no such actor, dead, restarting or slow: looked up again next time
            self._load_handles.pop(key, None)
            return None

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
                # No CPU: it is idle but for scale changes and the policy's reads. A token of
                # memory, as the layer shards at shard_num_cpus 0 (router.py says why).
                num_cpus=0,
                memory=2**20,
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

    async def autoscale_status(self) -> AutoscaleStatus:
        """The autoscaling policy's last samples and decisions, and the changes this directory made."""
        found: AutoscaleStatus = await self._call("autoscale_status")
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
