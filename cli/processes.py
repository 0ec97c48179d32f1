"""This user's processes: finding a stack's by what their command lines name, and stopping them.

``ray stop`` cannot name one cluster (it stops every Ray of the user), so the stack finds
its own processes in ``/proc``: those naming its Ray temp dir or data dir, and their
descendants.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from strata_cli.errors import StackError

__all__ = [
    "alive",
    "cmdline",
    "processes_naming",
    "ray_client_servers",
    "stop_process_group",
    "stop_processes",
    "stop_processes_naming",
    "wait_until",
]

#: What names Ray's GCS server in its command line (``…/ray/core/src/ray/gcs/gcs_server``).
_GCS_SERVER = b"/gcs/gcs_server"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie child counts as dead)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def cmdline(pid: int) -> bytes:
    """``pid``'s command line, its arguments NUL-separated; empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


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
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
        yield int(entry.name), parent, command


def processes_naming(marker: str, *, also: Sequence[int] = ()) -> set[int]:
    """This user's processes whose command line names ``marker`` (a path, matched whole: not
    /tmp/x-1 for /tmp/x-10), the live pids in ``also``, and all their descendants (Ray's
    workers and agents rename themselves ``ray::…``, so only their parents name the path)."""
    named = re.compile(re.escape(marker).encode() + rb"(?:/|\x00|$)")
    parents: dict[int, int] = {}
    found = {pid for pid in also if alive(pid)}
    for pid, parent, command in _own_processes():
        parents[pid] = parent
        if named.search(command):
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
        for pid, _, command in _own_processes()
        if b"\x00ray.util.client.server\x00" in command and address.search(command)
    }


def stop_processes_naming(marker: str, timeout_s: float = 15.0) -> int:
    """:func:`stop_processes` of the :func:`processes_naming` ``marker``."""
    return stop_processes(processes_naming(marker), timeout_s)


def stop_processes(found: set[int], timeout_s: float = 15.0) -> int:
    """SIGTERM ``found``; SIGKILL those still alive after ``timeout_s``. Returns how many there were.

    Ray's GCS server goes last. A raylet, its agents and the autoscaler's monitor leave
    within a second while the GCS answers them; terminated beside it, they waited for it
    until the SIGKILL: ``strata down`` took 22 s, 15 of them here (0.8 s in this order)."""
    gcs = {pid for pid in found if _GCS_SERVER in cmdline(pid)}
    _terminate(found - gcs, timeout_s)
    _terminate(gcs, timeout_s)
    return len(found)


def _terminate(pids: set[int], timeout_s: float) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def stop_process_group(pid: int) -> None:
    """SIGTERM ``pid``'s process group (``pid`` alone when it leads none); SIGKILL ``pid`` after 10 s."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def wait_until(what: str, check: Callable[[], bool], timeout_s: float, log: Path | None = None) -> None:
    """Poll ``check`` until it holds.

    Raises:
        StackError: it did not within ``timeout_s``; the message ends with ``log``'s last lines.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise StackError(f"{what} did not come up within {timeout_s:.0f} s{tail}")
