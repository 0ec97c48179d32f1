"""What every phase of the service benchmark shares: progress lines, the wall time of
each phase, a pool of concurrent workers, and the latency summary of a list of calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from strata_bench.stats import latency_ms

__all__ = ["Phases", "Ticker", "pool", "summary"]


class Ticker:
    """Prints ``label: done/total unit`` at most every ``every_s`` (progress of long phases)."""

    def __init__(self, label: str, total: int, unit: str, every_s: float = 5.0) -> None:
        self.label, self.total, self.unit, self.every_s = label, total, unit, every_s
        self.started = self._last = time.perf_counter()

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if now - self._last >= self.every_s:
            self._last = now
            print(f"  {self.label}: {done}/{self.total} {self.unit} ({done / (now - self.started):.1f}/s)", flush=True)


async def pool(items: Sequence[Any], workers: int, work: Callable[[Any, int], Awaitable[None]]) -> None:
    """``work(item, worker)`` for every item, ``workers`` at a time, in order."""
    queue = list(reversed(items))

    async def worker(n: int) -> None:
        while queue:
            await work(queue.pop(), n)

    await asyncio.gather(*(worker(n) for n in range(workers)))


class Phases:
    """``with phases("name"):`` adds the block's wall time to ``seconds["name"]``."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - started, 1)


def summary(ms: Sequence[float]) -> dict[str, Any]:
    """p50, p95 and p99 of latencies ``ms`` (:func:`~strata_bench.stats.latency_ms`) and their count."""
    return {**latency_ms(ms), "calls": len(ms)}
