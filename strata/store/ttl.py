"""Expiry of memories: when each item of a tenant's layer expires.

A layer records each expiring item's deadline here (epoch milliseconds) as
it indexes the item, from the ``expires_ms`` its durable row carries. The
layer actor asks :meth:`Expiries.due` before it answers any call, and
purges what is due first (see :mod:`strata_actors.expiry`), so an expired item is
never returned; a periodic sweep purges tenants nobody calls.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterable
from datetime import datetime
from typing import Generic, TypeVar

__all__ = ["EXPIRES", "Expiries", "expires_ms"]

K = TypeVar("K", bound=Hashable)

#: The payload key of a durable row's deadline (epoch ms); absent = it never expires.
EXPIRES = "expires_ms"


def expires_ms(ttl_s: float | None, *, now: datetime | None = None) -> int | None:
    """The deadline of an item written ``now`` that lives ``ttl_s`` seconds (None: forever)."""
    if not ttl_s:
        return None
    start = now.timestamp() if now is not None else time.time()
    return int((start + ttl_s) * 1000)


class Expiries(Generic[K]):
    """Deadlines of the items that have one; the earliest is cached."""

    def __init__(self) -> None:
        self._at: dict[K, int] = {}
        self._due: int | None = None

    def __len__(self) -> int:
        return len(self._at)

    def keys(self) -> list[K]:
        return list(self._at)

    def get(self, key: K) -> int | None:
        return self._at.get(key)

    def set(self, key: K, at_ms: int | None) -> None:
        if at_ms is None:
            self.drop([key])
            return
        self._at[key] = int(at_ms)
        if self._due is None or at_ms < self._due:
            self._due = int(at_ms)

    def drop(self, keys: Iterable[K]) -> None:
        changed = False
        for key in keys:
            changed |= self._at.pop(key, None) is not None
        if changed:
            self._due = min(self._at.values(), default=None)

    def due(self) -> int | None:
        """The earliest deadline, or None when nothing expires."""
        return self._due

    def expired(self, at_ms: int) -> list[K]:
        """Keys whose deadline is ``at_ms`` or earlier."""
        if self._due is None or self._due > at_ms:
            return []
        return [key for key, deadline in self._at.items() if deadline <= at_ms]
