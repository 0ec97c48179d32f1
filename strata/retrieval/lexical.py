"""An incremental BM25 index for short texts (turns), and weighted rank fusion.

The episodic layer adds turns one at a time and forgets whole sessions, so a
static index (rebuilt per write) does not fit; this one keeps posting lists
and updates them in place. Terms are :func:`strata.working.importance.extract_terms` (English words without stop
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

import functools
import itertools
import math
import re
import sys
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from strata.retrieval.segmenter import jieba
from strata.retrieval.terms import CJK_STOP_CHARS, extract_terms

__all__ = [
    "JIEBA_WINDOW_CHARS",
    "LANGUAGE_CHARS",
    "LexicalIndex",
    "cjk_share",
    "language_weights",
    "lexical_terms",
    "query_terms",
    "rrf_fuse",
    "score_fuse",
]

_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
#: The most characters of a CJK run jieba is given at once. Its HMM, which cuts the characters
#: its dictionary makes no word of, copies its path so far at every character: quadratic in such
#: a stretch (16,000 random ideographs, 0.54 s; in windows of this size, 0.19 s). A window's edge
#: may cut one word in two; real text is punctuated far more often (MemSim's longest run: 24).
JIEBA_WINDOW_CHARS = 1_000
#: The most counts :meth:`LexicalIndex.precount` keeps waiting for their :meth:`~LexicalIndex.add`
#: (a batch of turns, or a document's children, counted in one write); past it they are dropped,
#: and an add counts its text itself.
_PRECOUNTED_MAX = 100_000


def lexical_terms(text: str) -> frozenset[str]:
    """The terms BM25 indexes: content terms, plus jieba's words for each CJK run."""
    terms = extract_terms(text)
    runs = _CJK_RUN.findall(text)
    if not runs:
        return terms
    words = {
        "w:" + word  # apart from the bigrams: a two-character word is also a bigram
        for run in runs
        for start in range(0, len(run), JIEBA_WINDOW_CHARS)
        for word in jieba().cut(run[start : start + JIEBA_WINDOW_CHARS])
        if len(word) > 1 or word not in CJK_STOP_CHARS
    }
    return terms | words


@functools.lru_cache(maxsize=16)
def query_terms(query: str) -> frozenset[str]:
    """:func:`lexical_terms` of a query, kept for the last few queries (the result is
    immutable): one search reads its query's terms several times (each list's scores, their
    relevance, the feedback terms), and a 16,000-character query's cost 7-16 ms each time."""
    return lexical_terms(query)


