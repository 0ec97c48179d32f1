"""The per-key token bucket, and one key's bucket shared by replicas, on a clock the test moves."""

from __future__ import annotations

import pytest

from strata.access.ratelimit import RateLimiter, SharedRateLimiter
from strata.errors import RateLimited, StoreUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_rate_then_retry_after() -> None:
    clock = Clock()
    limiter = RateLimiter(per_s=10, burst=5, clock=clock)
    for _ in range(5):
        limiter.take("k1")
    with pytest.raises(RateLimited) as info:
        limiter.take("k1")
    assert info.value.status_code == 429 and info.value.details["retry_after_s"] == pytest.approx(0.1)
    limiter.take("k2")  # another key has its own allowance
    clock.now += 0.1
    limiter.take("k1")  # one token back after 1/rate seconds
    with pytest.raises(RateLimited):
        limiter.take("k1")
    clock.now += 60
    for _ in range(5):  # refills up to the burst, not beyond
        limiter.take("k1")
    with pytest.raises(RateLimited):
        limiter.take("k1")


def test_zero_rate_means_no_limit() -> None:
    limiter = RateLimiter(per_s=0, burst=1, clock=Clock())
    for _ in range(1000):
        limiter.take("k")


def test_http_answer_is_429_with_retry_after() -> None:
    from strata_serve.errors import error_response

    response = error_response(RateLimited("slow down", retry_after_s=0.25))
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"


def test_check_refuses_as_take_would_and_spends_nothing() -> None:
    clock = Clock()
    limiter = RateLimiter(per_s=1, burst=2, clock=clock, what="this address")
    for _ in range(5):
        limiter.check("10.0.0.1")  # asking is free
    limiter.take("10.0.0.1")
    limiter.take("10.0.0.1")
    with pytest.raises(RateLimited) as info:
        limiter.check("10.0.0.1")
    assert "this address" in info.value.message and info.value.details["retry_after_s"] == pytest.approx(1.0)
    clock.now += 1
    limiter.check("10.0.0.1")
    limiter.take("10.0.0.1")


# -- one key's limit shared by replicas (strata_actors.limits holds the central bucket) --------


class Central:
    """The central bucket as the replicas call it; counts the calls, or does not answer."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter
        self.calls = 0
        self.down = False

    async def grant(self, tenant: str, key_id: str, want: int) -> int:
        self.calls += 1
        if self.down:
            raise StoreUnavailable("restarting", retry_after_s=2)
        return self.limiter.grant(key_id, want)


def replicas(clock: Clock, central: Central, n: int, *, lease: int = 4) -> list[SharedRateLimiter]:
    return [
        SharedRateLimiter(central.grant, lease=lease, lease_s=1.0, clock=clock,
                          fallback=RateLimiter(per_s=10, burst=5, clock=clock))
        for _ in range(n)
    ]


async def accepted(limiter: SharedRateLimiter, tenant: str, key_id: str) -> bool:
    try:
        await limiter.take(tenant, key_id)
    except RateLimited:
        return False
    return True


def test_a_grant_is_at_most_half_of_what_is_left_and_at_least_one() -> None:
    limiter = RateLimiter(per_s=1, burst=20, clock=Clock())
    assert [limiter.grant("k", 8) for _ in range(5)] == [8, 6, 3, 1, 1]
    limiter.grant("k", 8)
    with pytest.raises(RateLimited):
        limiter.grant("k", 8)


async def test_replicas_sharing_a_key_accept_its_burst_once_not_once_each() -> None:
    """Per-replica buckets let two replicas accept 2 x burst; the shared one accepts the burst."""
    clock = Clock()
    central = Central(RateLimiter(per_s=10, burst=20, clock=clock))
    one, two = replicas(clock, central, 2)
    taken = [await accepted(r, "acme", "k1") for _ in range(30) for r in (one, two)]
    assert sum(taken) == 20 and taken[:2] == [True, True]
    assert central.calls < 20  # most requests spent a grant: no call
    calls = central.calls
    assert not await accepted(one, "acme", "k1") and central.calls == calls  # a refusal is remembered
    clock.now += 0.2  # two requests back, for the first to ask
    assert [await accepted(r, "acme", "k1") for r in (two, one, two)] == [True, True, False]


async def test_an_unspent_grant_lapses_after_lease_s() -> None:
    clock = Clock()
    central = Central(RateLimiter(per_s=0.001, burst=20, clock=clock))
    [one] = replicas(clock, central, 1, lease=8)
    await one.take("acme", "k1")  # granted 8, 7 left here
    clock.now += 1.5
    await one.take("acme", "k1")
    assert central.calls == 2


async def test_concurrent_requests_share_one_call() -> None:
    import asyncio

    clock = Clock()
    central = Central(RateLimiter(per_s=10, burst=100, clock=clock))
    [one] = replicas(clock, central, 1, lease=10)
    await asyncio.gather(*(one.take("acme", "k1") for _ in range(10)))
    assert central.calls == 1


async def test_a_central_bucket_that_does_not_answer_leaves_each_replica_its_own_limit() -> None:
    clock = Clock()
    central = Central(RateLimiter(per_s=10, burst=100, clock=clock))
    central.down = True
    [one] = replicas(clock, central, 1)  # its own bucket: 5 at once
    taken = [await accepted(one, "acme", "k1") for _ in range(7)]
    assert taken == [True] * 5 + [False] * 2 and central.calls == 1  # not asked again for 2 s
    central.down = False
    clock.now += 2.5
    assert await accepted(one, "acme", "k1") and central.calls == 2
