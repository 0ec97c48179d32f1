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
from collections import defaultdict
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
    """Okapi BM25 over documents added and removed one by one."""

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self._k1 = k1
        self._b = b
        self._postings: dict[str, set[str]] = defaultdict(set)
        self._terms: dict[str, frozenset[str]] = {}
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._terms)

    def add(self, doc_id: str, text: str) -> None:
        self.remove([doc_id])
        terms = lexical_terms(text)
        self._terms[doc_id] = terms
        self._total_length += len(terms)
        for term in terms:
            self._postings[term].add(doc_id)

    def remove(self, doc_ids: Iterable[str]) -> None:
        for doc_id in doc_ids:
            terms = self._terms.pop(doc_id, None)
            if terms is None:
                continue
            self._total_length -= len(terms)
            for term in terms:
                posting = self._postings[term]
                posting.discard(doc_id)
                if not posting:
                    del self._postings[term]

    def scores(self, query: str) -> dict[str, float]:
        """BM25 score of every document sharing a term with ``query`` (others score 0)."""
        n = len(self._terms)
        if not n:
            return {}
        average = max(self._total_length / n, 1.0)
        scores: dict[str, float] = defaultdict(float)
        for term in lexical_terms(query):
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for doc_id in posting:
                length = len(self._terms[doc_id])
                scores[doc_id] += idf * (self._k1 + 1) / (1 + self._k1 * (1 - self._b + self._b * length / average))
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
