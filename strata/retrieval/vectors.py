"""An exact in-memory vector index: the hot copy of a layer's durable vectors.

A layer actor is the single writer of a tenant's rows and of this index, so
the two never disagree; search is a matrix product (numpy brute force over
20k × 384 vectors takes ~2 ms here, DESIGN.md), exact, with no index to
build or flush.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["VectorIndex", "best"]


class VectorIndex:
    """Row ids, each in a group (a session, a document), plus a matrix of their
    vectors, grown by doubling (appends are O(1))."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.groups: list[str] = []
        self._matrix: np.ndarray | None = None
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, item_id: str, vector: np.ndarray, group: str) -> None:
        n = len(self.ids)
        self._pos[item_id] = n
        if self._matrix is None:
            self._matrix = np.zeros((16, vector.shape[-1]), dtype=np.float32)
        elif n == len(self._matrix):
            self._matrix = np.vstack([self._matrix, np.zeros_like(self._matrix)])
        self._matrix[n] = vector
        self.ids.append(item_id)
        self.groups.append(group)

    def remove_group(self, group: str) -> None:
        self._keep([i for i, g in enumerate(self.groups) if g != group])

    def remove(self, item_ids: set[str]) -> None:
        self._keep([i for i, item_id in enumerate(self.ids) if item_id not in item_ids])

    def _keep(self, keep: list[int]) -> None:
        if len(keep) == len(self.ids):
            return
        self.ids = [self.ids[i] for i in keep]
        self.groups = [self.groups[i] for i in keep]
        if self._matrix is not None:
            self._matrix = self._matrix[keep] if keep else None
        self._pos = {item_id: n for n, item_id in enumerate(self.ids)}

    def set(self, item_id: str, vector: np.ndarray) -> None:
        """Replace the indexed vector of an item already in the index."""
        self._rows()[self._pos[item_id]] = vector

    def position(self, item_id: str) -> int | None:
        """The row of ``item_id`` in :meth:`scores`' result (None: not indexed)."""
        return self._pos.get(item_id)

    def vectors(self, item_ids: list[str]) -> np.ndarray:
        """The indexed vectors of ``item_ids`` (each in the index), one row each."""
        return self._rows()[[self._pos[item_id] for item_id in item_ids]]

    def _rows(self) -> np.ndarray:
        if self._matrix is None:  # nothing is indexed, so no item asked for is
            raise KeyError("the vector index is empty")
        return self._matrix

    def scores(self, query: np.ndarray) -> np.ndarray:
        if self._matrix is None or not self.ids:
            return np.zeros(0, dtype=np.float32)
        return self._matrix[: len(self.ids)] @ query.astype(np.float32)


def best(
    index: VectorIndex,
    query: np.ndarray,
    top_k: int,
    keep: Callable[[str], bool] | None = None,
    *,
    scores: np.ndarray | None = None,
) -> list[tuple[str, float]]:
    """The ``top_k`` best-scoring ids of ``index`` that ``keep`` accepts (filter, then cut);
    ``scores``: ``index.scores(query)`` when the caller has it already."""
    scores = index.scores(query) if scores is None else scores
    if keep is None:
        return [(index.ids[i], float(scores[i])) for i in _best_rows(scores, top_k)]
    # Most filters keep most ids: look through the best few first (a partition, linear), and
    # sort the whole index only when they do not hold ``top_k`` accepted ids.
    first = max(4 * top_k, 64)
    found = _accepted(index, scores, _best_rows(scores, first), keep, top_k)
    if len(found) < top_k and first < len(scores):
        found = _accepted(index, scores, _best_rows(scores, len(scores)), keep, top_k)
    return found


def _best_rows(scores: np.ndarray, n: int) -> np.ndarray:
    """The rows of the ``n`` highest ``scores``, highest first (ties by row): a partition
    before the sort when ``n`` is less than all of them."""
    if n < len(scores):
        top = np.argpartition(-scores, n)[:n]
        return top[np.argsort(-scores[top], kind="stable")]
    return np.argsort(-scores, kind="stable")


def _accepted(
    index: VectorIndex, scores: np.ndarray, order: np.ndarray, keep: Callable[[str], bool], top_k: int
) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    for i in order:
        key = index.ids[i]
        if keep(key):
            found.append((key, float(scores[i])))
            if len(found) >= top_k:
                break
    return found
