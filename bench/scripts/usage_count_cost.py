"""What counting usage adds to a call, in process: the counts a request makes (one call of a
route, the tokens of one embedding made on a tenant's behalf), and what one embedding of a query
costs with and without its count, for scale. Then what a flush prepares (the rows of 100
tenants' hour), which runs every ``serve.usage_flush_s`` off the request's path.

Each figure is the p50 over ``ROUNDS`` rounds of ``PER_ROUND`` operations timed together
(a single count is too short for the clock), divided by ``PER_ROUND``.

Run from the repository root::

    python -m strata_bench.scripts.usage_count_cost

Only Strata's own code: no Ray, no store (the flush's write is the store's, once per interval).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from strata.counting import UsageCounter, count_tokens, on_behalf_of
from strata.providers.embedder import OnnxMiniLMEmbedder, embed_counted
from strata_bench.stats import median, percentile

__all__ = ["main"]

ROUNDS = 200
PER_ROUND = 1_000


def _per_op_ns(op: Callable[[], object], *, per_round: int = PER_ROUND, rounds: int = ROUNDS) -> list[float]:
    """Nanoseconds per ``op()``, one figure per round."""
    out = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        for _ in range(per_round):
            op()
        out.append((time.perf_counter_ns() - started) / per_round)
    return out


def main() -> None:
    """Print p50 and p95 per operation."""
    counter = UsageCounter(replica="bench")
    tokens = [11, 9]  # what embed_counted answers for a query and its speakerless twin

    def call() -> None:
        counter.count("acme", "search")

    def embedded() -> None:
        # What an API replica adds per embedding: the sum of the batch's counts and one count,
        # inside the flow's on_behalf_of (entered once per request).
        with on_behalf_of("acme"):
            count_tokens("embedding", sum(tokens), counter=counter)

    def nothing() -> None:
        pass

    print(f"{'per operation':<44} {'p50 ns':>8} {'p95 ns':>8}")
    base = median(_per_op_ns(nothing))
    for label, op in (("a call counted (CountCalls)", call), ("an embedding's tokens counted, on_behalf_of", embedded)):
        times = [t - base for t in _per_op_ns(op)]
        print(f"{label:<44} {median(times):8.0f} {percentile(times, 95):8.0f}")

    # For scale: one query embedded, with its count (embed_counted + the count) and without.
    model = OnnxMiniLMEmbedder(threads=1)
    query = ["where did the Brno depot move to in spring?"]
    for _ in range(20):
        model.embed_query(query)
    def without_count() -> None:
        model.embed_query(query)

    def with_count() -> None:
        _, n = embed_counted(model, query, query=True)
        with on_behalf_of("acme"):
            count_tokens("embedding", sum(n), counter=counter)

    plain: list[float] = []
    counted: list[float] = []
    for i in range(400):  # alternately first: neither gets the warmer caches every time
        for op, times in ((without_count, plain), (with_count, counted))[:: 1 if i % 2 else -1]:
            started = time.perf_counter_ns()
            op()
            times.append((time.perf_counter_ns() - started) / 1e3)
    # Each p50 on its own: a pairwise difference carries which of the two ran first (~15-35 us here).
    print(f"\none query embedded (MiniLM, one thread)      p50 {median(plain):8.0f} us   "
          f"with its count p50 {median(counted):8.0f} us")

    # A flush's rows: 100 tenants counted in one hour.
    for i in range(100):
        counter.count(f"tenant-{i}", "search")
        count_tokens("embedding", 40, tenant=f"tenant-{i}", counter=counter)
    rows: list[float] = []
    for _ in range(50):
        started = time.perf_counter_ns()
        pending = counter.pending()
        rows.append((time.perf_counter_ns() - started) / 1e3)
    print(f"a flush's rows, {len(pending)} tenants (pending())            p50 {median(rows):8.0f} us")


if __name__ == "__main__":
    main()
