"""A milvus-lite server of a benchmark's own, on a free loopback port, in a temporary directory.

Started through :mod:`strata.store.milvus_lite` (as ``strata up`` starts the stack's, with
its writes serialised per collection) unless a measurement asks for another command.
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from strata.store.milvus_lite import COMMAND
from strata.store.milvus_lite_process import MilvusLiteProcess

__all__ = ["scratch_milvus", "scratch_server"]


@contextmanager
def scratch_server(*, extra_args: Sequence[str] = (), command: Sequence[str] = COMMAND,
                   env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> Iterator[MilvusLiteProcess]:
    """A milvus-lite server of its own, on a free loopback port with its data (``data_dir``) and
    log in a temporary directory: yielded once it answers; stopped and removed on exit. It may
    be killed and started again meanwhile (a restart on the same data).

    It requires no token (its callers pass none), so any local user can reach it while
    it runs; its data are the benchmark's own, in an owner-only temporary directory.

    Args:
        extra_args, command, env: as :class:`~strata.store.milvus_lite_process.MilvusLiteProcess` takes them.

    Raises:
        StoreUnavailable: it exited, or did not answer within ``timeout_s``; the message ends with its log.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="strata-milvus-") as tmp:
        server = MilvusLiteProcess(Path(tmp) / "milvus", port, log=Path(tmp) / "milvus.log", extra_args=extra_args,
                                   command=command, env=env)
        server.start(timeout_s=timeout_s)
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def scratch_milvus(*, timeout_s: float = 60.0) -> Iterator[tuple[str, int]]:
    """:func:`scratch_server` through the launcher: yields ``(uri, pid)``."""
    with scratch_server(timeout_s=timeout_s) as server:
        yield server.uri, server.pid
