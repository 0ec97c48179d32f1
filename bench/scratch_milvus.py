"""A milvus-lite server of a benchmark's own, for the benchmarks run as ``python -m``.

Started through :mod:`strata.store.milvus_lite` (as ``strata up`` starts the stack's, with
its writes serialised per collection) on a free loopback port, in a temporary directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from strata.errors import StoreUnavailable
from strata.store.milvus import MilvusRecordStore
from strata.store.milvus_lite import COMMAND

__all__ = ["scratch_milvus"]


@contextmanager
def scratch_milvus(*, timeout_s: float = 60.0) -> Iterator[tuple[str, int]]:
    """A milvus-lite server of its own, on a free loopback port with a temporary
    data dir: yields ``(uri, pid)`` once it answers; stopped and removed on exit.

    It requires no token (its callers pass none), so any local user can reach it while
    it runs; its data are the benchmark's own, in an owner-only temporary directory.

    Raises:
        RuntimeError: it exited, or did not answer within ``timeout_s``; the message ends with its log.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="strata-milvus-") as tmp:
        log = Path(tmp) / "milvus.log"
        with log.open("ab") as out:
            process = subprocess.Popen(  # noqa: S603  our own launcher, no shell
                [*COMMAND, "server", "--data-dir", str(Path(tmp) / "milvus"), "--host", "127.0.0.1",
                 "--port", str(port)],
                stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True, umask=0o077,
            )
        try:
            uri = f"http://127.0.0.1:{port}"
            _wait_until_it_answers(MilvusRecordStore(uri, timeout_s=2), process, port, log, timeout_s)
            yield uri, process.pid
        finally:
            _stop(process)


def _wait_until_it_answers(probe: MilvusRecordStore, process: subprocess.Popen[bytes], port: int, log: Path,
                           timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:  # the port opens about a second before the server answers
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                pass
            probe.ping()
            return
        except (OSError, StoreUnavailable):
            time.sleep(0.25)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise RuntimeError(f"the scratch milvus-lite did not come up (exit code {process.poll()}):\n{tail}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM its process group, SIGKILL after 10 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
