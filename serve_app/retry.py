"""The HTTP side of the clients' retry policy (:mod:`strata.retry`): the ``Retry-After`` header,
and which failures of a request are an answer, no answer, or a timeout (the caller's bound,
never retried).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from strata.errors import StrataError
from strata.retry import NO_RETRY, Attempts, Retry

__all__ = ["NO_RETRY", "Attempts", "Retry", "parse_retry_after", "wait_s"]


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


def wait_s(attempts: Attempts, failure: Exception, retry_after: str | None = None) -> float | None:
    """How long to wait before the next attempt after ``failure`` (an answer's
    :class:`~strata.errors.StrataError` with the answer's ``Retry-After`` header, or the
    ``httpx.TransportError`` of no answer); ``None``: raise it."""
    if isinstance(failure, StrataError):
        return attempts.wait_s(failure, parse_retry_after(retry_after))
    if isinstance(failure, httpx.TransportError) and not isinstance(failure, httpx.TimeoutException):
        return attempts.wait_s(None)
    return None
