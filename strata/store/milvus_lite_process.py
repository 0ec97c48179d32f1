"""A milvus-lite server process, seen from the process that starts it: started on a port of
this machine (through the launcher, :mod:`strata.store.milvus_lite`, unless told otherwise),
waited for until it answers an RPC, stopped.

The one copy of this for ``strata up`` (which adds its pidfile and token), the benchmarks'
scratch servers and the tests' store. It runs in a session of its own, so stopping it
signals its process group, and it writes its files owner-only (umask 077).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from strata.errors import StoreUnavailable
from strata.store.milvus_lite import COMMAND

__all__ = ["STOP_GRACE_S", "MilvusLiteProcess", "wait_until_answers"]

#: How long a stopped server has between SIGTERM and SIGKILL.
STOP_GRACE_S = 10.0
_POLL_S = 0.25
#: How much of its log an error about a server that did not come up ends with.
_LOG_TAIL_LINES = 15


class MilvusLiteProcess:
    """A milvus-lite server on ``host:port`` with its data in ``data_dir``; start it again
    after :meth:`stop` or :meth:`kill` and it serves the same data (a restart). As a context
    manager it is started on entry and stopped on exit.

    Args:
        data_dir: milvus-lite's ``--data-dir``.
        log: where its output is appended (created 0600); None: discarded.
        extra_args: more arguments of its ``server`` command (``--max-workers``, ``--token-file``).
        command: what runs it: the launcher by default, or e.g. the ``milvus-lite`` command as installed.
        env: its whole environment; None: this process's.
        token: what the readiness probe sends, for a server that requires one.
    """

    def __init__(self, data_dir: Path, port: int, *, host: str = "127.0.0.1", log: Path | None = None,
                 extra_args: Sequence[str] = (), command: Sequence[str] = COMMAND,
                 env: Mapping[str, str] | None = None, token: str = "") -> None:
        self.data_dir = data_dir
        self.port = port
        self.host = host
        self.log = log
        self.token = token
        self._command = [*command, "server", "--data-dir", str(data_dir), "--host", host, "--port", str(port),
                         *extra_args]
        self._env = None if env is None else dict(env)
        #: The running (or last) server process; None before the first start.
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The server's pid (its process group's too).

        Raises:
            RuntimeError: it was never started.
        """
        return self._started().pid

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the server process and return it, without waiting for it to answer."""
        if self.log is None:
            self.process = self._popen(subprocess.DEVNULL)
        else:
            # The child writes to its own copy of the handle until it exits.
            with os.fdopen(os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
                self.process = self._popen(out.fileno())
        return self.process

    def _popen(self, out: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # noqa: S603  a fixed command of ours, no shell
            self._command, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=self._env,
            start_new_session=True, umask=0o077,
        )

    def wait_until_answers(self, *, timeout_s: float = 60.0) -> None:
        """:func:`wait_until_answers` for this server.

        Raises:
            StoreUnavailable: it exited, or did not answer within ``timeout_s``.
        """
        wait_until_answers(self.host, self.port, process=self._started(), token=self.token, timeout_s=timeout_s,
                           log=self.log)

    def start(self, *, timeout_s: float = 60.0) -> None:
        """:meth:`spawn` it and :meth:`wait_until_answers`; stopped again if it does not answer.

        Raises:
            StoreUnavailable: it exited, or did not answer within ``timeout_s``.
        """
        self.spawn()
        try:
            self.wait_until_answers(timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self, *, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM its process group; SIGKILL the group if it has not exited after ``grace_s``."""
        if not self._signal(signal.SIGTERM):
            return
        process = self._started()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            process.wait()

    def kill(self) -> None:
        """SIGKILL its process group, as a crash would end it."""
        if self._signal(signal.SIGKILL):
            self._started().wait(timeout=10)

    def __enter__(self) -> MilvusLiteProcess:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _started(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise RuntimeError("the milvus-lite server was never started")
        return self.process

    def _signal(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to its process group while it runs; whether it did."""
        if self.process is None or self.process.poll() is not None:
            return False
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            return False
        return True


def wait_until_answers(host: str, port: int, *, process: subprocess.Popen[bytes] | None = None, token: str = "",
                       timeout_s: float = 60.0, log: Path | None = None) -> None:
    """Poll until the Milvus on ``host:port`` answers an RPC (a milvus-lite's port opens about a
    second before it does).

    Args:
        process: the server's process, if it is a child of this one: it must not exit meanwhile.
        token: what the probe sends, for a server that requires one.
        log: the server's log, whose last lines end the error's message.

    Raises:
        StoreUnavailable: ``process`` exited, or the server did not answer within ``timeout_s``.
    """
    from strata.store.milvus import MilvusRecordStore  # pymilvus: only once a server is started

    probe = MilvusRecordStore(f"http://{host}:{port}", token=token, timeout_s=2)
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise StoreUnavailable(f"Milvus on {host}:{port} exited with code {process.returncode}{_tail(log)}")
        if _port_open(host, port):
            with contextlib.suppress(StoreUnavailable):
                probe.ping()
                return
        if time.monotonic() > deadline:
            raise StoreUnavailable(f"Milvus on {host}:{port} did not answer within {timeout_s:.0f} s{_tail(log)}")
        time.sleep(_POLL_S)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    return f"; {log} ends:\n" + "\n".join(lines)
