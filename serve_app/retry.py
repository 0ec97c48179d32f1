"""When the HTTP clients retry a call and how long they wait: full-jitter exponential backoff,
bounded in attempts and in total wait, and never sooner than the server's ``Retry-After``.

The TypeScript client's policy (``clients/typescript/src/retry.ts``), with its defaults: a 429 or
a 503 is retried, and so is a request that got no answer at all (but not one that timed out: the
timeout is the caller's bound); a write only when it carries an ``Idempotency-Key``, which the
server uses to apply it once however often it arrives; a 409 for a key whose first attempt is
still being applied is retried after its ``Retry-After`` too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from strata.errors import StrataError

__all__ = ["NO_RETRY", "Attempts", "Retry", "parse_retry_after"]


@dataclass(frozen=True, kw_only=True)
class Retry:
    """How a client retries; ``Retry(max_attempts=1)`` (:data:`NO_RETRY`) turns retries off.

    Args:
        max_attempts: attempts in all, the first included.
        base_delay_s: the first backoff's cap: retry *n* waits a random time in
            ``[0, base_delay_s * 2**(n-1)]``, after the server's ``Retry-After`` when it sent one.
        max_delay_s: the cap of one backoff (``Retry-After`` comes on top of it).
        max_total_wait_s: the most a call waits between its attempts; a wait that would pass
            it is not made, and the last error is raised at once.
        statuses: the statuses retried.

    Raises:
        ValueError: a bound that is negative or not finite, or ``max_attempts`` below 1.
    """

    max_attempts: int = 4
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0
    max_total_wait_s: float = 30.0
    statuses: frozenset[int] = frozenset({429, 503})

    def __post_init__(self) -> None:
        for name in ("max_attempts", "base_delay_s", "max_delay_s", "max_total_wait_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Retry.{name} must be a finite number >= 0, not {value}")
        if self.max_attempts < 1:
            raise ValueError("Retry.max_attempts must be at least 1")

    def backoff_s(self, retry: int, retry_after_s: float | None = None,
                  draw: Callable[[], float] = random.random) -> float:
        """The wait before retry number ``retry`` (1 for the first): the server's ``Retry-After``,
        then a uniform draw from ``[0, min(max_delay_s, base_delay_s * 2**(retry-1))]`` ("full
        jitter"), so the callers it refused together do not all come back at the same instant."""
        cap = min(self.max_delay_s, self.base_delay_s * 2.0 ** max(0, retry - 1))
        return (retry_after_s or 0.0) + draw() * cap


#: Each call is tried once.
NO_RETRY = Retry(max_attempts=1)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds (``"3"``) or an HTTP date; ``None`` when absent
    or unreadable, 0 for a date in the past."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        at = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max(0.0, (at - (now or datetime.now(UTC))).total_seconds())


class Attempts:
    """One call's attempts under a policy: after each failure, whether to try again and after
    how long.

    Args:
        policy: the client's.
        retriable: whether the call may be sent twice (a read, or a write with an Idempotency-Key).
        keyed: whether it carries an Idempotency-Key.
    """

    def __init__(self, policy: Retry, *, retriable: bool, keyed: bool) -> None:
        self._policy = policy if retriable else NO_RETRY
        self._keyed = keyed
        self._attempt = 1
        self._waited_s = 0.0

    def wait_s(self, failure: Exception, retry_after: str | None = None) -> float | None:
        """How long to wait before the next attempt after ``failure`` (an answer's
        :class:`~strata.errors.StrataError`, or the ``httpx.TransportError`` of no answer, with
        the answer's ``Retry-After`` header); ``None``: raise it."""
        policy = self._policy
        if self._attempt >= policy.max_attempts:
            return None
        after_s = parse_retry_after(retry_after)
        if isinstance(failure, StrataError):
            status = int(failure.details.get("status", failure.status_code))
            if after_s is None and failure.details.get("retry_after_s") is not None:
                after_s = float(failure.details["retry_after_s"])  # the client's own 503 for Serve's proxy
            in_flight = status == 409 and self._keyed and after_s is not None
            if status not in policy.statuses and not in_flight:
                return None
        elif isinstance(failure, httpx.TimeoutException) or not isinstance(failure, httpx.TransportError):
            return None
        delay = policy.backoff_s(self._attempt, after_s)
        if self._waited_s + delay > policy.max_total_wait_s:
            return None
        self._attempt += 1
        self._waited_s += delay
        return delay
