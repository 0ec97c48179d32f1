"""Time as Strata stores it: aware UTC datetimes in the API, epoch milliseconds in rows.

Every layer and the store convert through these four functions, so a naive
datetime is read as UTC in one place only.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["from_ms", "from_ms_or_none", "now_ms", "to_ms"]


def now_ms() -> int:
    """The current time in epoch milliseconds."""
    return int(time.time() * 1000)


def to_ms(t: datetime) -> int:
    """``t`` in epoch milliseconds; a naive ``t`` is taken to be UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds ``ms``."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def from_ms_or_none(ms: int | None) -> datetime | None:
    """:func:`from_ms`, or None for a missing (None or 0) time."""
    return from_ms(ms) if ms else None
