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
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from strata.config import StrataSettings
from strata.private_dirs import owner_only_dir as private_dir
from strata.store.milvus_lite import COMMAND as MILVUS_LITE_COMMAND
from strata.store.milvus_lite import TOKEN_FILE as MILVUS_TOKEN_FILE
from strata_actors.ray_auth import use_ray_auth
from strata_cli.haproxy import FAILED_AUTH_LIMIT_ENV

__all__ = [
    "OWNER_ONLY_UMASK",
    "PROXY_TIMEOUT_MARGIN_S",
    "QUIET_PORTS",
    "Stack",
    "StackError",
    "free_ports",
    "make_owner_only",
    "owner_only_dir",
    "processes_naming",
    "ray_client_servers",
    "scratch_milvus",
]


#: Serve's proxy times a request out this much later than the Api's own deadline
#: (``serve.request_timeout_s``), so a slow request gets Strata's 504, not the proxy's
#: plain-text 408 (see :class:`strata_serve.errors.Deadline`).
PROXY_TIMEOUT_MARGIN_S = 10.0
#: Mode bits for what the stack creates: its processes run with this umask.
OWNER_ONLY_UMASK = 0o077
#: The launcher's module, as it appears in the server's command line.
_LAUNCHER = MILVUS_LITE_COMMAND[-1]


class StackError(RuntimeError):
    """Something the user must fix to start or stop the stack; the message says what."""


def _port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie child counts as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def _own_processes() -> Iterator[tuple[int, int, bytes]]:
    """(pid, parent pid, command line) of each of this user's processes but this one."""
    me, uid = os.getpid(), os.getuid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
        yield int(entry.name), parent, cmdline


def processes_naming(marker: str, *, also: Sequence[int] = ()) -> set[int]:
    """This user's processes whose command line names ``marker`` (a path, matched whole: not
    /tmp/x-1 for /tmp/x-10), the live pids in ``also``, and all their descendants (Ray's
    workers and agents rename themselves ``ray::…``, so only their parents name the path)."""
    named = re.compile(re.escape(marker).encode() + rb"(?:/|\x00|$)")
    parents: dict[int, int] = {}
    found = {pid for pid in also if _alive(pid)}
    for pid, parent, cmdline in _own_processes():
        parents[pid] = parent
        if named.search(cmdline):
            found.add(pid)
    while more := {pid for pid, parent in parents.items() if parent in found and pid not in found}:
        found |= more
    return found


def ray_client_servers(gcs_port: int) -> set[int]:
    """This user's Ray client servers of the Ray whose GCS listens on ``gcs_port``.

    ``ray start --head`` starts one (``python -m ray.util.client.server --address=IP:PORT``),
    and ``ray start`` has exited by the time it runs: its command line names no temp dir and
    its parent is no process of that Ray, so :func:`processes_naming` misses it. It was left
    running after every ``strata down`` (about 90 MB each, with a port on the machine's address)."""
    address = re.compile(rb"\x00--address=[^\x00]*:" + str(gcs_port).encode() + rb"\x00")
    return {
        pid
        for pid, _, cmdline in _own_processes()
        if b"\x00ray.util.client.server\x00" in cmdline and address.search(cmdline)
    }


#: What names Ray's GCS server in its command line (``…/ray/core/src/ray/gcs/gcs_server``).
_GCS_SERVER = b"/gcs/gcs_server"


def _stop_processes_naming(marker: str, timeout_s: float = 15.0) -> int:
    """:func:`_stop_processes` of the :func:`processes_naming` ``marker``. (``ray stop`` cannot
    name one cluster: it stops every Ray of the user.)"""
    return _stop_processes(processes_naming(marker), timeout_s)


