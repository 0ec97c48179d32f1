"""The layer shards' autoscaling (issue 42, "Load the autoscaler can see"), exercised on a Ray
cluster whose autoscaler adds and removes worker nodes (:mod:`tests.autoscaling_cluster`: real
Ray nodes, token auth) with milvus-lite.

Each shard reserves 0.4 CPU (``actors.shard_num_cpus``): the head's 2 CPUs hold the five shards
of the stack (episodic 2, the other layers 1 each) and nothing more, and a 1-CPU worker holds two
more. 50 tenants' writers load the episodic layer through a router (as API replicas would), and
the directory's policy (``actors.autoscale``, with windows of seconds) grows it one shard at a
time: its third shard fits nowhere until the Ray autoscaler adds the worker. When the writers
stop, the policy shrinks the layer back to 2, retiring the worker's shards, and the autoscaler
releases the idle worker.

What must hold: the layer went from 2 to 4 shards and back to 2, a worker joined and left, every
read-your-writes probe (every tenant after every change: a turn just written is the first hit of
a search for it) found its turn at rank 1, no write failed, and the store holds every
acknowledged turn at the end. A timeline, one row a second, is printed (``pytest -s``) and
written to the test's tmp dir.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import ray

from strata.config import StrataSettings
from strata.errors import StrataError
from strata.store.layout import open_store
from strata_actors.directory import AutoscaleStatus
from strata_actors.router import LayerRouter
from tests.autoscaling_cluster import LocalAutoscalingCluster, WorkerType, joined_cluster
from tests.conftest import MilvusServer, settings_for
from tests.integration.test_scale import SESSION, _probe, _vector, _write

TENANTS = [f"load-{n:02d}" for n in range(50)]
HEAD_CPUS = 2
WORKER = WorkerType(cpus=1, max_workers=1)
SHARD_CPUS = 0.4
IDLE_TIMEOUT_S = 5.0
FIRST = {"working_shards": 1, "episodic_shards": 2, "semantic_shards": 1, "procedural_shards": 1}
#: The policy, with windows of seconds (the defaults are 30 s and 300 s).
AUTOSCALE = {
    "enabled": True, "interval_s": 1.0, "grow_busy": 0.5, "grow_queue": 2.0, "grow_window_s": 3.0,
    "shrink_busy": 0.1, "shrink_queue": 0.3, "shrink_window_s": 8.0, "max_shards": 4, "start_timeout_s": 180.0,
}
#: Each phase must end within this, or the test fails with the timeline so far.
PHASE_TIMEOUT_S = 300.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAutoscalingCluster]:
    auth_dir = tmp_path_factory.mktemp("ray-auth")
    with joined_cluster(auth_dir, head_cpus=HEAD_CPUS, worker=WORKER, idle_timeout_s=IDLE_TIMEOUT_S) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def settings(cluster: LocalAutoscalingCluster, milvus: MilvusServer) -> StrataSettings:
    settings = settings_for(milvus, actors={**FIRST, "shard_num_cpus": SHARD_CPUS, "autoscale": AUTOSCALE})
    open_store(settings)  # the collections first, as `strata up` makes them: shards racing to make them fail
    assert sum(FIRST.values()) * SHARD_CPUS <= HEAD_CPUS < (sum(FIRST.values()) + 1) * SHARD_CPUS
    assert WORKER.cpus >= 2 * SHARD_CPUS
    return settings


def _alive_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}  # type: ignore[no-untyped-call]  # unannotated


def _node_of(actor: Any) -> str:
    """Run inside an actor (``__ray_call__``): the id of the node it runs on."""
    return ray.get_runtime_context().get_node_id()


@dataclass
class Run:
    """What the writers, the probes and the cluster did, and a row a second of it."""

    settings: StrataSettings
    head: str
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    phase: str = "load"
    acknowledged: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TENANTS})
    failures: list[str] = field(default_factory=list)
    #: (epoch, shards, tenant, found at rank 1)
    probes: list[tuple[int, int, str, bool]] = field(default_factory=list)
    #: (when it began, s since the start; how long it took, s) of each acknowledged write
    writes: list[tuple[float, float]] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    #: Seconds since the start when each was first seen.
    events: dict[str, float] = field(default_factory=dict)
    nodes_seen: dict[str, bool] = field(default_factory=dict)
    shards_seen: list[int] = field(default_factory=list)
    status: AutoscaleStatus | None = None

    def t(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def note(self, event: str) -> None:
        self.events.setdefault(event, self.t())


async def _keep_writing(router: LayerRouter, tenant: str, run: Run, stop: asyncio.Event) -> None:
    """One tenant's agent: a turn, then a search of its session, until ``stop``."""
    n = 0
    while not stop.is_set():
        n += 1
        try:
            began = time.monotonic()
            run.acknowledged[tenant].append(await _write(router, tenant, f"note {n} of {tenant} at {run.t()}"))
            run.writes.append((round(began - run.started, 1), time.monotonic() - began))
            query = f"note {n} of {tenant}"
            await router.episodic(tenant).search(tenant, query=query, vector=_vector(query), session_id=SESSION,
                                                 top_k=5)
        except StrataError as exc:  # not acknowledged: allowed, but counted
            run.failures.append(f"{run.t()} {tenant}: {type(exc).__name__}: {exc.message[:120]}")
            await asyncio.sleep(0.5)


