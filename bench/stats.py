"""The one definition of each figure the benchmarks publish: percentiles and process memory.

Every bench and evaluation takes its p50 / p95 / p99 from :func:`percentile` (through
:func:`latency_ms` for the usual table) and its resident memory from :func:`rss_mib` /
:func:`processes_memory`, so two figures with the same name are the same quantity.

**Percentile.** Nearest rank on the sorted values: the value at index
``round(q * (n - 1))`` (Python's ``round``, ties to even), which is numpy's
``percentile(..., method="nearest")``. It is always one of the measured values; p50
is the middle value for an odd count and one of the two middle values (not their
mean) for an even count.

**Memory.** From ``/proc`` (Linux): ``VmRSS`` of ``/proc/<pid>/status`` (``VmHWM``
for the peak), and ``Pss`` of ``/proc/<pid>/smaps_rollup`` for the proportional
share, shared pages split between the processes that map them. MiB are 2**20 bytes.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "cpu_s",
    "latency_ms",
    "median",
    "percentile",
    "process_name",
    "processes_memory",
    "reset_peak_rss",
    "rss_mib",
]

_STATUS_FIELD = re.compile(r"^(VmRSS|VmHWM):\s+(\d+)", re.MULTILINE)
_PSS = re.compile(r"^Pss:\s+(\d+)", re.MULTILINE)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1) of ``values``: index ``round(q * (n - 1))`` of
    the sorted values (see the module docstring).

    Raises:
        IndexError: ``values`` is empty.
    """
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def median(values: Sequence[float]) -> float:
    """p50 by :func:`percentile`: the figure every bench calls "median" or "p50"."""
    return percentile(values, 0.5)


def latency_ms(
    ms: Sequence[float],
    *,
    quantiles: Sequence[float] = (0.5, 0.95, 0.99),
    digits: int | None = 2,
    prefix: str = "",
) -> dict[str, float | None]:
    """``{"p50_ms": ..., "p95_ms": ..., "p99_ms": ...}`` of latencies ``ms`` (None each when
    there are none).

    Args:
        quantiles: which percentiles, as fractions; the key is ``p`` and the percent.
        digits: rounding of the values; None leaves them as measured.
        prefix: put before every key (``"query_"`` gives ``query_p50_ms``).
    """
    out: dict[str, float | None] = {}
    for q in quantiles:
        value = percentile(ms, q) if ms else None
        out[f"{prefix}p{100 * q:g}_ms"] = value if value is None or digits is None else round(value, digits)
    return out


def _status_kib(pid: int | str, field: str) -> float:
    """``field`` (``VmRSS`` or ``VmHWM``) of ``/proc/<pid>/status`` in KiB; 0 for a process
    without memory of its own (a kernel thread). Raises OSError when the process is gone."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next((float(m.group(2)) for m in _STATUS_FIELD.finditer(status) if m.group(1) == field), 0.0)


def rss_mib(pid: int | str = "self", *, peak: bool = False) -> float:
    """Resident memory of one process in MiB (``VmRSS``); with ``peak``, its peak since
    :func:`reset_peak_rss` or its start (``VmHWM``). NaN when it cannot be read (gone)."""
    try:
        return _status_kib(pid, "VmHWM" if peak else "VmRSS") / 1024
    except OSError:
        return math.nan


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS (Linux >= 4.0); False
    when the kernel does not allow it, and the peak then counts from the start."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_name(pid: int) -> str:
    """What a stack process is: Ray names its workers (``ray::ServeReplica:strata:api``,
    ``ray::EpisodicShard``); the others by their program (raylet, gcs_server, milvus-lite)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    first = argv[0].decode(errors="replace")
    if first.startswith("ray::"):
        return first.split(" ")[0]
    words = [a.decode(errors="replace") for a in argv if a]
    for word in words:  # `python -m strata.store.milvus_lite`, `python .../dashboard.py`
        if word.endswith(".py") or word.startswith("strata."):
            return Path(word).name
    return Path(first).name


def processes_memory(pids: Sequence[int], *, largest: int = 6) -> dict[str, Any]:
    """RSS and PSS summed over ``pids`` in MiB (a process gone meanwhile is left out), and
    the ``largest`` processes by RSS as ``{"process": "name (pid)", "rss_mib": ...}``."""
    rss = pss = 0.0
    each: list[tuple[float, str]] = []
    for pid in pids:
        try:
            kib = _status_kib(pid, "VmRSS")
            rollup = Path(f"/proc/{pid}/smaps_rollup")
            found = _PSS.search(rollup.read_text()) if rollup.exists() else None
        except OSError:
            continue
        rss += kib / 1024
        pss += float(found.group(1)) / 1024 if found else kib / 1024
        each.append((kib / 1024, f"{process_name(pid)} ({pid})"))
    each.sort(reverse=True)
    return {"rss_mib": round(rss, 1), "pss_mib": round(pss, 1), "processes": len(each),
            "largest": [{"process": n, "rss_mib": round(m, 1)} for m, n in each[:largest]]}


def cpu_s(pid: int | str = "self") -> float:
    """CPU seconds (user + system) the process has used, from ``/proc/<pid>/stat``.

    Raises:
        OSError: the process is gone.
    """
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
