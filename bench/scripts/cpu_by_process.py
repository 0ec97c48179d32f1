"""The CPU a command costs, by kind of process: run it, sample every process's CPU time from
``/proc/<pid>/stat`` every 2 s, and print the CPU-seconds of each kind (Ray workers by actor, the
Milvus server, milvus-lite, raylets, pytest, ...) next to the wall time and how busy the machine was.

Run from the repository root, e.g. for the test suite::

    python -m strata_bench.scripts.cpu_by_process -- python -m pytest -n 0

Linux only. A process that lives less than the 2 s between samples may be missed, and one that was
already running when the command started counts with all its CPU: run it on a quiet machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from strata_bench.stats import cpu_s

__all__ = ["kind_of", "main"]

_TICK = os.sysconf("SC_CLK_TCK")
#: A process whose command line holds one of these is of that kind (the first that matches).
_KINDS = (
    ("milvus run standalone", "milvus-server"),
    ("strata.store.milvus_lite", "milvus-lite"),
    ("gcs_server", "ray gcs"),
    ("/raylet", "raylet"),
    ("dashboard", "ray dashboard/agents"),
    ("runtime_env", "ray dashboard/agents"),
    ("log_monitor", "ray log monitor"),
    ("pytest", "pytest"),
    ("strata_cli", "strata command"),
    ("haproxy", "haproxy"),
    ("chrom", "browser"),
    ("npm", "node/npm"),
    ("node ", "node/npm"),
)


def kind_of(cmdline: str) -> str:
    """The kind of a process by its command line: a Ray worker by what it runs (``ray::EpisodicShard``)."""
    if cmdline.startswith("ray::"):
        name = re.split(r"[ .:]", cmdline[5:], maxsplit=1)[0]
        return "ray::" + ("ServeReplica" if name.startswith("SERVE_REPLICA") else name)
    for needle, kind in _KINDS:
        if needle in cmdline:
            return kind
    return Path(cmdline.split(" ", 1)[0]).name[:30] or "?"


def _busy_s() -> float:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def _sample(seen: dict[str, tuple[str, float]], stop: threading.Event) -> None:
    while not stop.is_set():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cpu = cpu_s(pid)
            except OSError:  # gone meanwhile
                continue
            if pid in seen:
                seen[pid] = (seen[pid][0], max(seen[pid][1], cpu))
                continue
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if raw:
                seen[pid] = (kind_of(raw.replace(b"\0", b" ").decode(errors="replace").strip()), cpu)
        stop.wait(2.0)


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    before = {pid for pid in os.listdir("/proc") if pid.isdigit()}
    seen: dict[str, tuple[str, float]] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(seen, stop), daemon=True)
    started, busy_at_start = time.monotonic(), _busy_s()
    sampler.start()
    status = subprocess.call(command)  # noqa: S603 (the command the user asked to measure)
    stop.set()
    sampler.join()
    wall, busy = time.monotonic() - started, _busy_s() - busy_at_start
    by_kind: dict[str, float] = {}
    count: Counter[str] = Counter()
    for pid, (kind, cpu) in seen.items():
        if pid not in before:
            by_kind[kind] = by_kind.get(kind, 0.0) + cpu
            count[kind] += 1
    print(f"wall {wall:.0f} s; machine busy {busy:.0f} CPU-s ({busy / wall:.2f} cores of {os.cpu_count()})")
    for kind, cpu in sorted(by_kind.items(), key=lambda kc: -kc[1]):
        print(f"{cpu:8.1f} CPU-s  {count[kind]:4d} processes  {kind}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
