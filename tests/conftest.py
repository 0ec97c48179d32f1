"""The test tiers, and the fixtures the integration and end-to-end tiers share.

Every test is in one tier, by its folder: ``unit`` (no Ray, no Milvus, milliseconds),
``integration`` (real Ray and a real store) and ``e2e`` (the stack as ``strata up`` starts it).
Each tier is a marker (``pytest -m unit``) and the tiers run cheapest first, so a broken change
fails within the first minute. The expensive things start once a session: one local Ray, one
milvus-lite and one Milvus server, shared by the modules that can share them.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from strata.access.audit import close_all_writers
from strata.config import StrataSettings, load_settings
from strata.errors import StoreUnavailable
from strata.store.milvus_lite_process import MilvusLiteProcess, wait_until_answers


def free_port() -> int:
    """A free port outside the kernel's ephemeral range (``strata_cli.ports.QUIET_PORTS``):
    not taken by another process between this choice and the test server's bind."""
    from strata_cli.ports import free_ports

    return free_ports(1)[0]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


@dataclass
class MilvusServer:
    """The embedded store: a milvus-lite server of the module's own."""

    data_dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    #: Which store this is, as the test ids name it.
    kind = "lite"
    token = ""
    _lite: MilvusLiteProcess | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start it (again, on the same data) and wait until it answers."""
        if self._lite is None:
            log = self.data_dir.parent / f"milvus-{self.port}.log"
            self._lite = MilvusLiteProcess(self.data_dir, self.port, log=log)
        self._lite.start()
        self.process = self._lite.process

    def kill(self) -> None:
        """SIGKILL it, as a crash would end it."""
        if self._lite is not None:
            self._lite.kill()


@dataclass
class MilvusStandalone(MilvusServer):
    """A Milvus server: the standalone binary the ``milvus`` package ships (2.3.5), with
    authorization on, so a client without ``token`` is refused as by a deployed server.

    Unlike milvus-lite its reads are not read-your-writes unless asked to be: the store
    Strata must also run on. It starts in 10-60 s, so one serves the whole test session.
    """

    kind = "server"
    token = "root:Milvus"  # the server's first user; authorization on refuses any other
    #: Its embedded etcd listens on these whatever the config says: one server per machine.
    ETCD_PORTS = (2379, 2380)
    _launcher: Any = None
    TIME_TICK_MS = 20

    def start(self) -> None:
        from milvus import MilvusServer as Standalone
        from milvus import MilvusServerConfig

        _wait_until_free(self.ETCD_PORTS, timeout_s=60, what="another Milvus server's embedded etcd")
        server = Standalone(MilvusServerConfig(), wait_for_started=False)
        server.set_base_dir(str(self.data_dir))
        server.config.update(proxy_port=self.port)  # ports are taken from here,
        server.config.set("authorization_enabled", True)  # the other settings from here
        # A strong read waits for the next time tick: 200 ms by default, 20 ms here (a key read
        # then took 22 ms, not 200), so that the suites' cold loads and key reads cost less;
        # docs/storage.md and the bench measure the default.
        server.config.set("proxy.timeTickInterval", self.TIME_TICK_MS)
        server.start()  # unpacks the binary into the data dir, starts it as our child
        self._launcher = server  # kept: it stops the server when it is collected
        self.process = server.server_proc
        try:
            # Its RPC port answers before its coordinators do ("find no available rootcoord"):
            # ready is what its health endpoint says.
            _wait_healthy(f"http://127.0.0.1:{server.webservice_port}/healthz", self.process, timeout_s=180)
            wait_until_answers("127.0.0.1", self.port, process=self.process, token=self.token, timeout_s=30)
        except (RuntimeError, TimeoutError, StoreUnavailable):
            log = self.data_dir / "logs" / "milvus-stderr.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            self.kill()
            raise RuntimeError(f"the Milvus server did not start; {log}:\n{tail}") from None

    def kill(self) -> None:
        # Its graceful stop takes minutes and its data are thrown away: SIGKILL at once (a
        # SIGTERM and 10 s of grace never saw it leave, and cost the session's end 10 s).
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _wait_healthy(url: str, process: subprocess.Popen[bytes] | None, *, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}")
        with suppress(httpx.HTTPError):
            if b"OK" in httpx.get(url, timeout=2).content:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not OK after {timeout_s:.0f} s")
        time.sleep(0.5)


def _wait_until_free(ports: tuple[int, ...], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while busy := [p for p in ports if port_open(p)]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"127.0.0.1:{busy} still taken by {what} after {timeout_s:.0f} s")
        time.sleep(0.5)


#: The stores a module's tests run against, unless the module names its own in ``STORES``.
DEFAULT_STORES = ("lite",)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stores(*kinds): the stores this test runs on, instead of its module's STORES")


#: The tiers, cheapest first: each is a folder of tests/ and a marker (pyproject.toml).
#: ``real_llm`` runs only when ``-m`` names it (it serves a real model: minutes, and a build).
TIERS = ("unit", "integration", "e2e", "real_llm")
TESTS = Path(__file__).resolve().parent


def tier_of(path: Path) -> str | None:
    """The tier of the test module at ``path``: the tests/ folder it is in, if it is a tier's."""
    try:
        folder = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return folder if folder in TIERS else None


