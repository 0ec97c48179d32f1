"""Phase 2 over HTTP: ``/v1/context`` and ``/v1/search`` latency, from concurrent clients and
from one client alone (which separates queueing from the cost of a call).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from strata_bench.service.sizes import Sizes
from strata_bench.service.timing import Ticker, pool, summary
from strata_bench.stats import cpu_s, process_name
from strata_bench.target import RAW
from strata_serve.client import AsyncStrataClient

__all__ = ["cpu_ms_per_unit", "measure_latency", "stack_cpu_s"]


async def _timed(calls: list[Callable[[], Awaitable[Any]]], clients: int, label: str) -> tuple[list[float], int]:
    """Run ``calls`` over ``clients`` concurrent loops; their latencies (ms) and how many
    contexts came back with layers missing."""
    ms: list[float] = []
    missing = [0]
    tick = Ticker(label, len(calls), "calls")

    async def one(call: Callable[[], Awaitable[Any]], _: int) -> None:
        t0 = time.perf_counter()
        result = await call()
        ms.append((time.perf_counter() - t0) * 1000)
        missing[0] += bool(getattr(result, "missing", None)) and hasattr(result, "context")
        tick(len(ms))

    await pool(calls, clients, one)
    return ms, missing[0]


def stack_cpu_s(pids: Callable[[], Sequence[int]] | None) -> dict[int, float] | None:
    """CPU seconds used so far by each process of the stack (None when they are not ours to see)."""
    if pids is None:
        return None
    used: dict[int, float] = {}
    for pid in pids():
        with contextlib.suppress(OSError):  # a process that ended between the listing and the read
            used[pid] = cpu_s(pid)
    return used


async def _cpu_per_call(run: Awaitable[tuple[list[float], int]], pids: Callable[[], Sequence[int]] | None,
                        ) -> tuple[list[float], int, float | None, dict[str, float]]:
    """``run``'s latencies and missing count, the stack's CPU ms per call over it, and that
    CPU by kind of process (the ``where a context call's time goes`` table)."""
    before = stack_cpu_s(pids)
    ms, missing = await run
    total, per_process = cpu_ms_per_unit(before, stack_cpu_s(pids), len(ms))
    return ms, missing, total, per_process


def cpu_ms_per_unit(before: dict[int, float] | None, after: dict[int, float] | None, units: int,
                    ) -> tuple[float | None, dict[str, float]]:
    """The stack's CPU ms per unit of work (a call, a turn) between two :func:`stack_cpu_s`
    readings, in all and by kind of process (None and {} when unread or no unit was done)."""
    if before is None or after is None or not units:
        return None, {}
    by_name: dict[str, float] = {}
    for pid, used in after.items():
        name = process_name(pid)
        by_name[name] = by_name.get(name, 0.0) + (used - before.get(pid, 0.0)) * 1000 / units
    per_process = {n: round(v, 2) for n, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v >= 0.05}
    return round(sum(by_name.values()), 2), per_process


async def measure_latency(url: str, key: str, queries: list[str], session: str, sizes: Sizes, *,
                          pids: Callable[[], Sequence[int]] | None = None) -> dict[str, Any]:
    """Warm up, then the calls of one client alone, then of ``sizes.clients`` concurrent ones.

    ``pids`` lists the stack's processes: the CPU they spend over each context phase, summed
    from ``/proc`` (this process, the clients', is not counted), is reported per call.
    """
    clients = [AsyncStrataClient(url, key, timeout_s=120, **RAW) for _ in range(sizes.clients)]
    turn = [0]

    def context(q: str) -> Callable[[], Awaitable[Any]]:
        def call() -> Awaitable[Any]:
            turn[0] += 1
            return clients[turn[0] % len(clients)].build_context(q, session, task_type="planning")
        return call

    def search(q: str) -> Callable[[], Awaitable[Any]]:
        def call() -> Awaitable[Any]:
            turn[0] += 1
            return clients[turn[0] % len(clients)].search(q, layers=["episodic", "semantic"], top_k=10)
        return call

    # Warm up until a context comes back whole: the tenant may have to load (or re-load).
    deadline, warm = time.monotonic() + 180, None
    while time.monotonic() < deadline:
        warm = await clients[0].build_context(queries[0], session, task_type="planning")
        if not warm.missing:
            break
        print(f"  warming up: context still misses {sorted(warm.missing)}", flush=True)
    await _timed([context(q) for q in queries[:10]] + [search(q) for q in queries[:10]], sizes.clients, "warm-up")
    n = sizes.clients * sizes.calls_per_client
    cycle = [queries[i % len(queries)] for i in range(n)]
    seq_context, seq_missing, seq_cpu, seq_by_process = await _cpu_per_call(
        _timed([context(q) for q in cycle[: sizes.sequential_calls]], 1, "one client, context"), pids)
    seq_search, _ = await _timed([search(q) for q in cycle[: sizes.sequential_calls]], 1, "one client, search")
    started = time.perf_counter()
    conc_context, missing, conc_cpu, conc_by_process = await _cpu_per_call(
        _timed([context(q) for q in cycle], sizes.clients, f"{sizes.clients} clients, context"), pids)
    context_s = time.perf_counter() - started
    started = time.perf_counter()
    conc_search, _ = await _timed([search(q) for q in cycle], sizes.clients, f"{sizes.clients} clients, search")
    search_s = time.perf_counter() - started
    await asyncio.gather(*(c.aclose() for c in clients))
    return {
        "clients": sizes.clients,
        "context": {**summary(conc_context), "calls_with_missing_layers": missing,
                    "calls_per_s": round(len(conc_context) / context_s, 1), "stack_cpu_ms_per_call": conc_cpu,
                    "cpu_ms_per_call_by_process": conc_by_process},
        "search": {**summary(conc_search), "calls_per_s": round(len(conc_search) / search_s, 1)},
        "one_client": {"context": {**summary(seq_context), "calls_with_missing_layers": seq_missing,
                                   "stack_cpu_ms_per_call": seq_cpu, "cpu_ms_per_call_by_process": seq_by_process},
                       "search": summary(seq_search)},
        "context_sections": [s.layer for s in warm.sections] if warm else [],
    }
