"""A layer's shards change at run time (issue 42): episodic grows from 2 to 4 shards, shrinks
back to 2 and grows to 3 (a shard the shrink killed starts again) while a writer keeps writing
through a router of its own (as another API replica would). No acknowledged write is lost, each
tenant reads its own last write at rank 1 after each step, and every shard serves the last epoch.

Real Ray (the session's ``ray_local``) and milvus-lite; the layer calls go through the
router's typed handles (the path every request takes), with vectors made here so that no
embedding model runs."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import numpy as np
import pytest
import ray

from strata.errors import StrataError
from strata.layers import Layer
from strata.store.layout import open_store
from strata.store.placement import PlacementStore, ShardView
from strata_actors.placement import owner_shard
from strata_actors.router import LayerRouter, actor_name
from tests.conftest import MilvusServer, settings_for

pytestmark = pytest.mark.usefixtures("ray_local")

TENANTS = [f"mover-{n:02d}" for n in range(30)]
SESSION = "s"
DIM = 384


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    return settings_for(milvus, actors={"working_shards": 1, "episodic_shards": 2, "semantic_shards": 1,
                                        "procedural_shards": 1})


def _vector(text: str) -> np.ndarray:
    """A unit vector of its own for each text, the same in every process."""
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


async def _write(router: LayerRouter, tenant: str, text: str) -> str:
    """Record one turn; its id once acknowledged."""
    recorded = await router.episodic(tenant).record_turns(
        tenant, SESSION, [{"user": text}], vectors=np.stack([_vector(text)]))
    return recorded["turns"][0]["turn_id"]


async def _probe(router: LayerRouter, tenant: str, step: str) -> bool:
    """Read-your-writes: a turn just written is the first hit of a search for it."""
    text = f"probe {step} {tenant} zq{step}x{tenant.replace('-', '')}"
    await _write(router, tenant, text)
    found = await router.episodic(tenant).search(tenant, query=text, vector=_vector(text), top_k=3)
    return bool(found["hits"]) and found["hits"][0]["text"].endswith(text)


async def test_episodic_grows_and_shrinks_under_a_writer_and_loses_nothing(settings: Any) -> None:
    admin, writer_router, reader = LayerRouter(settings), LayerRouter(settings), LayerRouter(settings)
    acknowledged: dict[str, list[str]] = {t: [] for t in TENANTS}
    for t in TENANTS:
        acknowledged[t].append(await _write(writer_router, t, f"first words of {t}"))
    failures: list[str] = []
    waits: list[float] = []
    stop = asyncio.Event()

    async def keep_writing() -> int:
        n = 0
        while not stop.is_set():
            tenant = TENANTS[n % len(TENANTS)]
            began = time.monotonic()
            try:
                acknowledged[tenant].append(await _write(writer_router, tenant, f"note {n} of {tenant}"))
                waits.append(time.monotonic() - began)
            except StrataError as exc:  # not acknowledged: allowed, but counted
                failures.append(f"{tenant}: {type(exc).__name__}: {exc.message}")
            n += 1
        return n

    writing = asyncio.create_task(keep_writing())
    await asyncio.sleep(0.5)
    steps: list[tuple[int, float, list[bool]]] = []
    for shards in (4, 2, 3):
        started = time.monotonic()
        placement = await admin.directory.scale("episodic", shards)
        took = time.monotonic() - started
        assert placement.shards == shards
        await asyncio.sleep(0.5)  # the writer goes on under the new count
        steps.append((shards, took, [await _probe(reader, t, f"{shards}") for t in TENANTS]))
        # Each write acknowledged so far is served to another router now, whichever shard took it.
        for t in TENANTS:
            before = list(acknowledged[t])
            served = {turn.turn_id for turn in (await reader.episodic(t).list_turns(t, SESSION, limit=1000)).turns}
            assert not [i for i in before if i not in served], f"{t} at {shards} shards: acknowledged turns not served"
    stop.set()
    written = await writing
    assert (await writer_router.view("episodic")).epoch == 3  # the writer's router was sent on each time

    for shards, _, probes in steps:
        assert all(probes), f"after scaling to {shards}: read-your-writes failed for " \
            f"{[t for t, ok in zip(TENANTS, probes, strict=True) if not ok]}"
    assert not failures, failures[:5]
    assert written > 2 * len(TENANTS)

    # Every acknowledged write is in the store, and in its owner's memory now.
    store, collections = open_store(settings)
    for t in TENANTS:
        stored = {r.pk for r in store.scan(collections.episodic, tenant=t, with_vectors=False)}
        listed = await reader.episodic(t).list_turns(t, SESSION, limit=1000)
        ids = {turn.turn_id for turn in listed.turns}
        missing = [turn_id for turn_id in acknowledged[t] if turn_id not in ids]
        assert not missing, f"{t}: acknowledged turns {missing} not served after the moves"
        assert len(stored) >= len(acknowledged[t]) + 2  # and the two probes

    # The placement as published, and as every shard serves it; the shards shrunk away are gone.
    assert (await admin.view("episodic")).epoch == 3
    pings = [await admin.shard_handle("episodic", n).ping.remote() for n in range(3)]
    assert [(p["epoch"], p["shards"]) for p in pings] == [(3, 3)] * 3
    for n in (3,):
        with pytest.raises(ValueError):
            for _ in range(50):  # a killed actor's name is freed shortly after
                ray.get_actor(actor_name("episodic", n), namespace=settings.ray.namespace)
                await asyncio.sleep(0.1)
    moved = sum(owner_shard(t, 2) != owner_shard(t, 4) for t in TENANTS)
    again = sum(owner_shard(t, 2) != owner_shard(t, 3) for t in TENANTS)
    print(f"\n{written} writes while scaling; 2->4 took {steps[0][1]:.2f} s, 4->2 {steps[1][1]:.2f} s, "
          f"2->3 {steps[2][1]:.2f} s; {moved}/{len(TENANTS)} tenants moved 2->4 and back, {again} 2->3; "
          f"writes p50 {1000 * float(np.median(waits)):.0f} ms, "
          f"max {1000 * max(waits):.0f} ms")


async def test_a_change_begun_when_the_directory_died_is_finished_by_its_next_life(settings: Any) -> None:
    """The row says a change of working from 1 to 2 shards began (the intent, not published) and the
    directory actor dies: restarted, it finishes the change when a router next asks."""
    await LayerRouter(settings).view("working")  # the directory up, its rows made
    store, collections = open_store(settings)
    rows = PlacementStore(store, collections.state)
    before = rows.get("working")
    assert before is not None and before.shards == 1
    rows.put(before.begin(2))
    ray.kill(LayerRouter(settings).directory.actor, no_restart=False)
    deadline = time.monotonic() + 60
    while (view := await _fresh_view(settings, "working")) is None or view.epoch == before.epoch:
        assert time.monotonic() < deadline, "the change begun before the restart was not finished"
        await asyncio.sleep(0.2)
    assert (view.shards, view.epoch) == (2, before.epoch + 1)
    ping = await LayerRouter(settings).shard_handle("working", 1).ping.remote()
    assert (ping["epoch"], ping["shards"]) == (view.epoch, 2)


async def _fresh_view(settings: Any, layer: Layer) -> ShardView | None:
    """The layer's view from the directory, None while it restarts."""
    try:
        return await LayerRouter(settings).view(layer)
    except StrataError:
        return None


async def test_bad_scale_requests_name_the_field(settings: Any) -> None:
    router = LayerRouter(settings)
    with pytest.raises(StrataError) as unknown:
        await router.directory.scale("attention", 3)
    assert unknown.value.details["field"] == "layer"
    for shards in (0, 5000):
        with pytest.raises(StrataError) as out_of_range:
            await router.directory.scale("episodic", shards)
        assert out_of_range.value.details["field"] == "shards"
