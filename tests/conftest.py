"""Shared fixtures: a real milvus-lite server and a local Ray instance per module."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from strata.config import StrataSettings, load_settings
from strata.store.milvus_lite import COMMAND as MILVUS_LITE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def wait_for_milvus(port: int, process: subprocess.Popen[bytes] | None = None, timeout_s: float = 60) -> None:
    """Until the server answers an RPC (its port opens ~1 s before it does)."""
    from strata.errors import StoreUnavailable
    from strata.store.milvus import MilvusRecordStore

    store = MilvusRecordStore(f"http://127.0.0.1:{port}", timeout_s=2)
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"milvus-lite on {port} exited with {process.returncode}")
        try:
            store.ping()
            return
        except StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class MilvusServer:
    data_dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The handle outlives this call: the child writes its log there until it is killed.
        log = open(self.data_dir.parent / f"milvus-{self.port}.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*MILVUS_LITE, "server", "--data-dir", str(self.data_dir), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=log, stderr=log, start_new_session=True,
        )
        wait_for_milvus(self.port, self.process)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture(scope="module")
def milvus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusServer]:
    server = MilvusServer(tmp_path_factory.mktemp("milvus") / "data", free_port())
    server.start()
    yield server
    server.kill()


def settings_for(milvus: MilvusServer, **overrides: Any) -> StrataSettings:
    """Settings pointing at the test's Milvus, with collections of their own."""
    base: dict[str, Any] = {
        "milvus": {"port": milvus.port, "collection_prefix": "t" + uuid.uuid4().hex[:10], "timeout_s": 3.0},
        "ray": {"namespace": "test-" + uuid.uuid4().hex[:8]},
    }
    for key, value in overrides.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return load_settings(None, **base)


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    import ray

    # address="local": a fresh instance even when a `strata up` head runs on this machine.
    for attempt in range(3):
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=256 * 1024 * 1024,
                     logging_level=logging.ERROR, log_to_driver=False)
            break
        except Exception as exc:
            # Seen on clean-clone runs right after another module stopped its Ray: the new
            # GCS did not write its port file in time ("Timed out waiting for file"), or the
            # node "timed out during startup". A second start worked.
            if "timed out" not in str(exc).lower() or attempt == 2:
                raise
            ray.shutdown()
            time.sleep(3)
    yield
    ray.shutdown()