class LexicalIndex:
    """Okapi BM25 over documents added and removed one by one.

    A term counts once per text by default (turns are short, and a word
    repeated in one turn is more often noise than signal). With
    ``per_line=True`` it counts once per line, so a term that recurs through
    a longer text (a document chunk) weighs more: on the semantic layer's
    children, +0.019 R@10 on LoCoMo and +0.025 on MemSim (strata_bench.bm25_compare).

    Each document has an integer slot; a term's postings are compact arrays
    of slots and counts, scored with numpy, so a query costs about a
    millisecond even when a common term is in 50k documents (a Python loop
    over postings took ~80 ms there). Removal marks a slot dead; dead slots
    are compacted away once they outnumber the live ones.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75, per_line: bool = False) -> None:
        self._k1 = k1
        self._b = b
        self._per_line = per_line
        self._slot: dict[str, int] = {}  # doc id -> slot
        self._ids: list[str | None] = []  # slot -> doc id (None: dead)
        self._terms: list[tuple[str, ...]] = []  # slot -> its terms
        self._lengths = np.zeros(16, dtype=np.float32)
        self._postings: dict[str, tuple[array[int], array[int]]] = {}  # term -> (slots, counts)
        self._df: dict[str, int] = {}  # term -> live documents
        self._total_length = 0.0
        self._dead = 0
        # The last query's scores: a search scores one query twice (its ranking, then each
        # hit's relevance), and nothing changes the index in between.
        self._last: tuple[str, int, np.ndarray | None] | None = None
        self._changes = 0
        # Terms counted ahead of :meth:`add` by :meth:`precount`: doc id -> (its text, the counts).
        self._precounted: dict[str, tuple[str, dict[str, int]]] = {}

    def __len__(self) -> int:
        return len(self._slot)

    def precount(self, doc_id: str, text: str) -> None:
        """Count ``text``'s terms now, for the :meth:`add` of the same id and text to come.

        Segmenting a text is the costly part of adding it (16,000 random ideographs: 0.2 s). A
        layer calls this from the worker thread that writes its rows, so that the :meth:`add`
        which follows on an actor's event loop only files the counts. Safe beside reads and
        adds on another thread: it touches nothing they read. A count no :meth:`add` takes (a
        write that failed after it) is dropped with the rest past :data:`_PRECOUNTED_MAX`.
        """
        counts = self._count(text)
        if len(self._precounted) >= _PRECOUNTED_MAX:
            self._precounted.clear()
        self._precounted[doc_id] = (text, counts)

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
        self._changes += 1
        ahead = self._precounted.pop(doc_id, None)
        counts = ahead[1] if ahead is not None and ahead[0] == text else self._count(text)
        slot = len(self._ids)
        if slot == len(self._lengths):
            self._lengths = np.concatenate([self._lengths, np.zeros_like(self._lengths)])
        length = sum(counts.values())
        self._slot[doc_id] = slot
        self._ids.append(doc_id)
        self._terms.append(tuple(sys.intern(t) for t in counts))
        self._lengths[slot] = length
        self._total_length += length
        for term, count in counts.items():
            posting = self._postings.get(term)
            if posting is None:
                posting = self._postings[term] = (array("i"), array("i"))
            posting[0].append(slot)
            posting[1].append(count)
            self._df[term] = self._df.get(term, 0) + 1

    def remove(self, doc_ids: Iterable[str]) -> None:
        self._changes += 1
        for doc_id in doc_ids:
            slot = self._slot.pop(doc_id, None)
            if slot is None:
                continue
            self._ids[slot] = None
            self._total_length -= float(self._lengths[slot])
            self._lengths[slot] = np.inf  # a dead slot left in postings scores 0
            for term in self._terms[slot]:
                left = self._df[term] - 1
                if left:
                    self._df[term] = left
                else:
                    del self._df[term]
                    del self._postings[term]
            self._terms[slot] = ()
            self._dead += 1
        if self._dead > max(1024, len(self._slot)):
            self._compact()

    def _compact(self) -> None:
        live = [(doc_id, slot) for slot, doc_id in enumerate(self._ids) if doc_id is not None]
        remap = np.full(len(self._ids), -1, dtype=np.int64)
        for new, (_, old) in enumerate(live):
            remap[old] = new
        lengths = np.zeros(max(16, len(live)), dtype=np.float32)
        lengths[: len(live)] = self._lengths[[old for _, old in live]]
        for term, (slots, counts) in list(self._postings.items()):
            old_slots = np.frombuffer(slots, dtype=np.int32)
            new_slots = remap[old_slots]
            keep = new_slots >= 0
            self._postings[term] = (
                array("i", new_slots[keep].astype(np.int32).tobytes()),
                array("i", np.frombuffer(counts, dtype=np.int32)[keep].tobytes()),
            )
        self._terms = [self._terms[old] for _, old in live]
        self._ids = [doc_id for doc_id, _ in live]
        self._slot = {doc_id: new for new, (doc_id, _) in enumerate(live)}
        self._lengths = lengths
        self._dead = 0

    def _score_array(self, query: str) -> np.ndarray | None:
        last = self._last
        if last is not None and last[0] == query and last[1] == self._changes:
            return last[2]
        scores = self._scores_now(query)
        self._last = (query, self._changes, scores)
        return scores

    def _scores_now(self, query: str) -> np.ndarray | None:
        return self._weighted_scores(dict.fromkeys(query_terms(query), 1.0))

    def _weighted_scores(self, terms: Mapping[str, float]) -> np.ndarray | None:
        """BM25 of every slot for a query whose terms each count ``terms[t]`` times."""
        n = len(self._slot)
        if not n:
            return None
        average = max(self._total_length / n, 1.0)
        k1, b = self._k1, self._b
        lengths = self._lengths[: len(self._ids)]
        scores: np.ndarray | None = None
        for term, weight in terms.items():
            posting = self._postings.get(term)
            if posting is None or not weight:
                continue
            slots = np.frombuffer(posting[0], dtype=np.int32)
            tf = np.frombuffer(posting[1], dtype=np.int32).astype(np.float32)
            df = self._df[term]
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            norm = k1 * (1 - b + b * lengths[slots] / average)
            if scores is None:
                scores = np.zeros(len(self._ids), dtype=np.float32)
            scores[slots] += weight * idf * tf * (k1 + 1) / (tf + norm)
            del slots, tf  # release the views: the arrays may grow again
        return scores

    def feedback_terms(self, query: str, docs: int, terms: int) -> dict[str, float]:
        """Terms to add to ``query`` (RM3-like pseudo-relevance feedback): those of its
        ``docs`` best BM25 matches, each weighed by the matches' share of the score
        that hold it times its idf (distinctive terms first), the ``terms`` best,
        their weights summing to 1. Terms of the query itself are left out, and so
        are terms in one document only (they can only lift the match they came from)."""
        own = query_terms(query)
        found = self.top_scored(query, docs)
        total = sum(score for _, score in found)
        if not found or total <= 0:
            return {}
        n = len(self._slot)
        weights: dict[str, float] = defaultdict(float)
        for doc_id, score in found:
            for term in self._terms[self._slot[doc_id]]:
                df = self._df.get(term, 0)
                if term not in own and df > 1:
                    weights[term] += score / total * math.log(1 + (n - df + 0.5) / (df + 0.5))
        chosen = sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:terms]
        mass = sum(weight for _, weight in chosen)
        return {term: weight / mass for term, weight in chosen} if mass > 0 else {}

    def relevance(self, query: str, doc_ids: Iterable[str]) -> dict[str, float]:
        """Each document's BM25 score over the query's maximum, clipped to [0, 1]
        (:mod:`strata.retrieval.relevance`): the maximum is the sum of the query's
        terms' idf, unseen terms included, so a query about what memory never heard
        of is a weak match for everything."""
        n = len(self._slot)
        terms = query_terms(query)
        if not n or not terms:
            return dict.fromkeys(doc_ids, 0.0)
        most = sum(math.log(1 + (n - self._df.get(t, 0) + 0.5) / (self._df.get(t, 0) + 0.5)) for t in terms)
        scores = self._score_array(query)
        out: dict[str, float] = {}
        for doc_id in doc_ids:
            slot = self._slot.get(doc_id)
            score = float(scores[slot]) if scores is not None and slot is not None else 0.0
            out[doc_id] = min(1.0, score / most) if most > 0 else 0.0
        return out

    def scores(self, query: str) -> dict[str, float]:
        """BM25 score of every document sharing a term with ``query`` (others score 0)."""
        scores = self._score_array(query)
        if scores is None:
            return {}
        ids = self._ids
        return {ids[i]: float(scores[i]) for i in np.flatnonzero(scores) if ids[i] is not None}  # type: ignore[misc]

    def top(self, query: str, k: int, keep: Callable[[str], bool] | None = None) -> list[str]:
        """The ``k`` best documents for ``query`` that ``keep`` accepts, ties by id."""
        return [doc_id for doc_id, _ in self.top_scored(query, k, keep)]

    def top_scored(
        self, query: str, k: int, keep: Callable[[str], bool] | None = None, *, extra: Mapping[str, float] | None = None
    ) -> list[tuple[str, float]]:
        """:meth:`top` with each document's BM25 score; ``extra``: more terms, each
        counting its weight times (:meth:`feedback_terms`)."""
        scores = self._score_array(query)
        if extra:
            more = self._weighted_scores(extra)
            if more is not None:
                scores = more if scores is None else scores + more
        if scores is None or k <= 0:
            return []
        ids = self._ids
        candidates = np.flatnonzero(scores)
        if keep is None and len(candidates) > k:
            cutoff = np.partition(scores[candidates], len(candidates) - k)[len(candidates) - k]
            candidates = candidates[scores[candidates] >= cutoff]
        ranked = sorted(
            ((-float(scores[i]), doc_id) for i in candidates if (doc_id := ids[i]) is not None),
        )
        found = ((doc_id, -negative) for negative, doc_id in ranked if keep is None or keep(doc_id))
        return list(itertools.islice(found, k))


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
    ranks = _ranks(rankings)
    for path, ranking in rankings.items():
        weight = weights.get(path, 0.0)
        for position, doc_id in enumerate(ranking, start=1):
            fused[doc_id] += weight / (k + position)
    best = (k + 1) / total
    ordered = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    return [(doc_id, score * best, ranks[doc_id]) for doc_id, score in ordered]


def score_fuse(
    scored: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
    ranks: Mapping[str, Sequence[str]],
    *,
    floors: Mapping[str, float] | None = None,
) -> list[tuple[str, float, dict[str, int]]]:
    """Weighted CombSUM of normalised scores.

    Args:
        scored: per path, the score of each candidate it has one for (a candidate
            missing on a path counts as that path's minimum).
        weights: per path; a path without a weight counts 0.
        ranks: per path, its ranking (for the ranks reported, as :func:`rrf_fuse`).
        floors: per path, a fixed minimum (e.g. 0 for BM25); a path without one, or
            whose best score is not above it (a query unrelated to everything), is
            min-max normalised over its candidates.

    Returns:
        ``(doc_id, score, {path: 1-based rank})`` best first; ``score`` is the
        weighted mean of the normalised scores, in [0, 1].
    """
    total = sum(weights.get(path, 0.0) for path in scored) or 1.0
    fused: dict[str, float] = defaultdict(float)
    for path, scores in scored.items():
        weight = weights.get(path, 0.0)
        if not scores or not weight:
            continue
        hi, lo = max(scores.values()), min(scores.values())
        if floors and path in floors and floors[path] < hi:
            lo = floors[path]
        if hi <= lo:
            continue
        for doc_id, score in scores.items():
            fused[doc_id] += weight * max(score - lo, 0.0) / (hi - lo)
    places = _ranks(ranks)
    keys = set(places) | {doc_id for scores in scored.values() for doc_id in scores}
    ordered = sorted(
        ((doc_id, fused.get(doc_id, 0.0) / total) for doc_id in keys), key=lambda item: (-item[1], item[0])
    )
    return [(doc_id, score, places[doc_id]) for doc_id, score in ordered]


def _ranks(rankings: Mapping[str, Sequence[str]]) -> dict[str, dict[str, int]]:
    """Each document's 1-based rank on every path that ranks it."""
    ranks: dict[str, dict[str, int]] = defaultdict(dict)
    for path, ranking in rankings.items():
        for position, doc_id in enumerate(ranking, start=1):
            ranks[doc_id][path] = position
    return ranks


#: The characters of a text its language or script is read from: its opening (language_weights,
#: and the script route, strata.providers.routes.non_latin_share).
LANGUAGE_CHARS = 500


def cjk_share(text: str) -> float:
    """Share of the letters in ``text`` that are CJK ideographs (0 for none)."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    return sum(1 for c in letters if "\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff") / len(letters)


def language_weights(weights: Mapping[str, float], query: str, *, dense_cjk: float) -> dict[str, float]:
    """Fusion weights for ``query``: the ``dense`` weight moves toward ``dense_cjk``
    as the query's share of CJK text grows. The packaged MiniLM knows English
    only; for a multilingual embedder, set ``dense_cjk`` to the dense weight. The query's
    language is read off its opening (:data:`LANGUAGE_CHARS`): a search runs on a shard's event
    loop, and a 16,000-character query took ~1 ms to read whole."""
    out = dict(weights)
    share = cjk_share(query[:LANGUAGE_CHARS])
    if share and "dense" in out:
        out["dense"] = out["dense"] * (1 - share) + dense_cjk * share
    return out
