"""A token bucket per key: how many requests a key may send, and when it may again.

Kept in each API replica's memory: with N replicas a key may send up to N
times the rate in all. That bounds abuse without a shared store on every
request; a shared limit needs one (Redis, or a Ray actor).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from strata.errors import RateLimited

__all__ = ["RateLimiter"]


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    def __init__(self, *, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_s = per_s
        self._burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key_id: str) -> None:
        """Spend one request of ``key_id``'s allowance.

        Raises:
            RateLimited: the allowance is spent; ``retry_after_s`` says when one is back.
        """
        if self._per_s <= 0:
            return
        now = self._clock()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = _Bucket(self._burst, now)
            if len(self._buckets) > 100_000:  # forget the idle ones rather than grow without end
                self._forget_full(now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.at) * self._per_s)
        bucket.at = now
        if bucket.tokens < 1 - 1e-9:  # float refills: 0.1 s at 10/s is 0.99999...
            wait = (1 - bucket.tokens) / self._per_s
            raise RateLimited(
                f"this key sent more than {self._per_s:g} requests per second: retry in {wait:.2f} s",
                retry_after_s=round(wait, 3),
            )
        bucket.tokens -= 1

    def _forget_full(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.at) * self._per_s >= self._burst:
                del self._buckets[key]
