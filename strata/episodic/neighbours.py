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

from collections.abc import Sequence
from typing import Any

import numpy as np

from strata.retrieval.vectors import VectorIndex

__all__ = ["NeighbourRows"]

#: A session's turns in time order, each ``(sort key, index key)``.
Order = Sequence[tuple[Any, str]]


class NeighbourRows:
    """For each row of a :class:`VectorIndex`, the rows of up to ``window`` turns either side
    of it in its session's time order (-1 where there are fewer).

    Adding a turn updates the rows around it (:meth:`inserted`); removing rows renumbers the
    matrix (:meth:`removed`) and the rows around the gaps are filled again (:meth:`refill`):
    each costs the turns it touches, not the tenant.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        # Column r holds row r's neighbours: the layout np.take reads fastest.
        self._rows = np.full((2 * window, 16), -1, dtype=np.intp)

    def inserted(self, index: VectorIndex, order: Order, position: int) -> None:
        """The turn at ``position`` of ``order`` was just added to ``index``: the turns
        within ``window`` places of it have new neighbours."""
        self._fit(len(index))
        self.refill(index, order, position)

    def removed(self, rows: Sequence[int], n: int) -> None:
        """``rows`` of an index of ``n`` rows were removed, the rest renumbered in their order
        (:meth:`VectorIndex.remove`): the matrix follows, in one gather. A turn that had a
        removed one as a neighbour is short of it until :meth:`refill`."""
        if not rows:
            return
        kept = np.ones(n, dtype=bool)
        kept[list(rows)] = False
        renumbered = np.append(np.cumsum(kept) - 1, -1)  # old row -> new row; -1 (none) stays -1
        renumbered[:-1][~kept] = -1
        self._rows = renumbered[self._rows[:, :n][:, kept]]

    def refill(self, index: VectorIndex, order: Order, position: int) -> None:
        """The turns within ``window`` places of ``position`` of ``order`` have new
        neighbours: a turn arrived there, or turns there were removed."""
        w = self.window
        for place in range(max(position - w, 0), min(position + w + 1, len(order))):
            self._fill(index, order, place)

    def best(self, scores: np.ndarray) -> np.ndarray:
        """For each row, the best of ``scores`` among its neighbours (-inf for a row without any)."""
        if not len(scores):
            return scores
        padded = np.append(scores, np.float32(-np.inf))  # row -1, no neighbour, reads this
        near: np.ndarray = np.take(padded, self._rows[:, : len(scores)]).max(axis=0)
        return near

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
        around = range(max(place - w, 0), min(place + w + 1, len(order)))
        near = [index.position(order[j][1]) for j in around if j != place]
        filled = [r for r in near if r is not None]
        self._rows[:, row] = -1
        self._rows[: len(filled), row] = filled