async def _probe_each_change(router: LayerRouter, run: Run) -> None:
    """After each change of episodic's count (a new epoch), a read-your-writes probe of every tenant."""
    probed = 0
    while True:
        placement = (await router.directory.placement("episodic")).published
        if placement.epoch > probed:
            probed = placement.epoch
            found = await asyncio.gather(*(_probe(router, t, f"e{placement.epoch}") for t in TENANTS))
            run.probes += [(placement.epoch, placement.shards, t, ok) for t, ok in zip(TENANTS, found, strict=True)]
        await asyncio.sleep(0.5)


async def _watch(router: LayerRouter, run: Run) -> None:
    """A row a second: the layer's count and load as the policy saw it, the nodes, the writes."""
    while True:
        status = run.status = await router.directory.autoscale_status()
        placement = (await router.directory.placement("episodic")).published
        nodes = await asyncio.to_thread(ray.nodes)
        run.nodes_seen.update({n["NodeID"]: bool(n["Alive"]) for n in nodes})
        alive = sum(bool(n["Alive"]) for n in nodes)
        run.shards_seen.append(placement.shards)
        sample = status.samples.get("episodic")
        decision = status.decisions.get("episodic")
        if alive > 1:
            run.note("worker joined")
        elif "worker joined" in run.events:
            run.note("worker released")
        run.rows.append(
            f"{run.t():6.1f}  {run.phase:<5} {placement.shards:6d} {alive:5d}"
            f"  {sample.busy if sample else float('nan'):5.2f} {sample.queue if sample else float('nan'):6.1f}"
            f"  {sum(map(len, run.acknowledged.values())):7d} {len(run.failures):5d} {len(run.probes):6d}"
            f"  {decision.reason if decision else '-'}")
        await asyncio.sleep(1.0)


async def _until(what: str, done: Any, run: Run, *tasks: asyncio.Task[None]) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while not await done():
        for task in tasks:
            if task.done():
                task.result()  # its error
        assert time.monotonic() < deadline, f"{what}: not within {PHASE_TIMEOUT_S:g} s"
        await asyncio.sleep(0.5)


