"""When a client retries a call and how long it waits: full-jitter exponential backoff, bounded
in attempts and in total wait, and never sooner than the server's ``Retry-After``.

One policy for the HTTP clients (:mod:`strata_serve.client`, which read ``Retry-After`` and tell
an answer from no answer) and the in-cluster client (:mod:`strata_actors.client`), and the
TypeScript client's (``clients/typescript/src/retry.ts``), with its defaults: a 429 or a 503 is
retried, and so is a request that got no answer (but not one that timed out: the timeout is the
caller's bound); a write only when it carries an ``Idempotency-Key``, with which the server
applies it once however often it arrives; a 409 for a key whose first attempt is still being
applied is retried after its ``Retry-After`` too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from strata.errors import StrataError

__all__ = ["NO_RETRY", "Attempts", "Retry"]


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


class Attempts:
    """One call's attempts under a policy: after each failure, whether to try again and after
    how long.

    Args:
        policy: the client's.
        retriable: whether the call may be sent twice (a read, or a write with an Idempotency-Key).
        keyed: whether it carries an Idempotency-Key.
    """

    def __init__(self, policy: Retry, *, retriable: bool, keyed: bool = False) -> None:
        self._policy = policy if retriable else NO_RETRY
        self._keyed = keyed
        self._attempt = 1
        self._waited_s = 0.0

    def wait_s(self, failure: StrataError | None, retry_after_s: float | None = None) -> float | None:
        """How long to wait before the next attempt; ``None``: raise the failure.

        Args:
            failure: the answer's error, or ``None`` when no answer came.
            retry_after_s: the answer's ``Retry-After``; by default the error's ``retry_after_s``.
        """
        policy = self._policy
        if self._attempt >= policy.max_attempts:
            return None
        if failure is not None:
            status = int(failure.details.get("status", failure.status_code))
            if retry_after_s is None and failure.details.get("retry_after_s") is not None:
                retry_after_s = float(failure.details["retry_after_s"])
            in_flight = status == 409 and self._keyed and retry_after_s is not None
            if status not in policy.statuses and not in_flight:
                return None
        delay = policy.backoff_s(self._attempt, retry_after_s)
        if self._waited_s + delay > policy.max_total_wait_s:
            return None
        self._attempt += 1
        self._waited_s += delay
        return delay
