"""Strata on a Ray cluster of three nodes started in this process
(``ray.cluster_utils.Cluster``): where the layer actors run, what a node's death
costs the tenants it hosted, and the Serve config deployed on that cluster.
The cluster runs with Ray's token authentication, as cluster.yaml starts it, and a
process without the token cannot join it. Real Ray, real milvus-lite; every node
runs on this machine."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray
import yaml
from ray.cluster_utils import Cluster

from strata.layers import Layer
from strata.schema import LAYERS
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter, shutdown_ray
from tests.conftest import (
    RAY_AUTH_ENV,
    MilvusServer,
    free_port,
    leave_shared_ray,
    milvus_settings,
    ray_token_auth,
    settings_for,
)

#: Each test runs on milvus-lite and on a Milvus server (tests/conftest.py).
STORES = ("lite", "server")
ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
#: Ray's floor is ~75 MiB; nothing here puts large objects in the store.
OBJECT_STORE_BYTES = 78 * MIB
#: The GCS declares a node dead after this many failed health checks this far apart.
#: Ray's defaults (5 x 3 s) put a killed node's actors back after 21-23 s here; these, after 6-12 s.
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}
#: Three tenants on each shard of every layer (owner_shard with 2 shards: 0, 1, 0, 1, 0, 1).
TENANTS = ("acme", "globex", "initech", "wayne", "wonka", "cyberdyne")


def _start_cluster() -> Cluster:
    """A head and two workers, one CPU each (the Serve config asks for 1.75 CPUs)."""
    for attempt in range(3):
        cluster = Cluster()
        try:
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False,
                             _system_config=HEALTH_CHECKS)
            for _ in range(2):
                cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES)
            cluster.wait_for_nodes()
            return cluster
        except Exception as exc:
            cluster.shutdown()  # type: ignore[no-untyped-call]  # Ray leaves it unannotated
            # Ray waits 30 s for a raylet to register; on this shared 2-core machine a
            # node once took longer, at a load average of 23: start again from scratch.
            if "timed out" not in str(exc).lower() or attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def ray_token(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Token auth for every node and this driver, as cluster.yaml sets it up: a token file
    (0600) named by RAY_AUTH_TOKEN_PATH and RAY_AUTH_MODE=token; restored afterwards."""
    path = tmp_path_factory.mktemp("ray-auth") / "auth_token"
    with ray_token_auth(path):
        yield path


@pytest.fixture(scope="module")
def cluster(ray_token: Path, milvus: MilvusServer) -> Iterator[Cluster]:
    # A cluster per store: a test kills one of its nodes.
    leave_shared_ray()
    cluster = _start_cluster()
    try:
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        yield cluster
    finally:
        shutdown_ray()
        cluster.shutdown()  # type: ignore[no-untyped-call]  # Ray leaves it unannotated


