"""A Ray cluster on this machine whose autoscaler adds and removes worker nodes: Ray's fake
multi-node provider, as ``ray.cluster_utils.AutoscalingCluster`` starts it, without what
makes that class unfit for a shared machine.

``AutoscalingCluster.start()`` and ``shutdown()`` run ``ray stop --force``, which kills every
Ray of the user (another test module's, a developer's ``strata up`` stack); it binds Ray's
fixed default ports (GCS 6379, client server 10001, API server 8265), so a second cluster
cannot start beside it; and it reads its config template from
``fake_multi_node/example.yaml``, which Ray 2.60's wheel does not ship. Here the head starts
on free ports with a temp dir of its own, and :meth:`LocalAutoscalingCluster.shutdown` stops
the processes that name that dir (worker nodes included: the autoscaler starts them as its
children, in the head's temp dir) and nothing else.

The cluster runs with Ray's token authentication, as ``cluster.yaml`` starts one; so must the
driver that joins it (:func:`tests.conftest.ray_token_auth`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_cli.ports import free_ports
from strata_cli.processes import processes_naming

__all__ = ["LocalAutoscalingCluster", "WorkerType", "joined_cluster"]

#: The fake provider's name for the head's node type (``FAKE_HEAD_NODE_TYPE``).
_HEAD_NODE_TYPE = "ray.head.default"
#: Ray's floor is ~75 MiB; nothing here puts large objects in the store.
OBJECT_STORE_BYTES = 78 * 1024 * 1024


@dataclass(frozen=True)
class WorkerType:
    """The one worker node type the autoscaler may launch."""

    name: str = "cpu_worker"
    cpus: int = 1
    max_workers: int = 1


class LocalAutoscalingCluster:
    """A head of ``head_cpus`` CPUs and up to ``worker.max_workers`` workers of ``worker.cpus``,
    launched when tasks or actors wait for resources and removed after ``idle_timeout_s``
    without any in use.

    Args:
        env: variables for every process of the cluster (Ray's auth mode, say).
    """

    def __init__(
        self, *, head_cpus: int, worker: WorkerType, idle_timeout_s: float, env: dict[str, str] | None = None
    ) -> None:
        self.head_cpus = head_cpus
        self.worker = worker
        self.idle_timeout_s = idle_timeout_s
        self._env = dict(env or {})
        # Short, and of its own: every process of the cluster names it (Ray's socket paths
        # under it must stay below 107 characters).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-as-", dir="/tmp"))
        self.gcs_port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    def _autoscaling_config(self) -> dict[str, Any]:
        """``fake_multi_node/example.yaml`` of Ray's repository, with these node types."""
        w = self.worker
        return {
            "cluster_name": "strata-autoscaling-test",
            "max_workers": w.max_workers,
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": self.idle_timeout_s / 60,
            "provider": {
                "type": "fake_multinode",
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
                # Else the provider joins new nodes to port 6379 of this machine's address.
                "gcs_address": self.address,
            },
            "available_node_types": {
                _HEAD_NODE_TYPE: {"resources": {"CPU": self.head_cpus}, "node_config": {}, "max_workers": 0},
                w.name: {
                    "resources": {"CPU": w.cpus, "object_store_memory": OBJECT_STORE_BYTES},
                    "node_config": {},
                    "min_workers": 0,
                    "max_workers": w.max_workers,
                },
            },
            "head_node_type": _HEAD_NODE_TYPE,
            "auth": {},
            "docker": {},
            "file_mounts": {},
            "cluster_synced_files": [],
            "file_mounts_sync_continuously": False,
            "rsync_exclude": [],
            "rsync_filter": [],
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
        }

    def start(self) -> None:
        """Start the head and its autoscaler (``ray start --head``, as AutoscalingCluster does,
        minus ``ray stop``). :meth:`shutdown` stops what it started, even if it raised.

        Raises:
            RuntimeError: ``ray start`` failed; its output says why.
        """
        config = self.temp_dir / "autoscaling.json"
        for attempt in (1, 2):
            gcs, client, dashboard, agent = free_ports(4)
            self.gcs_port = gcs
            config.write_text(json.dumps(self._autoscaling_config()))
            command = [
                str(Path(sys.executable).parent / "ray"), "start", "--head", f"--port={gcs}",
                "--node-ip-address=127.0.0.1", f"--num-cpus={self.head_cpus}", "--include-dashboard=false",
                f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats", f"--temp-dir={self.temp_dir}",
                f"--autoscaling-config={config}",
                # Ray's fixed defaults (10001, 8265, 52365) would collide with another cluster's;
                # its API server starts even without the dashboard.
                f"--ray-client-server-port={client}", f"--dashboard-port={dashboard}",
                f"--dashboard-agent-listen-port={agent}",
            ]
            # The fake provider refuses to run without RAY_FAKE_CLUSTER; the autoscaler looks at
            # the cluster every AUTOSCALER_UPDATE_INTERVAL_S (5 s by default).
            env = {**os.environ, **self._env, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, check=False,
                                  start_new_session=True)
            if done.returncode == 0:
                return
            output = (done.stderr or done.stdout)[-3000:]
            # As tests/conftest.py and test_multinode.py saw on this shared 2-core machine: a node
            # that "timed out" starting came up when started again from scratch.
            if "timed out" not in output.lower() or attempt == 2:
                raise RuntimeError(f"ray start failed ({done.returncode}):\n{output}")
            self._stop_processes()

    def shutdown(self, grace_s: float = 5.0) -> int:
        """Stop every process of this cluster and remove its temp dir; returns how many processes
        there were."""
        stopped = self._stop_processes(grace_s)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return stopped

    def _stop_processes(self, grace_s: float = 5.0) -> int:
        """SIGTERM the processes that name the temp dir, and theirs; SIGKILL after ``grace_s``."""
        marker = str(self.temp_dir)
        found = _started(processes_naming(marker))
        for pid in found:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _still(found):
            time.sleep(0.2)
        # Those that outlived SIGTERM, and any a dying parent started meanwhile.
        for pid in _still(found) | processes_naming(marker):
            _signal(pid, signal.SIGKILL)
        return len(found)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended on its own
        os.kill(pid, sig)


def _still(found: dict[int, int]) -> set[int]:
    """Those of ``found`` alive still (not another process that got a pid back)."""
    return {pid for pid, t in _started(set(found)).items() if found[pid] == t}


def _started(pids: set[int]) -> dict[int, int]:
    """The live ones of ``pids`` (zombies are not), with when each started (clock ticks since
    boot: a pid reused by another process has another start)."""
    live: dict[int, int] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, *rest = f.read().rsplit(")", 1)[1].split()
            if state != "Z":
                live[pid] = int(rest[18])
        except (OSError, IndexError, ValueError):
            continue
    return live


@contextlib.contextmanager
def joined_cluster(
    auth_dir: Path, *, head_cpus: int, worker: WorkerType, idle_timeout_s: float,
    before_leaving: Callable[[], None] | None = None,
) -> Iterator[LocalAutoscalingCluster]:
    """A cluster started with Ray's token auth (the token in ``auth_dir``) that this process
    has joined (the session's local Ray left first); on exit ``before_leaving`` runs (if
    given, its errors ignored: the cluster stops all the same), this process leaves and the
    cluster stops."""
    import logging

    import ray

    from strata_actors.router import shutdown_ray
    from tests.conftest import leave_shared_ray, ray_token_auth

    leave_shared_ray()
    with ray_token_auth(auth_dir / "auth_token") as auth:
        cluster = LocalAutoscalingCluster(head_cpus=head_cpus, worker=worker, idle_timeout_s=idle_timeout_s, env=auth)
        try:
            cluster.start()
            ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
            yield cluster
        finally:
            if ray.is_initialized():
                if before_leaving is not None:
                    with contextlib.suppress(Exception):
                        before_leaving()
                shutdown_ray()
            cluster.shutdown()