def _stop_processes(found: set[int], timeout_s: float = 15.0) -> int:
    """SIGTERM ``found``; SIGKILL those still alive after ``timeout_s``. Returns how many there were.

    Ray's GCS server goes last. A raylet, its agents and the autoscaler's monitor leave
    within a second while the GCS answers them; terminated beside it, they waited for it
    until the SIGKILL: ``strata down`` took 22 s, 15 of them here (0.8 s in this order)."""
    gcs = {pid for pid in found if _GCS_SERVER in _cmdline(pid)}
    _terminate(found - gcs, timeout_s)
    _terminate(gcs, timeout_s)
    return len(found)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


def _terminate(pids: set[int], timeout_s: float) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


#: Where the stack's free ports are drawn from: below the kernel's ephemeral range (32768-60999
#: by default), from which every bind to port 0 and every outgoing connection's own end draw,
#: and above Ray's worker ports (10002-19999). A port from the ephemeral range could be taken
#: between its choice and its server's bind: HAProxy binds its stats port a few seconds after
#: `ray start`, and once found it taken by then ("cannot bind socket (Address already in use)").
QUIET_PORTS = range(20000, 30000)


def free_ports(count: int, taken: Sequence[int] = ()) -> list[int]:
    """``count`` distinct ports from :data:`QUIET_PORTS`, free now on every interface and not
    in ``taken``. Every probe stays bound until all are chosen, or one port could be handed
    out twice (seen in CI: two stacks planned before either listened got the same GCS port).

    Raises:
        StackError: fewer than ``count`` of those ports are free.
    """
    probes: list[socket.socket] = []
    ports: list[int] = []
    try:
        for port in random.sample(QUIET_PORTS, len(QUIET_PORTS)):
            if len(ports) == count:
                return ports
            if port in taken:
                continue
            probe = socket.socket()
            probes.append(probe)
            try:
                probe.bind(("", port))
            except OSError:
                continue
            ports.append(port)
        if len(ports) == count:
            return ports
        raise StackError(f"fewer than {count} free ports in {QUIET_PORTS.start}-{QUIET_PORTS.stop - 1}")
    finally:
        for probe in probes:
            probe.close()


def owner_only_dir(path: Path, *, follow_symlinks: bool = True) -> None:
    """:func:`strata.private_dirs.owner_only_dir`, its refusal a :class:`StackError`."""
    try:
        private_dir(path, follow_symlinks=follow_symlinks)
    except PermissionError as exc:
        raise StackError(str(exc)) from None


def make_owner_only(root: Path) -> None:
    """Take group and other bits off everything of this user's under ``root`` (links untouched).

    Ray makes its temporary and session directories 0777 when its head starts, and files
    written before this change were made with the caller's umask.
    """
    me = os.geteuid()
    for top, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = os.path.join(top, name)
            try:
                info = os.lstat(path)
                if info.st_uid == me and not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o077:
                    os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)
            except OSError:  # gone meanwhile
                continue