def _join(address: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A fresh driver process that tries to join the cluster and run a task there."""
    code = (f"import ray; ray.init(address={address!r}, logging_level='ERROR', log_to_driver=False);"
            " print('JOINED', ray.get(ray.remote(lambda: 1 + 1).remote()))")
    clean = {k: v for k, v in os.environ.items() if k not in RAY_AUTH_ENV}
    return subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.stores("lite")  # Ray's token, whatever the store (43 s a run)
def test_a_process_without_the_token_cannot_join_the_cluster(cluster: Cluster, ray_token: Path) -> None:
    """Anyone who reaches Ray's ports could run code on the cluster; with token auth on
    every node (cluster.yaml), a driver without the token, or with a wrong one, is refused."""
    for env in ({}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}):
        refused = _join(cluster.address, env)
        assert refused.returncode != 0 and "JOINED" not in refused.stdout, (env, refused.stdout, refused.stderr[-2000:])
    joined = _join(cluster.address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(ray_token)})
    assert joined.returncode == 0 and "JOINED 2" in joined.stdout, joined.stderr[-2000:]


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer, cluster: Cluster) -> Any:
    # Shards that reserve no CPU (as before actors.shard_num_cpus): spread over three 1-CPU nodes at
    # 0.1 each, they would leave no node the whole CPU serve.yaml's embedding replica asks for.
    settings = settings_for(milvus, actors={"shard_num_cpus": 0})
    # Create the collections first, as `strata up` does: shards that open a fresh store
    # at the same moment race in ensure_collection, and the loser's call fails with 503.
    open_store(settings)
    return settings


def _node_of(actor: Any) -> str:
    """Run inside an actor (``__ray_call__``): the id of the node it runs on."""
    return ray.get_runtime_context().get_node_id()


async def _placement(router: LayerRouter) -> dict[tuple[Layer, int], str]:
    """(layer, shard) → node id, for every shard actor (creating those that do not exist)."""
    keys = [(layer, n) for layer in LAYERS for n in range(router.shards(layer))]
    nodes = await asyncio.gather(*(router.shard_handle(*k).__ray_call__.remote(_node_of) for k in keys))
    return dict(zip(keys, nodes, strict=True))


def _alive_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}  # type: ignore[no-untyped-call]  # Ray leaves it unannotated


async def _until_moved(handle: Any, away_from: str, timeout_s: float = 120) -> str:
    """Until the actor answers from a node other than ``away_from``; returns that node.
    (Its old process may still answer for a moment after its node was killed.)"""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            node: str = await handle.__ray_call__.remote(_node_of)
            if node != away_from:
                await handle.ping.remote()  # and its store answers
                return node
        except Exception:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, f"still on node {away_from} after {timeout_s:g} s"
        await asyncio.sleep(0.2)


def _fact(tenant: str) -> str:
    return f"The {tenant} launch code is {tenant.upper()}-7731."


async def _fill(client: InClusterClient, tenant: str) -> int:
    """A session, a document and a skill; returns the episodic version acknowledged last."""
    turns = await client.record_turns("s1", [{"user": _fact(tenant), "agent": "Noted."},
                                             {"user": "Lunch was fine today.", "agent": "ok"}])
    await client.index_document(f"# {tenant} runbook\n\nThe {tenant} deploy uses Kafka and the {tenant}-bucket.",
                                doc_id="runbook")
    await client.extract_skill(f"Rotate the {tenant} keys", [{"command": f"vault rotate --tenant {tenant}"}])
    return turns.versions["episodic"]


async def _check(client: InClusterClient, tenant: str) -> None:
    """Every layer answers with this tenant's data."""
    hits = await client.search(f"what is the {tenant} launch code?", layers=["episodic"])
    assert hits.hits and _fact(tenant) in hits.hits[0].text, (tenant, hits)
    doc = await client.search(f"what does the {tenant} deploy use?", layers=["semantic"])
    assert any(f"{tenant}-bucket" in h.text for h in doc.hits), (tenant, doc)
    ctx = await client.build_context(f"what is the {tenant} launch code?", "s1", task_type="planning")
    assert _fact(tenant) in ctx.context and not ctx.missing, (tenant, ctx)
    skills = await client.find_skills(f"rotate the {tenant} keys", min_success_rate=0)
    assert [s.skill_name for s in skills.skills if tenant in s.description], (tenant, skills)
    assert [i.content for i in (await client.get_working("s1")).items if _fact(tenant) in i.content]


async def test_layer_actors_are_spread_over_the_nodes(settings: Any) -> None:
    placement = await _placement(LayerRouter(settings))
    nodes = set(placement.values())
    assert nodes <= _alive_nodes()
    # A token CPU share and SPREAD (actors/router.py): 8 shards on 3 nodes land 3/3/2.
    per_node = sorted(list(placement.values()).count(node) for node in _alive_nodes())
    assert len(per_node) == 3 and per_node[-1] - per_node[0] <= 1, placement


async def _write_until(stop: asyncio.Event, clients: dict[str, InClusterClient],
                       acknowledged: dict[str, int], written: dict[str, list[str]], failures: list[str]) -> None:
    """Record a turn for one tenant after another until ``stop``; note what was acknowledged,
    and what failed: a call, or the layer a recorded turn did not reach (working memory)."""
    n = 0
    while not stop.is_set():
        for tenant, client in clients.items():
            n += 1
            note = f"Live note {n} of {tenant}."
            try:
                result = await client.record_turn("live", note)
            except Exception as exc:
                failures.append(type(exc).__name__)
                await asyncio.sleep(0.1)
                continue
            acknowledged[tenant] = max(acknowledged[tenant], result.versions["episodic"])
            written[tenant].append(note)
            failures += [f"{layer} missing" for layer in result.missing]


async def test_a_dead_nodes_tenants_come_back_elsewhere_with_their_state(settings: Any, cluster: Cluster) -> None:
    router = LayerRouter(settings)
    clients = {t: InClusterClient(t, settings) for t in TENANTS}
    acknowledged = dict(zip(TENANTS, await asyncio.gather(*(_fill(c, t) for t, c in clients.items())), strict=True))
    for tenant, client in clients.items():
        await _check(client, tenant)

    placement = await _placement(router)
    held = {(layer, router.shard_of(layer, t)) for layer in LAYERS for t in TENANTS}
    assert held == set(placement)  # every shard holds a tenant
    by_worker = {w: [k for k, node in placement.items() if node == w.node_id] for w in cluster.worker_nodes}
    victim, moved = max(by_worker.items(), key=lambda item: len(item[1]))
    assert moved, f"no shard actor on a worker node: {placement}"

    # Writes keep coming while the node goes away.
    stop = asyncio.Event()
    written: dict[str, list[str]] = {t: [] for t in TENANTS}
    failures: list[str] = []
    writer = asyncio.create_task(_write_until(stop, clients, acknowledged, written, failures))
    await asyncio.sleep(0)
    started = time.monotonic()
    await asyncio.to_thread(cluster.remove_node, victim, allow_graceful=False)
    removed_s = time.monotonic() - started
    await asyncio.gather(*(_until_moved(router.shard_handle(*k), victim.node_id) for k in moved))
    recovered_s = time.monotonic() - started
    stop.set()
    await writer

    after = await _placement(router)
    assert victim.node_id not in set(after.values()) and set(after.values()) <= _alive_nodes()
    assert {k: v for k, v in after.items() if k not in moved} == {k: v for k, v in placement.items() if k not in moved}
    for tenant, client in clients.items():
        await _check(client, tenant)
        assert len(written[tenant]) < 100  # one search shows them all
        live = await client.search("live note", session_id="live", layers=["episodic"], top_k=100)
        assert {f"user: {note}" for note in written[tenant]} <= {h.text for h in live.hits}, tenant  # none lost
        turns = await client.record_turns("s1", [{"user": f"{tenant} is back after the node died."}])
        assert turns.versions["episodic"] > acknowledged[tenant]
        found = await client.search(f"is {tenant} back after the node died?", layers=["episodic"])
        assert "back after the node died" in found.hits[0].text
    print(f"\n{len(moved)} of {len(placement)} shard actors were on the removed node;"
          f" remove_node took {removed_s:.1f} s;"
          f" all answered again {recovered_s:.1f} s after it began; {sum(map(len, written.values()))} writes"
          f" acknowledged meanwhile, {len(failures)} failed ({', '.join(sorted(set(failures))) or '-'})")


ADMIN = "sk-strata-multinode-admin"


def test_serve_config_deploys_on_the_cluster(settings: Any, milvus: MilvusServer) -> None:
    """configs/serve.yaml as `serve run configs/serve.yaml` deploys it (serve_start +
    deploy_apps), with three changes a test on one machine needs: loopback and a free
    port; the proxy on the head only (every node's proxy would bind the same port here);
    and STRATA_* overrides pointing the application at this test's Milvus."""
    from ray import serve
    from ray.serve._private import api as serve_api
    from ray.serve.schema import ServeDeploySchema

    raw = yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text())
    port = free_port()
    raw["http_options"].update(host="127.0.0.1", port=port)
    raw["proxy_location"] = "HeadOnly"
    [app] = raw["applications"]
    store = {f"STRATA_MILVUS__{name.upper()}": str(value) for name, value in milvus_settings(milvus).items()}
    app["runtime_env"] = {"env_vars": {
        **store,
        "STRATA_MILVUS__COLLECTION_PREFIX": settings.milvus.collection_prefix,
        "STRATA_RAY__NAMESPACE": settings.ray.namespace,
        "STRATA_AUTH__ADMIN_KEY": ADMIN,  # /healthz names the layers to an admin key only
    }}
    config = ServeDeploySchema.model_validate(raw)

    client = serve_api.serve_start(http_options=config.http_options.model_dump(),
                                   proxy_location=config.proxy_location)
    try:
        client.deploy_apps(config)
        deadline = time.monotonic() + 180
        while True:
            status = serve.status().applications.get(app["name"])
            if status is not None and status.status == "RUNNING":
                break
            assert status is None or status.status in ("NOT_STARTED", "DEPLOYING"), status
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        assert set(status.deployments) == {d["name"] for d in app["deployments"]}
        deployed = client.get_serve_details()["applications"][app["name"]]["deployments"]
        for wanted in app["deployments"]:  # the config's options, not the code's defaults
            got = deployed[wanted["name"]]["deployment_config"]
            assert got["max_ongoing_requests"] == wanted["max_ongoing_requests"]
            assert got["ray_actor_options"]["num_cpus"] == wanted["ray_actor_options"]["num_cpus"]
            scaling = wanted["autoscaling_config"]
            assert {k: got["autoscaling_config"][k] for k in scaling} == scaling
        answer = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        assert answer.status_code == 200, answer.text
        assert set(answer.json()["layers"]) == set(LAYERS)
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]  # Ray leaves it unannotated
