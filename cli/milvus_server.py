"""The data dir's embedded milvus-lite server: found by its pidfile, started, stopped.

It runs through :mod:`strata.store.milvus_lite` (writes serialised per collection, calls
without the data dir's token refused), in its own session, logging to ``logs/milvus.log``;
its pid is in ``milvus.pid``, trusted only while that process runs the launcher on this
data dir (a pid may be reused by any process).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from strata.config import MilvusSettings
from strata.errors import StoreUnavailable
from strata.store.milvus_lite import COMMAND as MILVUS_LITE_COMMAND
from strata.store.milvus_lite_process import MilvusLiteProcess
from strata_cli.errors import StackError
from strata_cli.ports import port_open
from strata_cli.private_files import owner_only_dir, write_private
from strata_cli.processes import alive, cmdline, stop_process_group

__all__ = ["milvus_pid", "start_milvus", "stop_milvus"]

#: The launcher's module, as it appears in the server's command line.
_LAUNCHER = MILVUS_LITE_COMMAND[-1]


def _pidfile(data_dir: Path) -> Path:
    return data_dir / "milvus.pid"


def _is_ours(data_dir: Path, pid: int) -> bool:
    """Whether ``pid`` runs Strata's launcher on this data dir."""
    args = cmdline(pid).split(b"\0")
    return _LAUNCHER.encode() in args and str(data_dir / "milvus").encode() in args


def milvus_pid(data_dir: Path) -> int | None:
    """The pid in ``milvus.pid`` if it is alive and provably this data dir's server."""
    try:
        pid = int(_pidfile(data_dir).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) and _is_ours(data_dir, pid) else None


def start_milvus(data_dir: Path, m: MilvusSettings, *, token_file: Path, say: Callable[[str], None]) -> None:
    """Start the data dir's milvus-lite on ``m.host:m.port`` unless it runs and answers; wait until it does.
    It answers only calls with the token in ``token_file``.

    Raises:
        StackError: another program holds the port, or the server exited or did not answer within 60 s.
    """
    pid = milvus_pid(data_dir)
    if pid and port_open(m.host, m.port):
        say(f"milvus-lite already running (pid {pid}) on {m.host}:{m.port}")
        return
    if pid:  # ours, but not answering: replace it
        stop_process_group(pid)
    if port_open(m.host, m.port):
        raise StackError(
            f"port {m.port} is in use by another process; stop it or set STRATA_MILVUS__PORT"
        )
    logs = data_dir / "logs"
    owner_only_dir(logs)
    # The launcher refuses calls without the token: its path, not the token, on the command
    # line (command lines are public).
    server = MilvusLiteProcess(data_dir / "milvus", m.port, host=m.host, log=logs / "milvus.log",
                               extra_args=["--token-file", str(token_file)], token=m.token)
    process = server.spawn()
    # Recorded before it answers: a `strata down` after a failed start finds it.
    write_private(_pidfile(data_dir), str(process.pid))
    say(f"starting milvus-lite (pid {process.pid}) on {m.host}:{m.port}")
    try:
        server.wait_until_answers(timeout_s=60)
    except StoreUnavailable as exc:
        raise StackError(exc.message) from None


def stop_milvus(data_dir: Path, say: Callable[[str], None]) -> None:
    """Stop the data dir's milvus-lite, if it runs, and remove its pidfile."""
    pid = milvus_pid(data_dir)
    if pid:
        stop_process_group(pid)
        say(f"stopped milvus-lite (pid {pid})")
    _pidfile(data_dir).unlink(missing_ok=True)