class _OutsideTheTiers(pytest.Module):
    """A test module in no tier's folder: an error at collection, not a test without a tier."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        raise self.CollectError(f"{self.path}: a test module belongs in one of tests/{{{','.join(TIERS)}}}/")


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    if tier_of(module_path) is None:
        return _OutsideTheTiers.from_parent(parent, path=module_path)
    return None


def _fixture_names(item: pytest.Item) -> list[str]:
    """The fixtures a test uses; an item that is not a Python test function has none."""
    return item.fixturenames if isinstance(item, pytest.Function) else []


#: The session fixtures that must run once per machine, or cost a stack start: every test that
#: uses one runs on the same pytest-xdist worker (:func:`worker_group`).
_ONCE_PER_RUN = {
    "milvus_server": "milvus-server",  # its embedded etcd's ports are fixed: one server per machine
    "agents_stack": "agents-stack",  # ~40 s to start and stop
}


@cache
def _session_fixtures_of(module: str) -> frozenset[str]:
    """The fixtures of :data:`_ONCE_PER_RUN` a test module's source names."""
    path = TESTS.parent / module
    source = path.read_text() if path.is_file() else ""
    return frozenset(name for name in _ONCE_PER_RUN if name in source)


def worker_group(nodeid: str) -> str:
    """The tests one pytest-xdist worker runs together, by test id: a module's (its
    module-scoped fixtures start once), or a session fixture's that must not run twice or costs
    a stack start. The ``[server]`` tests of every module share the one Milvus server."""
    module, _, name = nodeid.partition("::")
    if tier_of(TESTS.parent / module) == "unit":
        return module  # no Milvus server and no stack, whatever its parameters are called
    params = name[name.find("[") + 1:].rstrip("]").split("-") if "[" in name else []
    if "server" in params:
        return _ONCE_PER_RUN["milvus_server"]
    for fixture in sorted(_session_fixtures_of(module)):
        return _ONCE_PER_RUN[fixture]
    return module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n N``: each worker takes whole :func:`worker_group` groups, the largest first (xdist's
    own ``--dist loadgroup`` reads marks it attaches to ``item._nodeid``, which pytest 9.2 no
    longer reads: pyproject.toml)."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class WorkerGroups(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None  # an explicit --dist of xdist's own
    config.option.loadscopereorder = False  # the groups come in the order the workers collected them
    return WorkerGroups(config, log)


