"""A token bucket per name: how many requests a key (or a client address) may send, and
when it may again.

:class:`RateLimiter` is one bucket per name in one process. A key's limit holds across
API replicas through :class:`SharedRateLimiter`: each replica takes a key's requests from
one central :class:`RateLimiter` (in an actor per tenant range, ``strata_actors.limits``)
a few at a time (:meth:`RateLimiter.grant`), and spends them on its own. Every request
accepted anywhere was granted by the central bucket once, so the sum over the replicas
stays within its burst and rate: over any span of ``t`` seconds, at most
``burst + per_s * (t + lease_s)``, as a replica may spend in the span what it was granted
up to ``lease_s`` before (an unspent grant is dropped after that).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from strata.errors import RateLimited, StoreUnavailable

__all__ = ["Grant", "RateLimiter", "SharedRateLimiter"]

#: The central limiter's :meth:`RateLimiter.grant`, wherever it runs: ``(tenant, key_id, want)``
#: to how many requests were granted; raises ``RateLimited``, or ``StoreUnavailable`` when it
#: does not answer. The tenant says where the key's bucket lives.
Grant = Callable[[str, str, int], Awaitable[int]]


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

    def grant(self, key_id: str, want: int) -> int:
        """Spend up to ``want`` requests of ``key_id``'s allowance at once, for a replica to use on
        its own (:class:`SharedRateLimiter`): at least one, and no more than half of what is left,
        so that one replica does not hold the last requests while another is refused.

        Raises:
            RateLimited: not one is left; ``retry_after_s`` says when one is back.
        """
        if self._per_s <= 0:
            return max(1, want)
        bucket = self._refilled(key_id)
        self._refuse_if_spent(bucket)
        granted = max(1, min(want, int(bucket.tokens / 2)))
        bucket.tokens -= granted
        return granted

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


@dataclass
class _Lease:
    #: Requests granted and not spent yet.
    left: int
    #: Until when they may be spent; for a refusal, until when the central bucket has none.
    until: float
    refused: RateLimited | None = None


class SharedRateLimiter:
    """One replica's side of a key's limit shared by every replica: it takes the key's requests
    from the central bucket (``grant``) up to ``lease`` at a time and spends them itself, so
    most requests cost no call. A refusal is remembered until its ``retry_after_s`` (the central
    bucket has nothing sooner): a key over its limit costs no call either.

    When the central bucket does not answer (its actor restarts, its node died), ``fallback``,
    this replica's own bucket, limits for ``fallback_s``: meanwhile a key may send up to its
    rate to each replica, as before limits were shared.

    Args:
        grant: the central bucket (:data:`Grant`).
        lease: requests taken at once at most (1: a call per request).
        lease_s: how long a replica may hold requests it was granted; older ones are dropped.
        fallback: the replica's own limiter, for when ``grant`` does not answer.
        clock: monotonic seconds (tests move their own).
    """

    def __init__(
        self,
        grant: Grant,
        *,
        lease: int,
        lease_s: float,
        fallback: RateLimiter,
        fallback_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._grant = grant
        self._lease = max(1, lease)
        self._lease_s = lease_s
        self._fallback = fallback
        self._fallback_s = fallback_s
        self._clock = clock
        self._leases: dict[str, _Lease] = {}
        self._asking: dict[str, asyncio.Future[None]] = {}  # one grant call per key at a time
        self._alone_until = -1.0  # the central bucket did not answer: the fallback limits until then
        #: Calls made to the central bucket, for the benchmark and the tests.
        self.calls = 0

    async def take(self, tenant: str, key_id: str) -> None:
        """Spend one request of ``key_id``'s allowance (a key of ``tenant``).

        Raises:
            RateLimited: the allowance is spent; ``retry_after_s`` says when one is back.
        """
        while True:
            now = self._clock()
            if now < self._alone_until:
                self._fallback.take(key_id)
                return
            lease = self._leases.get(key_id)
            if lease is not None and now < lease.until:
                if lease.refused is not None:
                    wait = round(lease.until - now, 3)
                    raise RateLimited(lease.refused.message, retry_after_s=wait)
                if lease.left > 0:
                    lease.left -= 1
                    return
            asking = self._asking.get(key_id)
            if asking is None:
                asking = self._asking[key_id] = asyncio.ensure_future(self._ask(tenant, key_id))
                asking.add_done_callback(lambda _: self._asking.pop(key_id, None))
            await asyncio.shield(asking)  # a caller that goes away does not cancel the others' call

    async def _ask(self, tenant: str, key_id: str) -> None:
        self.calls += 1
        try:
            granted = await self._grant(tenant, key_id, self._lease)
        except RateLimited as exc:
            wait = float(exc.details.get("retry_after_s", 0.0))
            self._leases[key_id] = _Lease(0, self._clock() + wait, exc)
            return
        except StoreUnavailable:
            self._alone_until = self._clock() + self._fallback_s
            return
        self._leases[key_id] = _Lease(granted, self._clock() + self._lease_s)
        if len(self._leases) > 100_000:  # forget the stale ones rather than grow without end
            now = self._clock()
            for name, lease in list(self._leases.items()):
                if lease.until <= now:
                    del self._leases[name]
