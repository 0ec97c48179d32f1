"""Retrieval metrics over evidence turn ids, as LoCoMo's own evaluation defines them.

For a question with evidence set E and retrieved ids R in rank order:

* recall@k = |E ∩ R[:k]| / |E|  (LoCoMo)
* any@k    = 1 if E ∩ R[:k] is non-empty, else 0  (LongMemEval-style)

``R[:k]`` is the first k entries as returned: a retriever that returns the same
turn twice spends two of its k slots on it, and the turn counts once.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

__all__ = ["Scoreboard", "any_at_k", "recall_at_k"]


def _hits(evidence: Collection[str], retrieved: Sequence[str], k: int) -> tuple[int, int]:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    wanted = set(evidence)
    if not wanted:
        raise ValueError("evidence is empty: recall is undefined")
    return len(wanted.intersection(retrieved[:k])), len(wanted)


def recall_at_k(evidence: Collection[str], retrieved: Sequence[str], k: int) -> float:
    """Fraction of the evidence turns found in the top ``k`` retrieved ids.

    Raises:
        ValueError: If ``evidence`` is empty or ``k < 1``.
    """
    found, total = _hits(evidence, retrieved, k)
    return found / total


def any_at_k(evidence: Collection[str], retrieved: Sequence[str], k: int) -> float:
    """1.0 if any evidence turn is in the top ``k`` retrieved ids, else 0.0.

    Raises:
        ValueError: If ``evidence`` is empty or ``k < 1``.
    """
    found, _ = _hits(evidence, retrieved, k)
    return 1.0 if found else 0.0


class Scoreboard:
    """Collects per-question retrievals and reports mean metrics, overall and by category.

    Example::

        board = Scoreboard()
        board.add("single-hop", ["D1:3"], retriever.search(question, 20))
        board.report((1, 5, 10))
        # {"overall": {"recall@1": ..., "any@1": ..., ..., "questions": n},
        #  "categories": {"single-hop": {...}}}
    """

    def __init__(self) -> None:
        self._entries: list[tuple[str, frozenset[str], tuple[str, ...]]] = []

    def add(self, category: str, evidence: Collection[str], retrieved: Sequence[str]) -> None:
        """Record one question's evidence and its retrieved ids (best first).

        Raises:
            ValueError: If ``evidence`` is empty (such a question cannot be scored).
        """
        wanted = frozenset(evidence)
        if not wanted:
            raise ValueError("evidence is empty: the question cannot be scored")
        self._entries.append((category, wanted, tuple(retrieved)))

    def __len__(self) -> int:
        return len(self._entries)

    def report(self, ks: Iterable[int]) -> dict[str, Any]:
        """Mean recall@k and any@k for each k, overall and per category.

        Returns ``{"overall": {"recall@<k>": float, "any@<k>": float, ...,
        "questions": int}, "categories": {name: {same keys}}}`` with categories
        sorted by name. With no questions the means are 0.0.

        Raises:
            ValueError: If a k is less than 1.
        """
        ks = sorted(set(ks))
        for k in ks:
            if k < 1:
                raise ValueError(f"k must be at least 1, got {k}")
        by_category: dict[str, list[tuple[frozenset[str], tuple[str, ...]]]] = {}
        for category, evidence, retrieved in self._entries:
            by_category.setdefault(category, []).append((evidence, retrieved))
        everything = [(evidence, retrieved) for _, evidence, retrieved in self._entries]
        return {
            "overall": _summary(everything, ks),
            "categories": {name: _summary(by_category[name], ks) for name in sorted(by_category)},
        }


def _summary(entries: Sequence[tuple[frozenset[str], tuple[str, ...]]], ks: Sequence[int]) -> dict[str, Any]:
    n = len(entries)
    summary: dict[str, Any] = {}
    for k in ks:
        recall = sum(recall_at_k(e, r, k) for e, r in entries)
        hit = sum(any_at_k(e, r, k) for e, r in entries)
        summary[f"recall@{k}"] = recall / n if n else 0.0
        summary[f"any@{k}"] = hit / n if n else 0.0
    summary["questions"] = n
    return summary