# The cluster's start and phases of up to PHASE_TIMEOUT_S each: more than a test's default bound.
@pytest.mark.timeout(1200)
async def test_load_grows_a_layer_onto_an_added_node_and_idle_shrinks_it_and_frees_the_node(
    settings: StrataSettings, tmp_path: Path
) -> None:
    admin, writers, prober = LayerRouter(settings), LayerRouter(settings), LayerRouter(settings)
    # Every shard of the stack starts now, and fills the head.
    await asyncio.gather(*(h.ping.remote() for h in admin.every_handle()))
    [head] = _alive_nodes()
    assert set(await asyncio.gather(*(h.__ray_call__.remote(_node_of) for h in admin.every_handle()))) == {head}
    run = Run(settings, head)
    for t in TENANTS:
        run.acknowledged[t].append(await _write(writers, t, f"first words of {t}"))

    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch(admin, run))
    probes = asyncio.create_task(_probe_each_change(prober, run))
    load = [asyncio.create_task(_keep_writing(writers, t, run, stop)) for t in TENANTS]
    header = "   t_s  phase shards nodes   busy  queue  acked  fail probes  decision"
    try:
        async def grown() -> bool:
            view = (await admin.directory.placement("episodic")).published
            return view.shards >= 4 and len(await asyncio.to_thread(_alive_nodes)) == 2

        await _until("episodic at 4 shards, on an added node", grown, run, watcher, probes, *load)
        run.note("grown to 4")
        grown_nodes = await asyncio.gather(*(admin.shard_handle("episodic", n).__ray_call__.remote(_node_of)
                                             for n in range(4)))
        await asyncio.sleep(5)  # the writers go on at 4 shards
        stop.set()
        await asyncio.gather(*load)
        run.phase = "idle"
        run.note("load stopped")

        async def shrunk() -> bool:
            view = (await admin.directory.placement("episodic")).published
            return view.shards == 2 and await asyncio.to_thread(_alive_nodes) == {head}

        await _until("episodic back at 2 shards, the worker released", shrunk, run, watcher, probes)
        run.note("shrunk and released")
        await asyncio.sleep(3)  # the probes after the last change
    finally:
        stop.set()
        for task in (*load, watcher, probes):
            task.cancel()
        with suppress(asyncio.CancelledError):
            await asyncio.gather(*load, watcher, probes, return_exceptions=True)
        changes = [f"  {c.layer} {c.shards_from} -> {c.shards_to}: began {c.began_at - run.started_wall:.1f} s,"
                   f" published {c.done_at - run.started_wall:.1f} s ({c.reason})"
                   for c in (run.status.changes if run.status else [])]
        report = "\n".join([header, *run.rows, "changes:", *changes,
                            f"events: {run.events}", f"failures: {run.failures[:10] or '-'}"])
        (tmp_path / "shard-autoscaling-timeline.txt").write_text(report + "\n")
        print("\n" + report)

    # Grown to 4 with the new shards on the added node; back to 2 with that node gone.
    assert max(run.shards_seen) == 4 and run.shards_seen[-1] == 2
    assert {grown_nodes[0], grown_nodes[1]} == {head} and set(grown_nodes[2:]) - {head}, grown_nodes
    workers = {node for node in run.nodes_seen if node != head}
    assert workers and not any(run.nodes_seen[w] for w in workers), run.nodes_seen
    # The other layers, never loaded, stayed at their first count.
    for layer in ("working", "semantic", "procedural"):
        assert (await admin.directory.placement(layer)).published.shards == 1
    # Read-your-writes at rank 1 after every change (2->3->4->3->2: four epochs of 50 probes).
    assert len({epoch for epoch, *_ in run.probes}) >= 4 and len(run.probes) >= 100
    missed = [(epoch, shards, t) for epoch, shards, t, ok in run.probes if not ok]
    assert not missed, missed[:10]
    assert not run.failures, run.failures[:10]
    # Every acknowledged write is in the store (the probes' turns too: 2 a probe are not counted).
    store, collections = open_store(settings)
    for t in TENANTS:
        stored = {r.pk for r in store.scan(collections.episodic, tenant=t, with_vectors=False)}
        lost = [turn for turn in run.acknowledged[t] if f"{t}/{SESSION}/{turn}" not in stored]
        assert not lost, f"{t}: acknowledged turns {lost[:5]} not in the store"
    writes = sum(map(len, run.acknowledged.values()))
    took = sorted(w for _, w in run.writes)
    slowest = max(run.writes, key=lambda w: w[1])
    print(f"{writes} acknowledged writes, {len(run.probes)} probes; writes under load p50"
          f" {1000 * took[len(took) // 2]:.0f} ms, p99 {1000 * took[int(len(took) * 0.99)]:.0f} ms, slowest"
          f" {slowest[1]:.1f} s (began at {slowest[0]:.1f} s); events (s): {run.events}")
