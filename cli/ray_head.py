"""The embedded Ray head: its temp dir, token auth, HAProxy's files, starting and stopping it.

Every process of the head names its temp dir (``/tmp/strata-<uid>/ray-<gcs port>``) in its
command line, so ``down`` stops those and no other Ray of the user. ``down`` then keeps the
run's Ray logs in the data dir (``logs/ray``) and removes Ray's and HAProxy's temporary
directories.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from strata.config import AuthSettings, StrataSettings
from strata_cli.errors import StackError
from strata_cli.haproxy import FAILED_AUTH_LIMIT_ENV
from strata_cli.ports import free_ports
from strata_cli.private_files import OWNER_ONLY_UMASK, make_owner_only, owner_only_dir, secret_file
from strata_cli.processes import processes_naming, ray_client_servers, stop_processes, stop_processes_naming

__all__ = [
    "auth_env",
    "connect",
    "haproxy_dir",
    "haproxy_env",
    "keep_logs",
    "start_head",
    "stop_head",
    "temp_dir",
]


def temp_dir(settings: StrataSettings) -> Path:
    """The embedded head's own Ray temp dir: every process of that cluster names it in
    its command line, so ``down`` stops those and no other Ray of the user. Short on
    purpose (Ray's socket paths under it must stay below 107 characters), so under
    /tmp, in a directory of this user's only (another user could make the path
    first: :func:`~strata_cli.private_files.owner_only_dir` refuses it then)."""
    return Path("/tmp") / f"strata-{os.geteuid()}" / f"ray-{settings.ray.gcs_port}"  # noqa: S108  owner-only, checked


def haproxy_dir(settings: StrataSettings) -> Path:
    """HAProxy's files (``serve.haproxy``), beside :func:`temp_dir`: Serve puts each
    under a 56-character node id, and HAProxy takes socket paths of at most 97 characters."""
    return temp_dir(settings).with_name(f"h{settings.ray.gcs_port}")


def auth_env(settings: StrataSettings, data_dir: Path) -> dict[str, str]:
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
    r = settings.ray
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
    path = data_dir / "ray-auth-token"
    secret_file(path)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}


def haproxy_env(settings: StrataSettings, ports: Sequence[int]) -> dict[str, str]:
    """What Serve's processes read to serve through HAProxy (``serve.haproxy``): every file
    of HAProxy's in an owner-only dir (its admin socket is made ``mode 666``, by default at
    a fixed path under /tmp that any user can make first); its stats, its metrics and
    Serve's fallback proxy (HTTP, gRPC) on ``ports``, four free ones, the first two on
    loopback (``strata-haproxy``); and any of these variables the environment sets left as
    it set them."""
    if not settings.serve.haproxy:
        return {}
    files = haproxy_dir(settings)
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
        FAILED_AUTH_LIMIT_ENV: str(_door_limit(settings.auth)),
    }
    return {name: os.environ.get(name, value) for name, value in wanted.items()}


def _door_limit(auth: AuthSettings) -> int:
    return math.ceil(auth.failed_auth_burst + 10 * auth.failed_auth_per_s) if auth.failed_auth_per_s > 0 else 0


def start_head(settings: StrataSettings) -> None:
    """``ray start --head`` on ``ray.gcs_port``, in :func:`temp_dir`, every other port of it free.

    Raises:
        StackError: ``ray start`` failed; the message ends with its output.
    """
    r, tmp = settings.ray, temp_dir(settings)
    owner_only_dir(tmp.parent, follow_symlinks=False)
    owner_only_dir(tmp, follow_symlinks=False)
    # Ray's fixed defaults (10001, 52365, and 8265 for the API server it starts even
    # without the dashboard), and with HAProxy its stats and metrics ports and Serve's
    # fallback proxy (8404, 9101, 8500, 9500), would collide with a second stack's.
    # One call: ports probed apart may come out the same.
    ports = free_ports(7, taken=(r.gcs_port, settings.milvus.port, settings.serve.port))
    command = [
        str(Path(sys.executable).parent / "ray"), "start", "--head",
        f"--port={r.gcs_port}", "--node-ip-address=127.0.0.1",
        f"--num-cpus={r.num_cpus}", "--include-dashboard=false",
        f"--object-store-memory={r.object_store_memory_mb * 1024 * 1024}",
        "--disable-usage-stats", f"--temp-dir={tmp}",
        *(f"--{flag}={port}" for flag, port in zip(
            ("ray-client-server-port", "dashboard-agent-listen-port", "dashboard-port"), ports[:3], strict=True
        )),
    ]
    env = {**os.environ, **haproxy_env(settings, ports[3:])}
    if settings.serve.throughput_optimized:  # read by Serve's processes, which Ray starts
        env.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
        # ... but not its 1,000-record buffer of request logs, which has no timed flush:
        # at a few requests a minute an operator would see no access log for hours;
        # nor its logs kept off stderr: with them off, the replica's own log lines (the
        # "500 on POST ..." of an unexpected error) reached no log file at all.
        env.setdefault("RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE", "1")
        env.setdefault("RAY_SERVE_LOG_TO_STDERR", "1")
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120, env=env,  # noqa: S603  our venv's ray, no shell
                          umask=OWNER_ONLY_UMASK)
    if done.returncode != 0:
        raise StackError("ray start failed:\n" + (done.stderr or done.stdout)[-2000:])
    make_owner_only(tmp)  # Ray made its session directories 0777


def connect(settings: StrataSettings, address: str) -> None:
    """This process's Ray driver on ``address``, unless it has one (auth set up beforehand)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, namespace=settings.ray.namespace, logging_level=logging.ERROR,
                 log_to_driver=False)


def stop_head(settings: StrataSettings) -> int:
    """Stop every process of the embedded head (and HAProxy, should Serve have left it); how many there were."""
    stopped = stop_processes(processes_naming(str(temp_dir(settings))) | ray_client_servers(settings.ray.gcs_port))
    return stopped + stop_processes_naming(str(haproxy_dir(settings)))


def keep_logs(settings: StrataSettings, data_dir: Path) -> None:
    """This run's Ray logs into the data dir (``logs/ray``, the last run's), then Ray's
    temporary directory and HAProxy's files removed: each start picks free ports, so each
    run's directories under /tmp/strata-<uid> stayed behind (287 MB after a day of runs)."""
    tmp = temp_dir(settings)
    logs = tmp / "session_latest" / "logs"
    if logs.is_dir():
        kept = data_dir / "logs" / "ray"
        shutil.rmtree(kept, ignore_errors=True)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(logs.resolve(), kept)
    for runtime in (tmp, haproxy_dir(settings)):
        shutil.rmtree(runtime, ignore_errors=True)
