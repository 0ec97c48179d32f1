"""Each turn's session neighbours, as rows of the turn index: what makes the dense path
neighbour-aware.

A question often names one fact and asks for another; the turn with the answer shares
little with it, in words or in meaning, and a turn a few places away holds the rest. The
lexical path adds a share of the best neighbour's BM25 score to a turn's own
(``EpisodicMemory._lexical_top``); the dense path adds a share of how far its best
neighbour's cosine is above its own (:func:`strata.episodic.ranking.ranked`), and
:class:`NeighbourRows` gives that best cosine for every turn of the index at once: one
gather and a max over a ``2 window x rows`` matrix (0.06 ms for 10,000 turns here),
instead of a walk through the sessions per query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from strata.retrieval.vectors import VectorIndex

__all__ = ["NeighbourRows"]

#: A session's turns in time order, each ``(sort key, index key)``.
Order = Sequence[tuple[Any, str]]


class NeighbourRows:
    """For each row of a :class:`VectorIndex`, the rows of up to ``window`` turns either side
    of it in its session's time order (-1 where there are fewer).

    Adding a turn updates the rows around it (:meth:`inserted`); removing rows renumbers
    the index, so :meth:`invalidate` marks the whole matrix for a rebuild on the next read.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        # Column r holds row r's neighbours: the layout np.take reads fastest.
        self._rows = np.full((2 * window, 16), -1, dtype=np.intp)
        self._valid = True

    def invalidate(self) -> None:
        self._valid = False

    def inserted(self, index: VectorIndex, order: Order, position: int) -> None:
        """The turn at ``position`` of ``order`` was just added to ``index``: the turns
        within ``window`` places of it have new neighbours."""
        if not self._valid:
            return  # rebuilt whole on the next read
        self._fit(len(index))
        w = self.window
        for place in range(max(position - w, 0), min(position + w + 1, len(order))):
            self._fill(index, order, place)

    def best(self, scores: np.ndarray, index: VectorIndex, orders: Mapping[str, Order]) -> np.ndarray:
        """For each row, the best of ``scores`` among its neighbours (-inf for a row without any)."""
        if not self._valid:
            self._rebuild(index, orders)
        if not len(scores):
            return scores
        padded = np.append(scores, np.float32(-np.inf))  # row -1, no neighbour, reads this
        near: np.ndarray = np.take(padded, self._rows[:, : len(scores)]).max(axis=0)
        return near

    def _rebuild(self, index: VectorIndex, orders: Mapping[str, Order]) -> None:
        self._rows = np.full((2 * self.window, max(len(index), 16)), -1, dtype=np.intp)
        for order in orders.values():
            for place in range(len(order)):
                self._fill(index, order, place)
        self._valid = True

    def _fit(self, n: int) -> None:
        have = self._rows.shape[1]
        if n > have:
            grown = np.full((2 * self.window, max(n, 2 * have)), -1, dtype=np.intp)
            grown[:, :have] = self._rows
            self._rows = grown

    def _fill(self, index: VectorIndex, order: Order, place: int) -> None:
        row = index.position(order[place][1])
        if row is None:
            return
        w = self.window
        near = [index.position(order[j][1]) for j in range(max(place - w, 0), min(place + w + 1, len(order))) if j != place]
        filled = [r for r in near if r is not None]
        self._rows[:, row] = -1
        self._rows[: len(filled), row] = filled
