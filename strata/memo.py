"""Values worth remembering between calls, within a bound.

A context is fitted from the same item lines call after call: their token counts
(:mod:`strata.providers.tokens`) and their texts made one line (:mod:`strata.context.assemble`)
are remembered here, the least recently used forgotten first once the entries weigh more than
the bound, so what a process keeps does not grow with what it has seen.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["BoundedMemo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """Values by key, the least recently used forgotten once the entries weigh more than
    ``max_weight`` (each ``weight(key, value)``, 1 by default: a bound on their number). An
    entry heavier than the bound alone is not kept. Safe across threads (the event loop and
    worker threads share one); a value is made outside the lock, so two threads may make the
    same one.

    Example:
        >>> lengths = BoundedMemo[str, int](max_weight=2)
        >>> lengths.get("ab", lambda: len("ab"))
        2
    """

    def __init__(self, *, max_weight: int, weight: Callable[[K, V], int] | None = None) -> None:
        self._values: OrderedDict[K, V] = OrderedDict()
        self._weight = weight
        self._max_weight = max_weight
        #: What the entries weigh together.
        self.weight = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[K]:
        """The keys kept, the least recently used first."""
        with self._lock:
            return list(self._values)

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``make()``, kept."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        weight = 1 if self._weight is None else self._weight(key, value)
        with self._lock:
            if key not in self._values and weight <= self._max_weight:
                self._values[key] = value
                self.weight += weight
                while self.weight > self._max_weight:
                    old, old_value = self._values.popitem(last=False)
                    self.weight -= 1 if self._weight is None else self._weight(old, old_value)
        return value
