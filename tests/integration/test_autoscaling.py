"""Autoscaling exercised, not only configured (issue 21): the Strata application deployed as
``serve deploy configs/serve.yaml`` deploys it, on a Ray cluster whose autoscaler adds and
removes worker nodes (Ray's fake multi-node provider, :mod:`tests.autoscaling_cluster`).

The head has 2 CPUs, as ``strata up`` starts it: room for the embedding replica (1 CPU in
serve.yaml) and two api replicas (0.5 each). Under load from concurrent clients with real
tenant keys Serve asks for a third api replica, which fits nowhere until the autoscaler adds
a worker node; when the load stops, Serve stops the replicas again (the worker's first) and
the autoscaler removes the idle worker. A timeline of replicas, nodes and requests, one row a
second, is printed (``pytest -s``) and written to the test's tmp dir.

What must hold: replicas went above one and back to one, a worker node joined and left, no
request failed (a 503/429 the client waits out and retries is counted, not a failure), and
every acknowledged turn is readable afterwards, from the store.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx
import pytest
import ray
import yaml

from strata.access.keys import open_keys
from strata.config import StrataSettings
from strata.errors import RateLimited, StoreUnavailable
from strata.layers import LAYERS
from strata.store.layout import open_store
from strata_actors.router import LayerRouter
from strata_serve.app import APP_NAME
from strata_serve.client import AsyncStrataClient
from tests.autoscaling_cluster import LocalAutoscalingCluster, WorkerType, joined_cluster
from tests.conftest import MilvusServer, free_port, settings_for

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "sk-strata-autoscaling-admin"
#: One load client each; three tenants on each shard of every layer (owner_shard with 2 shards).
TENANTS = ("acme", "globex", "initech", "wayne", "wonka", "cyberdyne")
#: The api deployment's autoscaling for this test: serve.yaml's shape, with delays of seconds.
#: ``metrics_interval_s`` (deprecated, still read by Serve 2.60) is how often replicas report
#: their load; 10 s by default.
API_AUTOSCALING = {
    "min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 2, "upscale_delay_s": 2,
    "downscale_delay_s": 5, "look_back_period_s": 5, "metrics_interval_s": 1,
}
HEAD_CPUS = 2
WORKER = WorkerType(cpus=1, max_workers=1)
IDLE_TIMEOUT_S = 5.0
#: Each phase must end within this, or the test fails with the timeline so far.
PHASE_TIMEOUT_S = 120.0
#: Load goes on this long once a replica runs on the added node, so that it serves some.
HOLD_S = 5.0
#: A 503 or 429 is retried after its Retry-After, this many times at most.
ATTEMPTS = 10

_T = TypeVar("_T")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAutoscalingCluster]:
    from ray import serve

    auth_dir = tmp_path_factory.mktemp("ray-auth")
    with joined_cluster(auth_dir, head_cpus=HEAD_CPUS, worker=WORKER, idle_timeout_s=IDLE_TIMEOUT_S,
                        before_leaving=serve.shutdown) as cluster:
        yield cluster


@dataclass
class Deployed:
    url: str
    settings: StrataSettings
    keys: dict[str, str]
    serve: Any  # Serve's controller client: get_serve_details()
    head_node: str


def _serve_config(settings: StrataSettings, port: int) -> dict[str, Any]:
    """configs/serve.yaml with what a test on one machine needs: loopback and a free port, the
    proxy on the head only (every node's proxy would bind the same port here), the test's
    settings (as ``strata up`` passes them to ``build_app``), the api deployment's autoscaling
    made fast, and one embedding replica."""
    raw: dict[str, Any] = yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text())
    raw["http_options"].update(host="127.0.0.1", port=port)
    raw["proxy_location"] = "HeadOnly"
    [app] = raw["applications"]
    app["args"] = {"settings": settings.to_dict()}
    deployments = {d["name"]: d for d in app["deployments"]}
    deployments["api"]["autoscaling_config"].update(API_AUTOSCALING)
    embedding = deployments["embedding"]
    del embedding["autoscaling_config"]
    embedding["num_replicas"] = 1
    # The premise of the test: the head holds the embedding replica and two api replicas, not three.
    api_cpus, embedding_cpus = (deployments[n]["ray_actor_options"]["num_cpus"] for n in ("api", "embedding"))
    assert embedding_cpus + 2 * api_cpus <= HEAD_CPUS < embedding_cpus + 3 * api_cpus <= HEAD_CPUS + WORKER.cpus
    return raw


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        time.sleep(0.5)


def _nodes() -> list[dict[str, Any]]:
    """Every node the cluster has had, with ``NodeID`` and ``Alive``."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]  # Ray leaves it unannotated
    return nodes


def _alive_nodes() -> set[str]:
    return {n["NodeID"] for n in _nodes() if n["Alive"]}


def _node_of(actor: Any) -> str:
    """Run inside an actor (``__ray_call__``): the id of the node it runs on."""
    return ray.get_runtime_context().get_node_id()


def _shard_nodes(settings: StrataSettings) -> set[str]:
    router = LayerRouter(settings)
    handles = [router.shard_handle(layer, n) for layer in LAYERS for n in range(router.shards(layer))]
    return set(ray.get([h.__ray_call__.remote(_node_of) for h in handles], timeout=60))


@pytest.fixture(scope="module")
def app(cluster: LocalAutoscalingCluster, milvus: MilvusServer) -> Deployed:
    from ray.serve._private import api as serve_api
    from ray.serve.schema import ServeDeploySchema

    [head] = _alive_nodes()
    # The premise is the api replicas' (the head holds the embedding replica and two api
    # replicas, and the shards, which then reserve no CPU); shards that reserve CPU and add a node
    # are tests/integration/test_shard_autoscaling.py's.
    settings = settings_for(milvus, auth={"admin_key": ADMIN}, actors={"shard_num_cpus": 0})
    # As `strata up` does before deploying: the collections exist before shards race to make them.
    store, names = open_store(settings)
    keys = open_keys(store, names)
    port = free_port()
    config = ServeDeploySchema.model_validate(_serve_config(settings, port))
    client = serve_api.serve_start(http_options=config.http_options.model_dump(), proxy_location=config.proxy_location)
    client.deploy_apps(config)

    def running() -> bool:
        status = client.get_serve_status(APP_NAME).app_status.status
        assert status in ("NOT_STARTED", "DEPLOYING", "RUNNING"), client.get_serve_status(APP_NAME)
        return bool(status == "RUNNING")

    _wait("the application", running)
    url = f"http://127.0.0.1:{port}"
    # /healthz calls every shard of every layer: all of them start now, on the head. On a
    # loaded machine that outlasts one request's 30 s (a 504): the shards go on starting.
    def healthy() -> bool:
        health = httpx.get(url + "/healthz", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
        if health.status_code in (503, 504):
            return False
        assert health.status_code == 200 and set(health.json()["layers"]) == set(LAYERS), health.text
        return True

    _wait("every shard", healthy, timeout_s=240)
    assert _shard_nodes(settings) == {head}
    # A worker the deployment may have asked for is gone before the load begins.
    _wait("one node", lambda: _alive_nodes() == {head}, timeout_s=60)
    return Deployed(url, settings, {t: keys.create(t) for t in TENANTS}, client, head)


# -- the load -------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw: answers, failures, the retryable answers they waited out, and
    the turns acknowledged, by (tenant, session)."""

    ok: int = 0
    failed: list[str] = field(default_factory=list)
    retried: Counter[str] = field(default_factory=Counter)
    #: HTTP answers that were not 2xx: "503 Retry-After: 1", say.
    statuses: Counter[str] = field(default_factory=Counter)
    acked: dict[tuple[str, str], set[str]] = field(default_factory=dict)


class _Noting(httpx.AsyncBaseTransport):
    """The network, noting each answer that is not a success (and its Retry-After)."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if response.status_code >= 300:
            after = response.headers.get("Retry-After")
            self._tally.statuses[f"{response.status_code}" + (f" Retry-After: {after}" if after else "")] += 1
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _attempt(tally: Tally, what: str, call: Callable[[], Awaitable[_T]]) -> _T | None:
    """``call()``, again after each 503 or 429 (after its Retry-After); None once it failed."""
    for _ in range(ATTEMPTS):
        try:
            result = await call()
        except (StoreUnavailable, RateLimited) as exc:
            tally.retried[f"{type(exc).__name__}: {exc.message[:80]}"] += 1
            await asyncio.sleep(min(float(exc.details.get("retry_after_s") or 1), 5))
            continue
        except Exception as exc:
            tally.failed.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
            return None
        tally.ok += 1
        return result
    tally.failed.append(f"{what}: still unavailable after {ATTEMPTS} attempts")
    return None


async def _client(deployed: Deployed, tenant: str, session: str, stop: asyncio.Event, tally: Tally,
                  *, pause_s: float = 0.0) -> None:
    """One agent: record a turn, search, build a context; again until ``stop``."""
    acked = tally.acked.setdefault((tenant, session), set())
    async with AsyncStrataClient(deployed.url, deployed.keys[tenant], timeout_s=90,
                                 transport=_Noting(tally)) as client:
        n = 0
        while not stop.is_set():
            n += 1
            turn_id = f"{session}-{n}"
            note = f"Deploy {n} of the {tenant} billing service used port {8000 + n} and the {tenant}-eu bucket."

            # The same turn id on a retry: a write that did land is not recorded twice.
            write = partial(client.record_turn, session, note, "Noted.", turn_id=turn_id)
            recorded = await _attempt(tally, f"{tenant} turn {turn_id}", write)
            if recorded is not None:
                acked.add(turn_id)
                if recorded.missing:
                    tally.failed.append(f"{tenant} turn {turn_id} missing {recorded.missing}")
            search = partial(client.search, f"which port did deploy {n} use?", session_id=session, layers=["episodic"])
            await _attempt(tally, f"{tenant} search", search)
            context = partial(client.build_context, f"what bucket does the {tenant} billing service use?", session)
            await _attempt(tally, f"{tenant} context", context)
            if pause_s:
                await asyncio.sleep(pause_s)


# -- the timeline ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    t_s: float
    phase: str
    api_target: int
    api_on_head: int
    api_on_workers: int
    #: Api replicas starting, stopping or recovering.
    api_other: int
    embedding: int
    nodes: int
    ok: int
    failed: int
    retried: int

    HEADER: ClassVar[str] = (
        "   t_s  phase   api: target head worker other  embedding  nodes      ok  failed  retried"
    )

    def __str__(self) -> str:
        return (f"{self.t_s:6.1f}  {self.phase:<6}  {self.api_target:10d} {self.api_on_head:4d}"
                f" {self.api_on_workers:6d} {self.api_other:5d}  {self.embedding:9d}  {self.nodes:5d}"
                f"  {self.ok:6d}  {self.failed:6d}  {self.retried:7d}")

    @property
    def scaled_up(self) -> bool:
        return self.api_on_workers >= 1 and self.nodes >= 2

    @property
    def scaled_down(self) -> bool:
        return self.api_on_head + self.api_on_workers + self.api_other == 1 and self.nodes == 1


@dataclass
class Timeline:
    """A :class:`Row` a second from Serve's view of the application, Ray's of the nodes and the
    clients' tally, while :meth:`poll` runs."""

    deployed: Deployed
    tally: Tally
    phase: str = "load"
    rows: list[Row] = field(default_factory=list)
    #: Every node seen, and whether it was alive when last seen.
    nodes_seen: dict[str, bool] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def __str__(self) -> str:
        return "\n".join([Row.HEADER, *map(str, self.rows)])

    def _sample(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        details = self.deployed.serve.get_serve_details()
        return details["applications"][APP_NAME]["deployments"], _nodes()

    async def poll(self) -> None:
        while True:
            deployments, nodes = await asyncio.to_thread(self._sample)
            api = deployments["api"]
            running = [r for r in api["replicas"] if r["state"] == "RUNNING"]
            on_head = sum(r["node_id"] == self.deployed.head_node for r in running)
            self.nodes_seen.update({n["NodeID"]: bool(n["Alive"]) for n in nodes})
            self.rows.append(Row(
                round(time.monotonic() - self.started, 1), self.phase, int(api["target_num_replicas"]), on_head,
                len(running) - on_head, len(api["replicas"]) - len(running),
                sum(r["state"] == "RUNNING" for r in deployments["embedding"]["replicas"]),
                sum(bool(n["Alive"]) for n in nodes), self.tally.ok, len(self.tally.failed),
                sum(self.tally.retried.values()),
            ))
            await asyncio.sleep(1.0)

    async def until(self, what: str, done: Callable[[Row], bool], poller: asyncio.Task[None]) -> float:
        """Until the last row is ``done``; returns its time."""
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        while not (self.rows and done(self.rows[-1])):
            if poller.done():
                poller.result()  # its error
            assert time.monotonic() < deadline, f"{what}: not within {PHASE_TIMEOUT_S:g} s"
            await asyncio.sleep(0.25)
        return self.rows[-1].t_s


async def _turns(client: AsyncStrataClient, session: str) -> list[str]:
    """Every turn id of the session, page by page."""
    ids: list[str] = []
    after: str | None = None
    while True:
        page = await client.list_turns(session, after=after, limit=1000)
        ids += [t.turn_id for t in page.turns]
        if page.next_after is None:
            return ids
        after = page.next_after


# The cluster's start and several phases of up to PHASE_TIMEOUT_S each: more than a test's default bound.
@pytest.mark.timeout(600)
async def test_load_adds_replicas_and_a_node_and_both_go_away_after_it(app: Deployed, tmp_path: Path) -> None:
    tally = Tally()
    timeline = Timeline(app, tally)
    poller = asyncio.create_task(timeline.poll())
    burst_stop, trickle_stop = asyncio.Event(), asyncio.Event()
    # One client all along, pausing between rounds: requests keep arriving while replicas stop.
    trickle = asyncio.create_task(_client(app, TENANTS[0], "trickle", trickle_stop, tally, pause_s=0.5))
    burst = [asyncio.create_task(_client(app, tenant, "burst", burst_stop, tally)) for tenant in TENANTS]
    try:
        up_s = await timeline.until("a replica on an added node", lambda row: row.scaled_up, poller)
        await asyncio.sleep(HOLD_S)
        burst_stop.set()
        await asyncio.gather(*burst)
        timeline.phase = "cool"
        stopped_s = timeline.rows[-1].t_s
        down_s = await timeline.until("back to one replica on one node", lambda row: row.scaled_down, poller)
    finally:
        burst_stop.set()
        trickle_stop.set()
        await asyncio.gather(*burst, trickle, return_exceptions=True)
        poller.cancel()
        (tmp_path / "autoscaling-timeline.txt").write_text(f"{timeline}\n")
        print(f"\n{timeline}\nnon-2xx answers: {dict(tally.statuses) or '-'}; retried: {dict(tally.retried) or '-'}"
              f"\nfailed: {tally.failed[:20] or '-'}")

    # Every acknowledged turn is there once, read back from the store: each tenant's episodic
    # state is dropped from its shard first, so the listing reloads it.
    router = LayerRouter(app.settings)
    await asyncio.gather(*(router.handle("episodic", t).evict.remote(t) for t in TENANTS))
    for (tenant, session), acked in tally.acked.items():
        async with AsyncStrataClient(app.url, app.keys[tenant], timeout_s=60) as client:
            listed = await _turns(client, session)
        assert len(listed) == len(set(listed)), (tenant, session, "a turn stored twice")
        assert acked <= set(listed), (tenant, session, sorted(acked - set(listed))[:10])

    workers = {node for node in timeline.nodes_seen if node != app.head_node}
    assert max(row.api_on_head + row.api_on_workers for row in timeline.rows) >= 2
    assert workers and not any(timeline.nodes_seen[w] for w in workers), timeline.nodes_seen  # joined, and left
    assert _shard_nodes(app.settings) == {app.head_node}  # the layer shards never moved
    assert tally.failed == [], tally.failed
    writes = sum(map(len, tally.acked.values()))
    print(f"scaled up at {up_s:.0f} s, load stopped at {stopped_s:.0f} s, back to one replica on one node at"
          f" {down_s:.0f} s; {tally.ok} requests answered ({writes} turns acknowledged, all read back),"
          f" {len(tally.failed)} failed, {sum(tally.retried.values())} retried")
