"""What sharing the rate limits and Idempotency-Key claims across API replicas adds per call
(issue 40): sequential calls, the time of each, in this process and through the limits actor
(``strata_actors.limits``) on a local Ray.

- ``rate, replica's own``: :meth:`RateLimiter.take`, the bucket each replica held before;
- ``rate, shared, in process``: :class:`SharedRateLimiter` over a central bucket in this
  process (``auth.rate_lease`` 10): the leasing alone;
- ``rate, shared, actor, lease 1``: one actor call per request;
- ``rate, shared, actor, lease 10``: the default, one actor call per 10 requests of a key;
- ``claim + release, in process`` and ``… actor``: what a write with an Idempotency-Key adds
  (two calls: the claim before the write, the release after it).

Run from the repository root (starts and stops a 2-CPU Ray of its own)::

    python -m strata_bench.scripts.limits_cost
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import ray

from strata.access.idempotency import Claims
from strata.access.ratelimit import RateLimiter, SharedRateLimiter
from strata.config import AuthSettings, RaySettings, StrataSettings
from strata_actors.limits import SharedLimits
from strata_actors.router import shutdown_ray
from strata_bench.stats import median, percentile

__all__ = ["main"]

N_LOCAL = 20_000
N_ACTOR = 1_000


async def _time(label: str, n: int, call: Callable[[int], Awaitable[None]], calls: Callable[[], int]) -> None:
    for i in range(50):  # warm up: the actor started, the first lease taken
        await call(i)
    before = calls()
    times: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        times.append((time.perf_counter() - t0) * 1000)
    mean = sum(times) / len(times)
    print(f"{label:<34} {median(times):8.4f} {mean:8.4f} {percentile(times, 95):8.4f} {calls() - before:7d}")


async def _rate_through_actor(shared: SharedLimits, own: RateLimiter, lease: int) -> None:
    limiter = SharedRateLimiter(shared.grant, lease=lease, lease_s=1.0, fallback=own)

    async def take(_: int) -> None:
        await limiter.take("acme", "k")

    await _time(f"rate, shared, actor, lease {lease}", N_ACTOR, take, lambda: limiter.calls)


async def _main() -> None:
    settings = StrataSettings(
        auth=AuthSettings(rate_limit_per_s=1e9, rate_burst=10**9),
        ray=RaySettings(namespace="bench-limits-" + uuid.uuid4().hex[:8]),
    )
    print(f"sequential calls ({N_LOCAL:,} in process, {N_ACTOR:,} through the actor), one key\n")
    print(f"{'':<34} {'p50 ms':>8} {'mean ms':>8} {'p95 ms':>8} {'calls':>7}")

    own = RateLimiter(per_s=1e9, burst=10**9)

    async def take_own(_: int) -> None:
        own.take("k")

    await _time("rate, replica's own", N_LOCAL, take_own, lambda: 0)

    central = RateLimiter(per_s=1e9, burst=10**9)

    async def grant_here(tenant: str, key_id: str, want: int) -> int:
        return central.grant(key_id, want)

    here = SharedRateLimiter(grant_here, lease=10, lease_s=1.0, fallback=own)
    await _time("rate, shared, in process", N_LOCAL, lambda _: here.take("acme", "k"), lambda: here.calls)

    shared = SharedLimits(settings)
    for lease in (1, 10):
        await _rate_through_actor(shared, own, lease)

    claims = Claims(hold_s=60, wait_s=10)

    async def claim_here(i: int) -> None:
        await claims.claim("acme", f"idem-{i}", fingerprint="f", holder="h")
        await claims.release("acme", f"idem-{i}", holder="h")

    await _time("claim + release, in process", N_LOCAL, claim_here, lambda: 0)

    async def claim_actor(i: int) -> None:
        await shared.claim("acme", f"idem-{i}", fingerprint="f", holder="h")
        await shared.release("acme", f"idem-{i}", holder="h")

    await _time("claim + release, actor", N_ACTOR, claim_actor, lambda: 0)
    ray.kill(shared.handle("acme"))


def main() -> None:
    """Print p50, mean and p95 per call, and the actor calls made, of each way a replica limits a key
    or claims an Idempotency-Key."""
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 2**20, logging_level=logging.ERROR,
             log_to_driver=False)
    try:
        asyncio.run(_main())
    finally:
        shutdown_ray()


if __name__ == "__main__":
    main()