def _read_stack_json(data_dir: Path) -> dict[str, Any] | None:
    """What ``up`` recorded in the data dir, or None when there is nothing readable."""
    try:
        recorded = json.loads((data_dir / "stack.json").read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def _known_settings(data: dict[str, Any]) -> StrataSettings:
    """``data`` as settings, with the keys no setting of this version names left out (any
    other invalid value still raises)."""
    from pydantic import ValidationError

    try:
        return StrataSettings.from_dict(data)
    except ValidationError as exc:
        errors = exc.errors()
        if not errors or any(e["type"] != "extra_forbidden" for e in errors):
            raise
        kept = copy.deepcopy(data)
        for error in errors:
            *path, name = error["loc"]
            parent: Any = kept
            for part in path:
                parent = parent[part]
            parent.pop(name, None)
        return StrataSettings.from_dict(kept)


def _wait(what: str, check: Callable[[], bool], timeout_s: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise StackError(f"{what} did not come up within {timeout_s:.0f} s{tail}")


def _secret_file(path: Path) -> str:
    """The secret in ``path`` (0600), made on first use."""
    if not path.exists():
        import secrets

        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, 0o600)
    return path.read_text().strip()


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
        recorded = _read_stack_json(data_dir)
        if recorded is None or "settings" not in recorded:
            return None
        return cls(_known_settings(recorded["settings"]), say=say)

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

    def _pidfile(self) -> Path:
        return self.data_dir / "milvus.pid"

    # -- ports ------------------------------------------------------------------

    def plan_ports(self) -> None:
        """Choose the ports of what this stack starts (see the module docstring): explicit
        settings win, then those of the stack running with this data dir (``stack.json``),
        then free ones; HTTP keeps its default 8000 unless another program holds it."""
        recorded = _read_stack_json(self.data_dir) or {}
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
            elif _port_open(s.host, s.port):  # no stack of this data dir runs: another program's port
                s = s.model_copy(update={"port": next(fresh)})
        self.settings = self.settings.model_copy(update={"milvus": m, "ray": r, "serve": s})

    # -- milvus-lite ----------------------------------------------------------

    def _is_our_milvus(self, pid: int) -> bool:
        """Whether ``pid`` runs Strata's launcher on this data dir (a pid in milvus.pid
        may have been reused by any process since)."""
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return _LAUNCHER.encode() in args and str(self.data_dir / "milvus").encode() in args

    def milvus_pid(self) -> int | None:
        """The pid in ``milvus.pid`` if it is alive and provably this data dir's server."""
        try:
            pid = int(self._pidfile().read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) and self._is_our_milvus(pid) else None

    def _use_store_token(self) -> Path:
        """Make (first time) the embedded store's token and put it in the settings, which
        carry it to every client: the actors, ``stack.json`` and what reads it."""
        path = self.data_dir / MILVUS_TOKEN_FILE
        token = _secret_file(path)
        self.settings = self.settings.model_copy(
            update={"milvus": self.settings.milvus.model_copy(update={"token": token})}
        )
        return path

    def ensure_milvus(self, *, require_token: bool = True) -> None:
        """Start the embedded milvus-lite unless it runs. ``require_token=False`` (only for
        :func:`scratch_milvus`): a server that answers anyone on this machine."""
        m = self.settings.milvus
        if m.uri:
            return  # an external Milvus server: not ours to start
        owner_only_dir(self.data_dir)
        token_file = self._use_store_token() if require_token else None
        m = self.settings.milvus
        pid = self.milvus_pid()
        if pid and _port_open(m.host, m.port):
            self.say(f"milvus-lite already running (pid {pid}) on {m.host}:{m.port}")
            return
        if pid:  # ours, but not answering: replace it
            self._stop_pid(pid)
        if _port_open(m.host, m.port):
            raise StackError(
                f"port {m.port} is in use by another process; stop it or set STRATA_MILVUS__PORT"
            )
        logs = self.data_dir / "logs"
        owner_only_dir(logs)
        # Through strata.store.milvus_lite: milvus-lite with its writes serialised per collection,
        # refusing calls without the token (its path, not the token: command lines are public).
        command = [*MILVUS_LITE_COMMAND, "server", "--data-dir", str(self.data_dir / "milvus"), "--host", m.host,
                   "--port", str(m.port)]
        if token_file is not None:
            command += ["--token-file", str(token_file)]
        log = logs / "milvus.log"
        with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                       start_new_session=True, umask=OWNER_ONLY_UMASK)
        _write_private(self._pidfile(), str(process.pid))
        self.say(f"starting milvus-lite (pid {process.pid}) on {m.host}:{m.port}")

        from strata.errors import StoreUnavailable
        from strata.store.milvus import MilvusRecordStore

        probe = MilvusRecordStore(m.address, token=m.token, timeout_s=2)

        def ready() -> bool:
            if process.poll() is not None:
                raise StackError(f"milvus-lite exited with code {process.returncode}; see {log}")
            if not _port_open(m.host, m.port):
                return False
            try:  # the port opens about a second before the server answers
                probe.ping()
                return True
            except StoreUnavailable:
                return False

        _wait("milvus-lite", ready, 60, log)

    def _stop_pid(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

    # -- Ray ------------------------------------------------------------------

    def ray_auth_env(self) -> dict[str, str]:
        """Token authentication for the embedded Ray head, with the token in the data dir.

        Ray 2.60 turns token auth on for ``ray start`` whenever ``~/.ray/auth_token``
        exists, but a driver connecting to that cluster does not send it unless
        told to; setting both explicitly makes every process agree.

        With ``ray.address`` (a cluster started elsewhere): its token from
        ``ray.auth_token_file``, else from RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN in the
        environment; none of these: no token (a cluster without token auth).

        Raises:
            StackError: ``ray.auth_token_file`` is not a readable file.
        """
        r = self.settings.ray
        if r.address:
            if r.auth_token_file is not None:
                path = r.auth_token_file.expanduser().resolve()
                if not os.access(path, os.R_OK) or not path.is_file():
                    raise StackError(f"ray.auth_token_file {path} is not a readable file; give the cluster's token file")
                return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
            for name in ("RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
                if os.environ.get(name):
                    return {"RAY_AUTH_MODE": "token", name: os.environ[name]}
            return {}
        path = self.data_dir / "ray-auth-token"
        _secret_file(path)
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}

    @property
    def ray_temp_dir(self) -> Path:
        """The embedded head's own Ray temp dir: every process of that cluster names it in
        its command line, so ``down`` stops those and no other Ray of the user. Short on
        purpose (Ray's socket paths under it must stay below 107 characters), so under
        /tmp, in a directory of this user's only (another user could make the path
        first: :func:`owner_only_dir` refuses it then)."""
        return Path("/tmp") / f"strata-{os.geteuid()}" / f"ray-{self.settings.ray.gcs_port}"

    @property
    def haproxy_dir(self) -> Path:
        """HAProxy's files (``serve.haproxy``), beside :attr:`ray_temp_dir`: Serve puts each
        under a 56-character node id, and HAProxy takes socket paths of at most 97 characters."""
        return self.ray_temp_dir.with_name(f"h{self.settings.ray.gcs_port}")

    def haproxy_env(self, ports: Sequence[int]) -> dict[str, str]:
        """What Serve's processes read to serve through HAProxy (``serve.haproxy``): every file
        of HAProxy's in an owner-only dir (its admin socket is made ``mode 666``, by default at
        a fixed path under /tmp that any user can make first); its stats, its metrics and
        Serve's fallback proxy (HTTP, gRPC) on ``ports``, four free ones, the first two on
        loopback (``strata-haproxy``); and any of these variables the environment sets left as
        it set them."""
        if not self.settings.serve.haproxy:
            return {}
        files = self.haproxy_dir
        owner_only_dir(files, follow_symlinks=False)
        stats, metrics, fallback_http, fallback_grpc = ports
        wanted = {
            "RAY_SERVE_ENABLE_HA_PROXY": "1",
            "RAY_SERVE_HAPROXY_BINARY_PATH": str(Path(sys.executable).parent / "strata-haproxy"),
            "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(files / "haproxy.cfg"),
            "RAY_SERVE_HAPROXY_SOCKET_PATH": str(files / "admin.sock"),
            "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(files / "metrics.sock"),
            "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(files),
            "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(files / "server-state"),
            "RAY_SERVE_HAPROXY_STATS_PORT": str(stats),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(metrics),
            "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(fallback_http),
            "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(fallback_grpc),
            # An ingress replica that stops (a scale-down, a redeploy, ``down``) keeps serving
            # this long, by default 30 s, for a load balancer elsewhere to stop sending to it;
            # this node's HAProxy is told within a tenth of a second.
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
            # HAProxy turns away an address past the failed authentications the API would
            # answer 401 in 10 s (its burst and 10 s of its rate), counting the API's 429s too.
            FAILED_AUTH_LIMIT_ENV: str(self._door_limit()),
        }
        return {name: os.environ.get(name, value) for name, value in wanted.items()}

    def _door_limit(self) -> int:
        auth = self.settings.auth
        return math.ceil(auth.failed_auth_burst + 10 * auth.failed_auth_per_s) if auth.failed_auth_per_s > 0 else 0

    def ray_running(self) -> bool:
        host, _, port = self.ray_address.rpartition(":")
        return _port_open(host, int(port))

    def ensure_ray(self) -> None:
        import ray

        r = self.settings.ray
        use_ray_auth(self.ray_auth_env())
        if not self.settings.ray.address and not self.ray_running():
            self.say(f"starting Ray head on {self.ray_address}")
            owner_only_dir(self.ray_temp_dir.parent, follow_symlinks=False)
            owner_only_dir(self.ray_temp_dir, follow_symlinks=False)
            # Ray's fixed defaults (10001, 52365, and 8265 for the API server it starts even
            # without the dashboard), and with HAProxy its stats and metrics ports and Serve's
            # fallback proxy (8404, 9101, 8500, 9500), would collide with a second stack's.
            # One call: ports probed apart may come out the same.
            ports = free_ports(7, taken=(r.gcs_port, self.settings.milvus.port, self.settings.serve.port))
            command = [
                str(Path(sys.executable).parent / "ray"), "start", "--head",
                f"--port={r.gcs_port}", "--node-ip-address=127.0.0.1",
                f"--num-cpus={r.num_cpus}", "--include-dashboard=false",
                f"--object-store-memory={r.object_store_memory_mb * 1024 * 1024}",
                "--disable-usage-stats", f"--temp-dir={self.ray_temp_dir}",
                *(f"--{flag}={port}" for flag, port in zip(
                    ("ray-client-server-port", "dashboard-agent-listen-port", "dashboard-port"), ports[:3], strict=True
                )),
            ]
            env = {**os.environ, **self.haproxy_env(ports[3:])}
            if self.settings.serve.throughput_optimized:  # read by Serve's processes, which Ray starts
                env.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
                # ... but not its 1,000-record buffer of request logs, which has no timed flush:
                # at a few requests a minute an operator would see no access log for hours;
                # nor its logs kept off stderr: with them off, the replica's own log lines (the
                # "500 on POST ..." of an unexpected error) reached no log file at all.
                env.setdefault("RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE", "1")
                env.setdefault("RAY_SERVE_LOG_TO_STDERR", "1")
            done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120, env=env,
                                  umask=OWNER_ONLY_UMASK)
            if done.returncode != 0:
                raise StackError("ray start failed:\n" + (done.stderr or done.stdout)[-2000:])
            make_owner_only(self.ray_temp_dir)  # Ray made its session directories 0777
        if not ray.is_initialized():
            ray.init(address=self.ray_address, namespace=r.namespace, logging_level=logging.ERROR, log_to_driver=False)

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
            key = _secret_file(self.data_dir / "pii-hash-key")
            self.settings = self.settings.model_copy(
                update={"pii": self.settings.pii.model_copy(update={"hash_key": key})}
            )
        running = _read_stack_json(self.data_dir)
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
                self._stop_milvus()
            raise

    def _up(self) -> str:
        self.ensure_milvus()
        self.check_vectors()
        self.ensure_ray()
        if self._serve_is_ours() and self._healthy_soon(15):
            # A running app reconnects to a restarted Milvus by itself.
            self.say(f"Strata already answers at {self.url}")
        else:
            if _port_open(self.settings.serve.host, self.settings.serve.port) and not self._serve_is_ours():
                raise StackError(f"port {self.settings.serve.port} is in use by another process; use --port")
            self.say("deploying the Serve application (about 20 s on a 2-core machine)")
            self.deploy()
            try:
                _wait("the Serve application", self.healthy, 180)
            except StackError as exc:
                raise StackError(
                    f"{exc}; its logs are in {self.ray_temp_dir}/session_latest/logs/serve/ "
                    f"(in {self.data_dir}/logs/ray once the stack is stopped)"
                ) from None
        key = self._dev_key()
        # The settings hold secrets (auth.admin_key, pii.hash_key, API keys, the Milvus
        # token) that `strata keys` and `down` read back: owner-only, like the key files.
        _write_private(self.data_dir / "stack.json", json.dumps(
            {"serve_port": self.settings.serve.port, "milvus_port": self.settings.milvus.port,
             "ray_address": self.ray_address, "ray_auth": self.ray_auth_env(),
             "ray_temp_dir": None if self.settings.ray.address else str(self.ray_temp_dir),
             "settings": self.settings.to_dict()}, indent=2))
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
        _write_private(self.key_file, key + "\n")
        return key

    def down(self) -> None:
        """Stop Serve, the layer actors, Ray and milvus-lite; keep the data."""
        self._stop_ray()
        self._stop_milvus()
        (self.data_dir / "stack.json").unlink(missing_ok=True)

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
                for name in names:
                    try:
                        ray.kill(ray.get_actor(name, namespace=self.settings.ray.namespace))
                    except ValueError:
                        pass
                shutdown_ray()
            except Exception as exc:
                self.say(f"Serve shutdown skipped: {type(exc).__name__}: {exc}")
        if not self.settings.ray.address:  # a Ray that never answered may still have started processes
            stopped = _stop_processes(
                processes_naming(str(self.ray_temp_dir)) | ray_client_servers(self.settings.ray.gcs_port)
            )
            stopped += _stop_processes_naming(str(self.haproxy_dir))  # HAProxy, should Serve have left it
            if running or stopped:
                self.say(f"stopped Ray ({stopped} processes)")
            self._keep_ray_logs()

    def _keep_ray_logs(self) -> None:
        """This run's Ray logs into the data dir (``logs/ray``, the last run's), then Ray's
        temporary directory and HAProxy's files removed: each start picks free ports, so each
        run's directories under /tmp/strata-<uid> stayed behind (287 MB after a day of runs)."""
        logs = self.ray_temp_dir / "session_latest" / "logs"
        if logs.is_dir():
            kept = self.data_dir / "logs" / "ray"
            shutil.rmtree(kept, ignore_errors=True)
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(logs.resolve(), kept)
        for runtime in (self.ray_temp_dir, self.haproxy_dir):
            shutil.rmtree(runtime, ignore_errors=True)

    def _stop_milvus(self) -> None:
        pid = self.milvus_pid()
        if pid:
            self._stop_pid(pid)
            self.say(f"stopped milvus-lite (pid {pid})")
        self._pidfile().unlink(missing_ok=True)

    def ensure_ray_client(self) -> None:
        import ray

        use_ray_auth(self.ray_auth_env())
        if not ray.is_initialized():
            ray.init(address=self.ray_address, namespace=self.settings.ray.namespace, logging_level=logging.ERROR, log_to_driver=False)

    def status(self) -> dict[str, str]:
        m = self.settings.milvus
        pid = self.milvus_pid()
        return {
            "milvus": f"running (pid {pid}) on {m.host}:{m.port}" if pid and _port_open(m.host, m.port)
            else ("external " + m.address if m.uri else "not running"),
            "ray": f"running at {self.ray_address}" if self.ray_running() else "not running",
            "serve": f"healthy at {self.url}" if self.healthy() else "not answering",
            "data_dir": str(self.data_dir),
        }


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` owner-only (0600), whatever mode an older file had."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # an older file keeps its mode through O_TRUNC


@contextmanager
def scratch_milvus() -> Iterator[tuple[str, int]]:
    """A milvus-lite server of its own, on a free loopback port with a temporary
    data dir, for benchmarks: yields ``(uri, pid)``; stopped and removed on exit.

    It requires no token (its callers pass none), so any local user can reach it while
    it runs; its data are the benchmark's own, in an owner-only temporary directory."""
    import tempfile

    from strata.config import load_settings

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="strata-milvus-") as tmp:
        stack = Stack(load_settings(None, data_dir=Path(tmp), milvus={"port": port}), say=lambda _: None)
        stack.ensure_milvus(require_token=False)
        pid = stack.milvus_pid()
        assert pid is not None
        try:
            yield stack.settings.milvus.address, pid
        finally:
            stack._stop_pid(pid)
