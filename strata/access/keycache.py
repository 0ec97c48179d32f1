"""What the key store last said of each bearer key, kept a moment per API replica.

A known key is kept ``known_ttl_s`` (1 s by default) after its read *started*, then read
again (a key in use ahead of time, once it is :meth:`KeyCache.due`, so that no request waits
for the read): a key revoked on any replica, or by ``strata keys revoke``, is refused everywhere
within that time, and a replica that revokes a key itself forgets it at once
(:meth:`KeyCache.drop`). An unknown key is kept as unknown ``unknown_ttl_s``, so a flood of
one wrong key costs one store read a second, and a key created a moment ago works within
that time. At most ``max_entries`` keys are kept, the least recently used leaving first, so
a flood of random keys cannot grow the replica's memory.

Entries are by the key's hash (:func:`~strata.access.keys.hash_key`), never the key.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from strata.access.keys import KeyInfo

__all__ = ["CachedKey", "KeyCache"]


@dataclass(frozen=True, slots=True)
class CachedKey:
    """One answer of the store: the active key's info, or None for an unknown or revoked key."""

    info: KeyInfo | None
    until: float


class KeyCache:
    """A bounded LRU of key lookups with a time to live, on a monotonic clock."""

    def __init__(
        self,
        *,
        known_ttl_s: float = 1.0,
        unknown_ttl_s: float = 1.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._known_ttl_s = known_ttl_s
        self._unknown_ttl_s = unknown_ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, CachedKey] = OrderedDict()

    def now(self) -> float:
        """The cache's clock: read it before a store read and pass it to :meth:`put`."""
        return self._clock()

    def get(self, digest: str) -> CachedKey | None:
        """The live entry of a key hash; None when there is none, or it has expired (an expired
        entry stays, for :meth:`known`, until it is read again or the least recently used)."""
        entry = self._entries.get(digest)
        if entry is None or entry.until <= self._clock():
            return None
        self._entries.move_to_end(digest)
        return entry

    def due(self, entry: CachedKey) -> bool:
        """Whether a live entry is past half its time: read it again now, in the background,
        and its next answer is there before this one expires (a strong read of a Milvus
        server takes about 200 ms)."""
        return entry.until - self._clock() < self._known_ttl_s / 2

    def known(self, digest: str) -> bool:
        """Whether the store's last answer for this key hash, however old, was an active key:
        reading it again is no guess."""
        entry = self._entries.get(digest)
        return entry is not None and entry.info is not None

    def put(self, digest: str, info: KeyInfo | None, *, read_at: float) -> None:
        """Keep the store's answer for a key hash, counting its time from ``read_at`` (when the
        read began: an answer read just before a revocation expires no later than the TTL after it)."""
        ttl_s = self._known_ttl_s if info is not None else self._unknown_ttl_s
        if ttl_s <= 0 or self._max_entries <= 0:
            return
        self._entries[digest] = CachedKey(info, read_at + ttl_s)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def drop(self, key_id: str) -> None:
        """Forget the key ``key_id`` names (revoked or rotated by this replica)."""
        for digest in [d for d, e in self._entries.items() if e.info is not None and e.info.key_id == key_id]:
            del self._entries[digest]

    def __len__(self) -> int:
        return len(self._entries)
