"""The per-key token bucket, on a clock the test moves."""

from __future__ import annotations

import pytest

from strata.access.ratelimit import RateLimiter
from strata.errors import RateLimited


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
