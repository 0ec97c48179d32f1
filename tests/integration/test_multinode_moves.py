"""A node dies in the middle of a move (issue 42's "Done when"): on a Ray cluster of three nodes
(token auth, as cluster.yaml starts it), the semantic layer grows from one shard to two while
every tenant has a document indexing in the background and writers keep recording turns, and
the worker node holding the most shards is killed while the change runs. No acknowledged write
is lost (a scan of the store), every background document is indexed (its job finishes on
whichever shard owns its tenant now), and each tenant reads its own last write at rank 1.

Real Ray nodes (``ray.cluster_utils.Cluster``), real milvus-lite, the packaged embedding model."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from ray.cluster_utils import Cluster

from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.integration.test_multinode import _placement, cluster, ray_token  # noqa: F401  (module fixtures)

STORES = ("lite",)
TENANTS = [f"mover-{n:02d}" for n in range(12)]


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer, cluster: Cluster) -> Any:  # noqa: F811  (the imported fixture)
    settings = settings_for(milvus, actors={"shard_num_cpus": 0, "working_shards": 1, "episodic_shards": 2,
                                            "semantic_shards": 1, "procedural_shards": 1})
    open_store(settings)  # the collections first, as `strata up` does
    return settings


async def until(check: Callable[[], Awaitable[Any]], timeout_s: float = 300.0) -> Any:
    """``check()`` once truthy; errors while shards come back on other nodes are retried."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = await check()
        except Exception:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.5)


def _manual(tenant: str) -> str:
    return "\n\n".join(f"## Step {n}\n\nFor {tenant}, step {n} rotates the key ring-{tenant}-{n}." for n in range(120))


async def test_a_node_killed_during_a_move_loses_no_write_and_its_jobs_finish_elsewhere(
    settings: Any, cluster: Cluster  # noqa: F811  (the imported fixture)
) -> None:
    router = LayerRouter(settings)
    clients = {t: InClusterClient(t, settings) for t in TENANTS}
    written: dict[str, list[str]] = {t: [] for t in TENANTS}
    for tenant, client in clients.items():
        await client.record_turn("live", f"First words of {tenant}.")
        written[tenant].append(f"First words of {tenant}.")
        submitted = await client.index_document(_manual(tenant), doc_id="manual", wait=False)
        assert submitted.status in ("indexing", "ready")

    stop = asyncio.Event()
    failures: list[str] = []

    async def keep_writing() -> None:
        n = 0
        while not stop.is_set():
            tenant = TENANTS[n % len(TENANTS)]
            note = f"Live note {n} of {tenant}."
            n += 1
            try:
                await clients[tenant].record_turn("live", note)
                written[tenant].append(note)  # acknowledged
            except Exception as exc:  # refused while a shard comes back: not acknowledged
                failures.append(type(exc).__name__)
                await asyncio.sleep(0.1)

    writer = asyncio.create_task(keep_writing())
    placement = await _placement(router)
    by_worker = {w: [k for k, node in placement.items() if node == w.node_id] for w in cluster.worker_nodes}
    victim, _ = max(by_worker.items(), key=lambda item: len(item[1]))
    scaling = asyncio.create_task(router.directory.scale("semantic", 2))
    await asyncio.sleep(0.5)  # the change has begun: the new shard is starting
    started = time.monotonic()
    await asyncio.to_thread(cluster.remove_node, victim, allow_graceful=False)
    try:
        changed = await scaling
    except Exception as exc:  # the change stays recorded as begun: the next scale finishes it
        print(f"\nthe scale raised {type(exc).__name__} while the node went away; sent again")
        changed = await until(lambda: router.directory.scale("semantic", 2))
    assert changed.shards == 2
    scaled_s = time.monotonic() - started

    async def all_ready() -> bool:
        docs = await asyncio.gather(*(c.get_document("manual") for c in clients.values()))
        return all(d.status == "ready" for d in docs)

    await until(all_ready)
    ready_s = time.monotonic() - started
    await asyncio.sleep(1.0)
    stop.set()
    await writer

    for tenant, client in clients.items():
        found = await client.search(f"which key ring does step 77 rotate for {tenant}?", layers=["semantic"],
                                    weights={"lexical": 1}, top_k=3)
        assert any(f"ring-{tenant}-77" in h.text for h in found.hits), (tenant, found)
        probe = f"Probe after the node died: {tenant} parks in bay {tenant[-2:]}7."
        # The killed node's episodic shard may still be restarting: a write whose actor died is
        # not sent again by the handle (its fate is unknown), so the probe is sent with a turn id
        # until it is acknowledged (a replay answers for one that landed).
        await until(functools.partial(client.record_turn, "live", probe, turn_id=f"probe-{tenant}"))
        hits = await client.search(probe, session_id="live", layers=["episodic"], top_k=3)
        assert hits.hits and probe in hits.hits[0].text, (tenant, hits)  # read-your-writes, rank 1
    store, names = open_store(settings)
    for tenant in TENANTS:
        stored = " ".join(r.text for r in store.scan(names.episodic, tenant=tenant, session="live", with_vectors=False))
        lost = [note for note in written[tenant] if note not in stored]
        assert not lost, (tenant, lost)
    print(f"\nnode removed shard actors {by_worker[victim]}; scale done {scaled_s:.1f} s and every document"
          f" ready {ready_s:.1f} s after; {sum(map(len, written.values()))} writes acknowledged,"
          f" {len(failures)} refused ({', '.join(sorted(set(failures))) or '-'})")
