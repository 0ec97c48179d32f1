"""The embedded stack on one machine: milvus-lite server, Ray head, Serve app.

Everything binds to 127.0.0.1. State of a running stack lives in the data
directory: ``milvus.pid``, ``stack.json`` (the settings it runs with),
``dev-api-key``, ``milvus-token``, ``ray-auth-token`` and ``logs/``. Each step
checks what already runs, so ``up`` twice, or after a crash, reuses or replaces
what it finds instead of hanging.

Who can reach what: milvus-lite answers only calls that carry the data dir's
``milvus-token`` (:mod:`strata.store.milvus_lite`), Ray only its ``ray-auth-token``,
and the data dir and Ray's temporary directory (``/tmp/strata-<uid>/ray-<port>``) are
owner-only: directories 0700, files 0600, and a directory of another user is refused.
``down`` moves that run's Ray logs into ``logs/ray`` and removes Ray's and HAProxy's
temporary directories.

Ports: each data dir's stack picks free ones for milvus-lite and Ray's GCS on its
first start, and serves HTTP on ``serve.port`` (8000), or on a free port when that
default is taken by another program. They are recorded in ``stack.json`` and reused
while the stack runs; ports set explicitly (settings, ``STRATA_...``, ``--port``) win.

This module composes the parts, each in a module of its own: :mod:`~strata_cli.milvus_server`,
:mod:`~strata_cli.ray_head`, :mod:`~strata_cli.processes`, :mod:`~strata_cli.ports`,
:mod:`~strata_cli.private_files` and :mod:`~strata_cli.stack_file`; ``strata status`` is
:mod:`~strata_cli.status`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from strata.config import StrataSettings
from strata.store.milvus_lite import TOKEN_FILE as MILVUS_TOKEN_FILE
from strata_actors.ray_auth import use_ray_auth
from strata_cli import ray_head
from strata_cli.errors import StackError
from strata_cli.milvus_server import milvus_pid, start_milvus, stop_milvus
from strata_cli.ports import free_ports, port_open
from strata_cli.private_files import make_owner_only, owner_only_dir, secret_file, write_private
from strata_cli.processes import processes_naming, wait_until
from strata_cli.stack_file import STACK_FILE, known_settings, read_stack_file, write_stack_file

__all__ = ["PROXY_TIMEOUT_MARGIN_S", "Stack"]


#: Serve's proxy times a request out this much later than the Api's own deadline
#: (``serve.request_timeout_s``), so a slow request gets Strata's 504, not the proxy's
#: plain-text 408 (see :class:`strata_serve.guards.Deadline`).
PROXY_TIMEOUT_MARGIN_S = 10.0


@dataclass
class Stack:
    settings: StrataSettings
    say: Callable[[str], None] = print

    def __post_init__(self) -> None:
        # Resolved once, so stack.json and the actors agree on one absolute path.
        self.settings = self.settings.model_copy(update={"data_dir": self.settings.data_dir.resolve()})

    @classmethod
    def recorded(cls, data_dir: Path, *, say: Callable[[str], None] = print) -> Stack | None:
        """The stack that ``up`` last started with this data dir, with its settings. Settings
        this version does not know (recorded by another version of Strata) are left out:
        ``down`` must still find and stop what that ``up`` started."""
        recorded = read_stack_file(data_dir)
        if recorded is None or "settings" not in recorded:
            return None
        return cls(known_settings(recorded["settings"]), say=say)

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir.resolve()

    @property
    def url(self) -> str:
        return f"http://{self.settings.serve.host}:{self.settings.serve.port}"

    @property
    def ray_address(self) -> str:
        return self.settings.ray.address or f"127.0.0.1:{self.settings.ray.gcs_port}"

    @property
    def key_file(self) -> Path:
        return self.data_dir / "dev-api-key"

    def processes(self) -> list[int]:
        """The pids of the embedded stack (the Ray head's, found by its temp dir in their command
        lines, their children, and milvus-lite), as ``down`` finds them; sorted."""
        milvus = self.milvus_pid()
        return sorted(processes_naming(str(self.ray_temp_dir), also=[milvus] if milvus else []))

    # -- ports ------------------------------------------------------------------

    def plan_ports(self) -> None:
        """Choose the ports of what this stack starts (see the module docstring): explicit
        settings win, then those of the stack running with this data dir (``stack.json``),
        then free ones; HTTP keeps its default 8000 unless another program holds it."""
        recorded = read_stack_file(self.data_dir) or {}
        before: StrataSettings | None = None
        if isinstance(recorded.get("settings"), dict):
            try:
                before = StrataSettings.from_dict(recorded["settings"])
            except ValueError:  # written by another version: start afresh
                before = None
        m, r, s = self.settings.milvus, self.settings.ray, self.settings.serve
        fresh = iter(free_ports(3, taken=(m.port, r.gcs_port, s.port)))
        if not m.uri and "port" not in m.model_fields_set:
            m = m.model_copy(update={"port": before.milvus.port if before else next(fresh)})
        if not r.address and "gcs_port" not in r.model_fields_set:
            r = r.model_copy(update={"gcs_port": before.ray.gcs_port if before else next(fresh)})
        if "port" not in s.model_fields_set:
            if isinstance(recorded.get("serve_port"), int):
                s = s.model_copy(update={"port": recorded["serve_port"]})
            elif port_open(s.host, s.port):  # no stack of this data dir runs: another program's port
                s = s.model_copy(update={"port": next(fresh)})
        self.settings = self.settings.model_copy(update={"milvus": m, "ray": r, "serve": s})

    # -- milvus-lite ----------------------------------------------------------

    def milvus_pid(self) -> int | None:
        """The pid in ``milvus.pid`` if it is alive and provably this data dir's server."""
        return milvus_pid(self.data_dir)

    def _use_store_token(self) -> Path:
        """Make (first time) the embedded store's token and put it in the settings, which
        carry it to every client: the actors, ``stack.json`` and what reads it."""
        path = self.data_dir / MILVUS_TOKEN_FILE
        token = secret_file(path)
        self.settings = self.settings.model_copy(
            update={"milvus": self.settings.milvus.model_copy(update={"token": token})}
        )
        return path

    def ensure_milvus(self) -> None:
        """Start the embedded milvus-lite unless it runs (with the data dir's token)."""
        if self.settings.milvus.uri:
            return  # an external Milvus server: not ours to start
        owner_only_dir(self.data_dir)
        token_file = self._use_store_token()
        start_milvus(self.data_dir, self.settings.milvus, token_file=token_file, say=self.say)

    # -- Ray ------------------------------------------------------------------

    def ray_auth_env(self) -> dict[str, str]:
        """:func:`strata_cli.ray_head.auth_env` of this stack."""
        return ray_head.auth_env(self.settings, self.data_dir)

    @property
    def ray_temp_dir(self) -> Path:
        """:func:`strata_cli.ray_head.temp_dir` of this stack."""
        return ray_head.temp_dir(self.settings)

    @property
    def haproxy_dir(self) -> Path:
        """:func:`strata_cli.ray_head.haproxy_dir` of this stack."""
        return ray_head.haproxy_dir(self.settings)

    def haproxy_env(self, ports: Sequence[int]) -> dict[str, str]:
        """:func:`strata_cli.ray_head.haproxy_env` of this stack."""
        return ray_head.haproxy_env(self.settings, ports)

    def ray_running(self) -> bool:
        host, _, port = self.ray_address.rpartition(":")
        return port_open(host, int(port))

    def ensure_ray(self) -> None:
        use_ray_auth(self.ray_auth_env())
        if not self.settings.ray.address and not self.ray_running():
            self.say(f"starting Ray head on {self.ray_address}")
            ray_head.start_head(self.settings)
        ray_head.connect(self.settings, self.ray_address)

    def ensure_ray_client(self) -> None:
        use_ray_auth(self.ray_auth_env())
        ray_head.connect(self.settings, self.ray_address)

    # -- Serve ----------------------------------------------------------------

    def healthy(self, timeout_s: float = 5.0) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def deploy(self) -> None:
        from ray import serve
        from ray.exceptions import RayError

        from strata_serve.app import APP_NAME, build_app

        s = self.settings.serve
        options = {"host": s.host, "port": s.port, "request_timeout_s": s.request_timeout_s + PROXY_TIMEOUT_MARGIN_S}
        for attempt in (1, 2):
            try:
                serve.start(http_options=options)
                serve.run(build_app({"settings": self.settings.to_dict()}), name=APP_NAME, route_prefix="/",
                          blocking=False)
                return
            except RayError as exc:
                # Seen on a loaded 2-core machine: Serve's controller killed its own proxy
                # before it started (ActorDiedError). Once more; then a message, not a traceback.
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                if attempt == 2:
                    raise StackError(
                        f"Ray Serve did not start ({type(exc).__name__}: {first}); Serve's logs are in "
                        f"{self.ray_temp_dir}/session_latest/logs/serve (in {self.data_dir}/logs/ray once the "
                        "stack is stopped). Run the command again (the rest of the "
                        "stack is up); on a busy machine, wait for the load to drop"
                    ) from exc
                self.say(f"Ray Serve did not start ({type(exc).__name__}); trying once more")

    # -- the whole stack --------------------------------------------------------

    def up(self) -> str:
        """Start what is not running; return the development API key.

        Raises:
            StackError: a port or directory is another program's or user's; the message says which.
        """
        owner_only_dir(self.data_dir)
        make_owner_only(self.data_dir)  # what an older version left readable
        self.plan_ports()
        if self.settings.pii.hash_key is None:
            # The pseudonyms' secret: the same for the life of the data, never in the config.
            key = secret_file(self.data_dir / "pii-hash-key")
            self.settings = self.settings.model_copy(
                update={"pii": self.settings.pii.model_copy(update={"hash_key": key})}
            )
        running = read_stack_file(self.data_dir)
        if running and running.get("serve_port") != self.settings.serve.port and self.healthy_at(running):
            raise StackError(
                f"a stack with this data dir already serves on port {running['serve_port']}; "
                "run `strata down` first to move it"
            )
        # What this call starts, it stops again should a later step fail: a failed `up` leaves
        # no Ray or milvus-lite behind that `down` could not find (stack.json is written last).
        started_ray = not self.settings.ray.address and not self.ray_running()
        started_milvus = not self.settings.milvus.uri and self.milvus_pid() is None
        try:
            return self._up()
        except BaseException:
            if started_ray:
                self._stop_ray()
            if started_milvus:
                stop_milvus(self.data_dir, self.say)
            raise

    def _up(self) -> str:
        self.ensure_milvus()
        self.check_vectors()
        self.ensure_ray()
        if self._serve_is_ours() and self._healthy_soon(15):
            # A running app reconnects to a restarted Milvus by itself.
            self.say(f"Strata already answers at {self.url}")
        else:
            if port_open(self.settings.serve.host, self.settings.serve.port) and not self._serve_is_ours():
                raise StackError(f"port {self.settings.serve.port} is in use by another process; use --port")
            self.say("deploying the Serve application (about 20 s on a 2-core machine)")
            self.deploy()
            try:
                wait_until("the Serve application", self.healthy, 180)
            except StackError as exc:
                raise StackError(
                    f"{exc}; its logs are in {self.ray_temp_dir}/session_latest/logs/serve/ "
                    f"(in {self.data_dir}/logs/ray once the stack is stopped)"
                ) from None
        key = self._dev_key()
        # The settings hold secrets (auth.admin_key, pii.hash_key, API keys, the Milvus
        # token) that `strata keys` and `down` read back: owner-only, like the key files.
        write_stack_file(self.data_dir, {
            "serve_port": self.settings.serve.port, "milvus_port": self.settings.milvus.port,
            "ray_address": self.ray_address, "ray_auth": self.ray_auth_env(),
            "ray_temp_dir": None if self.settings.ray.address else str(self.ray_temp_dir),
            "settings": self.settings.to_dict()})
        if not self.settings.ray.address:
            make_owner_only(self.ray_temp_dir)  # Serve's files, in case a process ran with a wider umask
        return key

    def _healthy_soon(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            time.sleep(0.5)
        return False

    def healthy_at(self, recorded: dict[str, Any]) -> bool:
        try:
            url = f"http://{self.settings.serve.host}:{recorded['serve_port']}/healthz"
            return httpx.get(url, timeout=3).status_code == 200
        except (httpx.HTTPError, KeyError):
            return False

    def _serve_is_ours(self) -> bool:
        """Strata answers on the port, and it is this stack's Ray that runs the app (another
        data dir's Strata may answer there too)."""
        try:
            content_type: str = httpx.get(self.url + "/healthz", timeout=3).headers.get("content-type", "")
        except httpx.HTTPError:
            return False
        if not content_type.startswith("application/json"):
            return False
        import ray

        if not ray.is_initialized():
            return False
        from ray import serve

        from strata_serve.app import APP_NAME

        try:
            return APP_NAME in serve.status().applications
        except Exception:
            return False

    def check_vectors(self) -> None:
        """Refuse to start on vectors another embedder made: said here, not by an unhealthy deploy.

        Raises:
            StackError: the store's vectors were made by another model; the message says what to run.
        """
        from strata.errors import VectorModelMismatch
        from strata.store.layout import open_store
        from strata.store.vector_models import VectorModel, check_collection

        store, names = open_store(self.settings)
        for collection in (names.episodic, names.semantic, names.procedural):
            try:
                check_collection(store, names.state, collection, VectorModel.of(self.settings.embedding))
            except VectorModelMismatch as exc:
                raise StackError(exc.message) from None

    def _dev_key(self) -> str:
        from strata.access.keys import open_keys
        from strata.store.layout import open_store

        store, names = open_store(self.settings)
        keys = open_keys(store, names)
        if self.key_file.exists():
            key = self.key_file.read_text().strip()
            if keys.tenant_of(key) == "demo":
                return key
        key = keys.create("demo")
        write_private(self.key_file, key + "\n")
        return key

    def down(self) -> None:
        """Stop Serve, the layer actors, Ray and milvus-lite; keep the data."""
        self._stop_ray()
        stop_milvus(self.data_dir, self.say)
        (self.data_dir / STACK_FILE).unlink(missing_ok=True)

    def _stop_ray(self) -> None:
        """Serve, the layer actors, and the Ray this stack started (a cluster's Ray stays up)."""
        running = self.ray_running()
        if running:
            try:
                import ray
                from ray import serve

                from strata_actors.limits import limits_actor_name
                from strata_actors.router import LAYER_CLASSES, actor_name, shutdown_ray

                self.ensure_ray_client()
                serve.shutdown()  # type: ignore[no-untyped-call]  # Ray Serve leaves it unannotated
                names = [
                    actor_name(layer, shard)
                    for layer in LAYER_CLASSES
                    for shard in range(int(getattr(self.settings.actors, f"{layer}_shards")))
                ]
                # The API replicas' shared rate limits and claims (made by the first replica that asks).
                names += [limits_actor_name(shard) for shard in range(self.settings.auth.limit_shards)]
                # Shards a `strata scale` started past the settings' counts, and the directory.
                names += [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                          if a["namespace"] == self.settings.ray.namespace and a["name"].startswith("strata-")]
                names = list(dict.fromkeys(names))
                for name in names:
                    with contextlib.suppress(ValueError):  # not made, or gone already
                        ray.kill(ray.get_actor(name, namespace=self.settings.ray.namespace))
                shutdown_ray()
            except Exception as exc:
                self.say(f"Serve shutdown skipped: {type(exc).__name__}: {exc}")
        if not self.settings.ray.address:  # a Ray that never answered may still have started processes
            stopped = ray_head.stop_head(self.settings)
            if running or stopped:
                self.say(f"stopped Ray ({stopped} processes)")
            ray_head.keep_logs(self.settings, self.data_dir)