#: A test's expected seconds by tier, and a group's start (its stack or server), for handing the
#: longest groups out first when several workers run (from a run's ``--durations``: docs/benchmarks.md).
_SECONDS_A_TEST = {"unit": 0.03, "integration": 6.0, "e2e": 5.0}
_SECONDS_TO_START = {"milvus-server": 60.0, "agents-stack": 40.0}


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark every test with its folder's tier as it is collected: before ``-m`` selects and any
    plugin's ``pytest_collection_modifyitems`` reads the marks."""
    if tier := tier_of(item.path):
        item.add_marker(tier)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Run the tiers cheapest first, and within them spend as little CPU on idle services as
    the order allows (two cores are what the run is short of):

    - in the integration tier, the modules on the session's shared Ray first (the modules that
      start a cluster of their own stop it, :func:`leave_shared_ray`), so it starts once;
    - then every test of the Milvus server, together, so that it runs only that long
      (:class:`_ServerTests` stops it after the last; idle, it takes half a core);
    - in the e2e tier, the modules with a stack of their own first and the shared stack's last,
      since that stack (a session fixture) stops at the session's end."""
    yield  # pytest orders each module's tests by their parameters (milvus: lite, server)
    if "real_llm" not in (config.option.markexpr or ""):
        opt_in = [item for item in items if tier_of(item.path) == "real_llm"]
        if opt_in:
            config.hook.pytest_deselected(items=opt_in)
            items[:] = [item for item in items if tier_of(item.path) != "real_llm"]
    shared_ray_modules = {item.path for item in items if "ray_local" in _fixture_names(item)}

    def rank(item: pytest.Item) -> tuple[int, int, int]:
        tier = TIERS.index(tier_of(item.path) or "e2e")
        group = worker_group(item.nodeid)
        on_shared_ray = item.path in shared_ray_modules
        if group == _ONCE_PER_RUN["milvus_server"]:
            return (1, 1, 2 if tier == 2 else 0 if on_shared_ray else 1)
        if tier == 1:
            return (1, 0, 0 if on_shared_ray else 1)
        if tier == 2:
            return (2, 0, group == _ONCE_PER_RUN["agents_stack"])
        return (tier, 0, 0)

    items.sort(key=rank)  # stable: modules and tests keep their order within a rank
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Several workers: the unit tier first (a broken change still fails within a minute),
        # then the longest groups first, so that none starts last and runs alone. Every worker
        # collects the same items and sorts them the same way.
        groups = [worker_group(item.nodeid) for item in items]
        cost: dict[str, float] = {}
        for item, group in zip(items, groups, strict=True):
            cost[group] = cost.get(group, _SECONDS_TO_START.get(group, 0.0)) + _SECONDS_A_TEST.get(
                tier_of(item.path) or "", 1.0)
        unit = {group for item, group in zip(items, groups, strict=True) if tier_of(item.path) == "unit"}
        ranked = sorted(cost, key=lambda g: (g not in unit, -cost[g]))
        order = {group: rank for rank, group in enumerate(ranked)}
        items[:] = [item for _, item in sorted(zip(groups, items, strict=True), key=lambda gi: order[gi[0]])]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module with ``STORES = ("lite", "server")`` runs each test on milvus-lite and on a
    Milvus server (ids ``[lite]`` and ``[server]``); ``@pytest.mark.stores("lite")`` keeps one
    test of such a module on milvus-lite (what it checks does not depend on the store)."""
    if "milvus" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("stores")
        stores = marker.args if marker else getattr(metafunc.module, "STORES", DEFAULT_STORES)
        metafunc.parametrize("milvus", stores, indirect=True, scope="module")


class _ServerTests:
    """The Milvus server's tests this process has still to run (:func:`worker_group`), and the
    server while it runs: it is stopped after the last of them, not at the session's end. Idle,
    with its 20 ms time tick, it takes about half a core, which the rest of the run needs."""

    left = 0
    server: MilvusStandalone | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    _ServerTests.left = sum(worker_group(item.nodeid) == _ONCE_PER_RUN["milvus_server"] for item in session.items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield  # the test's fixtures are torn down (a module's last test: the module's too)
    if worker_group(item.nodeid) == _ONCE_PER_RUN["milvus_server"]:
        _ServerTests.left -= 1
        if _ServerTests.left <= 0 and _ServerTests.server is not None:
            _ServerTests.server.kill()


@pytest.fixture(scope="session")
def milvus_server() -> Iterator[MilvusStandalone]:
    """One Milvus server for the session's ``[server]`` tests, on a free port in a temp dir of
    its own; stopped after the last of them (:class:`_ServerTests`)."""
    with tempfile.TemporaryDirectory(prefix="strata-milvus-server-") as root:
        server = MilvusStandalone(Path(root), free_port())
        try:
            server.start()
            _ServerTests.server = server
            yield server
        finally:
            server.kill()
            _ServerTests.server = None


@pytest.fixture(scope="session")
def milvus_lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    """One milvus-lite for the session's modules: each test's settings name collections of
    their own (:func:`settings_for`), so modules do not see each other's rows."""
    server = MilvusServer(tmp_path_factory.mktemp("milvus") / "data", free_port())
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def milvus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    """The module's store: the session's milvus-lite, or the session's Milvus server for the
    ``[server]`` tests of a module that names it in ``STORES``. A module that stops and starts
    its milvus-lite, or reads its files, says ``OWN_MILVUS = True`` and has one of its own."""
    if getattr(request, "param", "lite") == "server":
        yield request.getfixturevalue("milvus_server")
    elif getattr(request.module, "OWN_MILVUS", False):
        server = MilvusServer(tmp_path_factory.mktemp("milvus") / "data", free_port())
        server.start()
        yield server
        close_all_writers()
        server.kill()
        return
    else:
        shared: MilvusServer = request.getfixturevalue("milvus_lite")
        if shared.process is not None and shared.process.poll() is not None:
            shared.start()  # a module stopped it and failed before starting it again
        yield shared
    close_all_writers()  # the module's audit entries, while their store is up (not at exit)


