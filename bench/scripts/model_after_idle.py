"""How much longer one query's embedding takes when the thread running it waited before it.

The in-process floor of ``strata bench`` embeds its queries in a loop that never waits; in the
stack, the ingress's model thread waits between calls (for the next request, and within a
call for the layer reads). This embeds one question with the configured model, 10 times per
round in each way, in shuffled rounds so that the machine's drift falls on every way alike,
and prints the median wall and thread-CPU ms of the model call per way:

- ``back to back``: no wait;
- ``after 1 ms`` / ``after 10 ms``: the thread sleeps that long first;
- ``after 5 ms of Python``: the thread first runs 5 ms of other Python work, as the floor's
  searches and assembly run between two of its embeddings.

    python bench/scripts/model_after_idle.py [ROUNDS]
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable

from strata.config import load_settings
from strata.providers.embedder import make_embedder

QUESTION = "What did Caroline do at the LGBTQ support group last week?"


def _python_work(seconds: float) -> None:
    numbers = list(range(200_000))
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        sum(numbers[::7])


def main(rounds: int = 30) -> None:
    embedder = make_embedder(load_settings(None).embedding)
    for _ in range(30):
        embedder.embed_query([QUESTION])
    before: dict[str, Callable[[], None]] = {
        "back to back": lambda: None,
        "after 1 ms": lambda: time.sleep(0.001),
        "after 10 ms": lambda: time.sleep(0.010),
        "after 5 ms of Python": lambda: _python_work(0.005),
    }
    taken: dict[str, list[tuple[float, float]]] = {way: [] for way in before}
    ways = list(before)
    for _ in range(rounds):
        random.shuffle(ways)
        for way in ways:
            for _ in range(10):
                before[way]()
                wall, cpu = time.perf_counter(), time.thread_time()
                embedder.embed_query([QUESTION])
                taken[way].append(((time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000))
    base = statistics.median(w for w, _ in taken["back to back"])
    print(f"one query, {rounds * 10} calls per way; median ms of the model call")
    print(f"{'way':<24}{'wall':>8}{'CPU':>8}{'wall / back to back':>22}")
    for way, times in taken.items():
        wall = statistics.median(w for w, _ in times)
        cpu = statistics.median(c for _, c in times)
        print(f"{way:<24}{wall:>8.2f}{cpu:>8.2f}{wall / base:>21.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
