"""An incremental BM25 index for short texts (turns), and weighted rank fusion.

The episodic layer adds turns one at a time and forgets whole sessions, so a
static index (rebuilt per write) does not fit; this one keeps posting lists
and updates them in place. Terms are :func:`strata.importance.extract_terms` (English words without stop
words, plurals folded; CJK character bigrams), the content terms the rest of
Strata uses, plus jieba's words for CJK text: bigrams alone cut 过生日 into
过生 / 生日, and the word carries what the bigrams miss (MemSim R@10 0.460 ->
0.480). A term counts once per text: turns are short, and repeated words in
one turn are more often noise than signal.

Exact terms such as ``ERR_CONN_RESET`` or ``429`` match here even when the
embedding misses them; for languages the embedder does not know (the packaged
MiniLM is English-only) this path carries most of the recall.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter, defaultdict
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from strata.importance import CJK_STOP_CHARS, extract_terms

__all__ = ["LexicalIndex", "lexical_terms", "rrf_fuse", "cjk_share", "language_weights"]

_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")


@lru_cache(maxsize=1)
def _jieba() -> Any:
    import jieba

    jieba.setLogLevel(logging.WARNING)  # it announces its dictionary load on stderr
    return jieba


def lexical_terms(text: str) -> frozenset[str]:
    """The terms BM25 indexes: content terms, plus jieba's words for each CJK run."""
    terms = extract_terms(text)
    runs = _CJK_RUN.findall(text)
    if not runs:
        return terms
    words = {
        "w:" + word  # apart from the bigrams: a two-character word is also a bigram
        for run in runs
        for word in _jieba().cut(run)
        if len(word) > 1 or word not in CJK_STOP_CHARS
    }
    return terms | words


class LexicalIndex:
    """Okapi BM25 over documents added and removed one by one.

    A term counts once per text by default (turns are short, and a word
    repeated in one turn is more often noise than signal). With
    ``per_line=True`` it counts once per line, so a term that recurs through
    a longer text (a document chunk) weighs more: on the semantic layer's
    children, +0.019 R@10 on LoCoMo and +0.025 on MemSim (serve_app.bm25_compare).
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75, per_line: bool = False) -> None:
        self._k1 = k1
        self._b = b
        self._per_line = per_line
        self._postings: dict[str, set[str]] = defaultdict(set)
        self._counts: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._counts)

    def _count(self, text: str) -> dict[str, int]:
        if not self._per_line:
            return dict.fromkeys(lexical_terms(text), 1)
        counts: Counter[str] = Counter()
        for line in text.splitlines():
            if line.strip():
                counts.update(lexical_terms(line))
        return dict(counts)

    def add(self, doc_id: str, text: str) -> None:
        self.remove([doc_id])
        counts = self._count(text)
        self._counts[doc_id] = counts
        self._lengths[doc_id] = length = sum(counts.values())
        self._total_length += length
        for term in counts:
            self._postings[term].add(doc_id)

    def remove(self, doc_ids: Iterable[str]) -> None:
        for doc_id in doc_ids:
            counts = self._counts.pop(doc_id, None)
            if counts is None:
                continue
            self._total_length -= self._lengths.pop(doc_id)
            for term in counts:
                posting = self._postings[term]
                posting.discard(doc_id)
                if not posting:
                    del self._postings[term]

    def scores(self, query: str) -> dict[str, float]:
        """BM25 score of every document sharing a term with ``query`` (others score 0)."""
        n = len(self._counts)
        if not n:
            return {}
        average = max(self._total_length / n, 1.0)
        k1, b = self._k1, self._b
        scores: dict[str, float] = defaultdict(float)
        for term in lexical_terms(query):
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for doc_id in posting:
                tf = self._counts[doc_id][term]
                norm = k1 * (1 - b + b * self._lengths[doc_id] / average)
                scores[doc_id] += idf * tf * (k1 + 1) / (tf + norm)
        return dict(scores)


def rrf_fuse(
    rankings: Mapping[str, Sequence[str]], weights: Mapping[str, float], *, k: int = 60
) -> list[tuple[str, float, dict[str, int]]]:
    """Weighted reciprocal rank fusion.

    Args:
        rankings: per path, document ids best first.
        weights: per path; a path without a weight counts 0.

    Returns:
        ``(doc_id, score, {path: 1-based rank})`` best first; ``score`` is
        normalised so that first place on every weighted path scores 1.0.
    """
    total = sum(weights.get(path, 0.0) for path in rankings) or 1.0
    fused: dict[str, float] = defaultdict(float)
    ranks: dict[str, dict[str, int]] = defaultdict(dict)
    for path, ranking in rankings.items():
        weight = weights.get(path, 0.0)
        for position, doc_id in enumerate(ranking, start=1):
            fused[doc_id] += weight / (k + position)
            ranks[doc_id][path] = position
    best = (k + 1) / total
    ordered = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return [(doc_id, score * best, ranks[doc_id]) for doc_id, score in ordered]


def cjk_share(text: str) -> float:
    """Share of the letters in ``text`` that are CJK ideographs (0 for none)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    return sum(1 for c in letters if "\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff") / len(letters)


def language_weights(weights: Mapping[str, float], query: str, *, dense_cjk: float) -> dict[str, float]:
    """Fusion weights for ``query``: the ``dense`` weight moves toward ``dense_cjk``
    as the query's share of CJK text grows. The packaged MiniLM knows English
    only; for a multilingual embedder, set ``dense_cjk`` to the dense weight."""
    out = dict(weights)
    share = cjk_share(query)
    if share and "dense" in out:
        out["dense"] = out["dense"] * (1 - share) + dense_cjk * share
    return out