def milvus_settings(milvus: MilvusServer) -> dict[str, Any]:
    """The ``milvus`` settings that reach the test's store: the embedded one by port, a
    server by URI and token."""
    if milvus.kind == "server":
        return {"uri": milvus.uri, "token": milvus.token}
    return {"port": milvus.port}


def settings_for(milvus: MilvusServer, **overrides: Any) -> StrataSettings:
    """Settings pointing at the test's Milvus, with collections of their own."""
    base: dict[str, Any] = {
        "milvus": {**milvus_settings(milvus), "collection_prefix": "t" + uuid.uuid4().hex[:10], "timeout_s": 3.0},
        "ray": {"namespace": "test-" + uuid.uuid4().hex[:8]},
    }
    for key, value in overrides.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return load_settings(None, **base)


class _SharedRay:
    """Whether this process is connected to the session's local Ray (:func:`ray_local`)."""

    running = False


def _start_local_ray() -> None:
    import ray

    from strata_actors.router import shutdown_ray

    # address="local": a fresh instance even when a `strata up` head runs on this machine.
    for attempt in range(3):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=256 * 1024 * 1024,
                     logging_level=logging.ERROR, log_to_driver=False)
            return
        except Exception as exc:
            # Seen on clean-clone runs right after another module stopped its Ray: the new
            # GCS did not write its port file in time ("Timed out waiting for file"), or the
            # node "timed out during startup". A second start worked.
            if "timed out" not in str(exc).lower() or attempt == 2:
                raise
            shutdown_ray()
            time.sleep(3)


def _kill_named_actors() -> None:
    """Every named actor, in every namespace: the layer shards and limits actors are detached
    and would otherwise outlive their module (~200 MB of memory each)."""
    import ray

    for actor in ray.util.list_named_actors(all_namespaces=True):
        with suppress(ValueError):  # gone meanwhile
            ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]))


def leave_shared_ray() -> None:
    """Stop the session's local Ray if it runs, for a module that starts a cluster of its own
    or joins a stack's (``ray.init`` twice in one process is refused); the next module that
    asks for :func:`ray_local` starts it again."""
    import ray

    from strata_actors.router import shutdown_ray

    if _SharedRay.running and ray.is_initialized():
        shutdown_ray()
    _SharedRay.running = False


@pytest.fixture(scope="session")
def _ray_session() -> Iterator[None]:
    yield
    leave_shared_ray()


@pytest.fixture(scope="module")
def ray_local(_ray_session: None) -> Iterator[None]:
    """This process on the session's local Ray (2 CPUs): one start for every module that can
    share it (each test's settings name a Ray namespace of their own, :func:`settings_for`).
    The module's named actors are killed when it ends, so the next module starts clean."""
    import ray

    from strata_actors.router import shutdown_ray

    if not (_SharedRay.running and ray.is_initialized()):
        if ray.is_initialized():
            shutdown_ray()  # a connection left by a module that joined a cluster of its own
        _start_local_ray()
        _SharedRay.running = True
    yield
    if ray.is_initialized():
        _kill_named_actors()


RAY_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _set_ray_auth(env: dict[str, str | None]) -> None:
    """Set Ray's auth variables in this process and have Ray read them again."""
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextmanager
def ray_token_auth(token_file: Path) -> Iterator[dict[str, str]]:
    """This process in Ray's token auth mode with the token in ``token_file`` (made, 0600,
    if missing), as cluster.yaml sets every node up; yields the variables that say so, for
    the processes it starts. Restored on exit."""
    if not token_file.exists():
        token_file.write_text(secrets.token_hex(32))
    token_file.chmod(0o600)
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    before = {name: os.environ.get(name) for name in RAY_AUTH_ENV}
    _set_ray_auth({**env, "RAY_AUTH_TOKEN": None})
    try:
        yield env
    finally:
        _set_ray_auth(before)
