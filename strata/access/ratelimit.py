"""A token bucket per name: how many requests a key (or a client address) may send, and
when it may again.

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
    """``burst`` requests at once per name, then ``per_s`` a second (``per_s`` 0: no limit).

    Args:
        what: who the name is, for the 429's message ("this key", "this address").
    """

    def __init__(
        self, *, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic, what: str = "this key"
    ) -> None:
        self._per_s = per_s
        self._burst = float(burst)
        self._clock = clock
        self._what = what
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key_id: str) -> None:
        """Spend one request of ``key_id``'s allowance.

        Raises:
            RateLimited: the allowance is spent; ``retry_after_s`` says when one is back.
        """
        if self._per_s <= 0:
            return
        bucket = self._refilled(key_id)
        self._refuse_if_spent(bucket)
        bucket.tokens -= 1

    def check(self, key_id: str) -> None:
        """Raise as :meth:`take` would, spending nothing: a caller that spends only on
        failure asks first, and a refused request costs no more than this.

        Raises:
            RateLimited: the allowance is spent; ``retry_after_s`` says when one is back.
        """
        if self._per_s <= 0 or key_id not in self._buckets:
            return
        self._refuse_if_spent(self._refilled(key_id))

    def _refuse_if_spent(self, bucket: _Bucket) -> None:
        if bucket.tokens < 1 - 1e-9:  # float refills: 0.1 s at 10/s is 0.99999...
            wait = (1 - bucket.tokens) / self._per_s
            raise RateLimited(
                f"{self._what} sent more than {self._per_s:g} requests per second: retry in {wait:.2f} s",
                retry_after_s=round(wait, 3),
            )

    def _refilled(self, key_id: str) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = _Bucket(self._burst, now)
            if len(self._buckets) > 100_000:  # forget the idle ones rather than grow without end
                self._forget_full(now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.at) * self._per_s)
        bucket.at = now
        return bucket

    def _forget_full(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.at) * self._per_s >= self._burst:
                del self._buckets[key]
