"""Pages of ids in id order, at the cost of the page.

A listing that sorted every id for each page (``GET /v1/sessions``, ``GET /v1/documents``) made
paging through n ids quadratic and held the shard's thread for the whole sort on every call:
63.6 ms a page at 20,000 sessions of one tenant, so a caller listing them in a loop slowed every
tenant of that shard. :class:`SortedIds` keeps the ids sorted as they come and go, and a page is
a bisection and a slice.
"""

from __future__ import annotations

import bisect

__all__ = ["SortedIds"]


class SortedIds:
    """A set of ids kept in sorted order.

    Examples:
        >>> ids = SortedIds()
        >>> for i in ("b", "a", "c"):
        ...     ids.add(i)
        >>> ids.page(after="a", limit=1)
        (['b'], True)
    """

    def __init__(self) -> None:
        self._ids: list[str] = []

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, item_id: str) -> None:
        at = bisect.bisect_left(self._ids, item_id)
        if at == len(self._ids) or self._ids[at] != item_id:
            self._ids.insert(at, item_id)

    def discard(self, item_id: str) -> None:
        at = bisect.bisect_left(self._ids, item_id)
        if at < len(self._ids) and self._ids[at] == item_id:
            del self._ids[at]

    def page(self, *, after: str | None, limit: int) -> tuple[list[str], bool]:
        """The first ``limit`` ids after ``after`` (from the first when None), and whether more follow."""
        start = 0 if after is None else bisect.bisect_right(self._ids, after)
        return self._ids[start : start + limit], start + limit < len(self._ids)
