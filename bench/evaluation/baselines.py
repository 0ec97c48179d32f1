"""Turn-level retrieval baselines: the floor a memory has to beat.

Each turn is indexed as one document, ``Speaker said, "text"`` plus
`` [shared an image: caption]`` when it carries an image (:func:`turn_document`),
which is how the reference figures in the benchmark README were measured.

* :class:`BM25Retriever`: bm25s over lower-cased words (English stop words
  removed) and CJK character bigrams.
* :class:`DenseRetriever`: cosine similarity over an :class:`~strata.providers.embedder.Embedder`.
* :class:`RRFRetriever`: reciprocal rank fusion of other retrievers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from strata.providers.embedder import Embedder
from strata_bench.evaluation.datasets import EvalTurn

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "MemoEmbedder",
    "RRFRetriever",
    "Retriever",
    "turn_document",
    "words_and_bigrams",
]


@runtime_checkable
class Retriever(Protocol):
    """Indexes a corpus of turns, then returns turn ids for a query, best first."""

    name: str

    def index(self, turn_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Replace the corpus with ``texts``, known by ``turn_ids`` (same length)."""
        ...

    def search(self, query: str, k: int) -> list[str]:
        """Up to ``k`` distinct turn ids, best first (fewer if fewer match)."""
        ...


def turn_document(turn: EvalTurn) -> str:
    """The text a baseline indexes for ``turn``: who said what, and any image caption."""
    document = f'{turn.speaker} said, "{turn.text}"'
    if turn.image_caption:
        document += f" [shared an image: {turn.image_caption}]"
    return document


# ----------------------------------------------------------------- BM25

# Kana, CJK ideographs (with extension A and compatibility forms) and Hangul.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
# bm25s's own default pattern, so English text tokenises exactly as `bm25s.tokenize` would.
_WORD = re.compile(r"(?u)\b\w\w+\b")


def words_and_bigrams(text: str) -> list[str]:
    """Lower-cased words of two or more word characters, and CJK character bigrams.

    Chinese has no spaces, and ``\\w`` matches ideographs, so without this a
    whole clause would be one token. A CJK run of one character is kept as
    that character. Stop words are not removed here.
    """
    text = text.lower()
    tokens: list[str] = []
    start = 0
    for run in _CJK_RUN.finditer(text):
        # Slice rather than findall(pos, endpos): \b looks at the character before
        # pos, and an ideograph there is a word character.
        tokens.extend(_WORD.findall(text[start : run.start()]))
        chars = run.group()
        if len(chars) == 1:
            tokens.append(chars)
        else:
            tokens.extend(chars[i : i + 2] for i in range(len(chars) - 1))
        start = run.end()
    tokens.extend(_WORD.findall(text[start:]))
    return tokens


class BM25Retriever:
    """BM25 (bm25s, Lucene variant) over :func:`words_and_bigrams` tokens.

    Documents with no query term in common are never returned, so a search
    may give fewer than ``k`` ids.

    Args:
        stopwords: Anything ``bm25s`` accepts: a language code such as ``"en"``,
            a list of words, or None for none.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        name: How reports label this retriever.
    """

    def __init__(
        self,
        *,
        stopwords: str | Sequence[str] | None = "en",
        k1: float = 1.5,
        b: float = 0.75,
        name: str = "bm25",
    ) -> None:
        # Imported when used: only the evaluation needs it.
        import bm25s

        self.name = name
        self._bm25s = bm25s
        self._stopwords = list(stopwords) if isinstance(stopwords, (list, tuple)) else stopwords
        self._k1 = k1
        self._b = b
        self._ids: list[str] = []
        self._tokenizer: Any = None
        self._model: Any = None

    def index(self, turn_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Build a fresh index of ``texts``.

        Raises:
            ValueError: If the two sequences differ in length.
        """
        _check_lengths(turn_ids, texts)
        self._ids = list(turn_ids)
        self._model = None
        if not texts:
            return
        # A custom splitter in bm25s's Tokenizer keeps its stop-word handling and
        # vocabulary; the Tokenized (ids, vocab) pair is what BM25.index accepts
        # as pre-tokenised input.
        self._tokenizer = self._bm25s.tokenization.Tokenizer(
            lower=True, splitter=words_and_bigrams, stopwords=self._stopwords
        )
        corpus = self._tokenizer.tokenize(list(texts), update_vocab=True, return_as="tuple", show_progress=False)
        self._model = self._bm25s.BM25(k1=self._k1, b=self._b)
        self._model.index(corpus, show_progress=False)

    def search(self, query: str, k: int) -> list[str]:
        """Ids of the ``k`` best-scoring turns that share a term with ``query``."""
        if self._model is None or k < 1:
            return []
        # update_vocab=False: words the corpus never saw cannot match anything.
        (query_ids,) = self._tokenizer.tokenize(
            [query], update_vocab=False, return_as="ids", show_progress=False, allow_empty=False
        )
        if not query_ids:
            return []
        scores = np.asarray(self._model.get_scores(query_ids), dtype=np.float32)
        return [self._ids[i] for i in _top_k(scores, k, positive_only=True)]


# ----------------------------------------------------------------- dense


class DenseRetriever:
    """Cosine similarity between the query and each document, by dot product of unit vectors.

    Args:
        embedder: Returns unit-length vectors (the :class:`~strata.providers.embedder.Embedder` contract).
        batch_size: Texts per ``embed`` call while indexing, bounding memory.
        name: How reports label this retriever.
    """

    def __init__(self, embedder: Embedder, *, batch_size: int = 256, name: str = "dense") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.name = name
        self._embedder = embedder
        self._batch_size = batch_size
        self._ids: list[str] = []
        self._vectors: NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)

    def index(self, turn_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Embed ``texts`` and keep their vectors.

        Raises:
            ValueError: If the two sequences differ in length.
        """
        _check_lengths(turn_ids, texts)
        self._ids = list(turn_ids)
        batches = [
            np.asarray(self._embedder.embed(list(texts[i : i + self._batch_size])), dtype=np.float32)
            for i in range(0, len(texts), self._batch_size)
        ]
        self._vectors = np.concatenate(batches) if batches else np.zeros((0, 0), dtype=np.float32)

    def search(self, query: str, k: int) -> list[str]:
        """Ids of the ``k`` turns most similar to ``query``."""
        if not self._ids or k < 1:
            return []
        query_vector = np.asarray(self._embedder.embed_query([query]), dtype=np.float32)[0]
        scores = self._vectors @ query_vector
        return [self._ids[i] for i in _top_k(scores, k, positive_only=False)]


class MemoEmbedder:
    """The baselines' embedder, remembering indexed turns so dense and RRF embed each
    turn once. A single text (a query) is always embedded anew, so query latency
    stays honest; RRF's ingest rate then leaves out the embedding dense already did."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder
        self._seen: dict[str, Any] = {}
        self.dim = embedder.dim

    def embed(self, texts: Sequence[str]) -> Any:
        if len(texts) == 1:
            return self._embedder.embed(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self._seen]
        if missing:
            self._seen.update(zip(missing, self._embedder.embed(missing), strict=True))
        return np.stack([self._seen[t] for t in texts]) if texts else self._embedder.embed([])

    def embed_query(self, texts: Sequence[str]) -> Any:
        return self._embedder.embed_query(texts)


# ----------------------------------------------------------------- fusion


class RRFRetriever:
    """Reciprocal rank fusion: a turn scores ``sum_i w_i / (k + rank_i)`` over the lists it is in.

    Args:
        retrievers: The retrievers to fuse; :meth:`index` indexes all of them.
        k: The RRF constant; larger values flatten the advantage of top ranks.
        weights: One per retriever; equal weights when None.
        candidates: Each retriever is asked for ``max(k_needed, candidates)`` ids.
        name: How reports label this retriever.

    Raises:
        ValueError: If there are no retrievers, or weights do not match them.
    """

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        k: int = 60,
        weights: Sequence[float] | None = None,
        *,
        candidates: int = 100,
        name: str = "rrf",
    ) -> None:
        if not retrievers:
            raise ValueError("RRF needs at least one retriever")
        if weights is None:
            weights = [1.0] * len(retrievers)
        if len(weights) != len(retrievers):
            raise ValueError(f"{len(weights)} weights for {len(retrievers)} retrievers")
        if any(w < 0 for w in weights):
            raise ValueError("RRF weights must not be negative")
        self.name = name
        self.retrievers = tuple(retrievers)
        self.weights = tuple(float(w) for w in weights)
        self.k = k
        self.candidates = candidates

    def index(self, turn_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index the corpus in every fused retriever."""
        _check_lengths(turn_ids, texts)
        for retriever in self.retrievers:
            retriever.index(turn_ids, texts)

    def search(self, query: str, k: int) -> list[str]:
        """The ``k`` best turns by fused score; ties go to the turn seen first."""
        if k < 1:
            return []
        depth = max(k, self.candidates)
        scores: dict[str, float] = {}
        for retriever, weight in zip(self.retrievers, self.weights, strict=True):
            for rank, turn_id in enumerate(retriever.search(query, depth), start=1):
                scores[turn_id] = scores.get(turn_id, 0.0) + weight / (self.k + rank)
        # sorted() is stable and dicts keep insertion order, so ties stay deterministic.
        return sorted(scores, key=lambda turn_id: -scores[turn_id])[:k]


# ----------------------------------------------------------------- shared


def _check_lengths(turn_ids: Sequence[str], texts: Sequence[str]) -> None:
    if len(turn_ids) != len(texts):
        raise ValueError(f"{len(turn_ids)} turn ids for {len(texts)} texts")


def _top_k(scores: NDArray[np.float32], k: int, *, positive_only: bool) -> list[int]:
    """Indices of the ``k`` highest scores, best first, lower index first on ties."""
    n = len(scores)
    k = min(k, n)
    if k <= 0:
        return []
    candidates = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
    # Ties at the cut are resolved by argpartition arbitrarily; that only matters
    # for exactly equal scores, which we accept.
    order = candidates[np.lexsort((candidates, -scores[candidates]))]
    if positive_only:
        order = order[scores[order] > 0]
    return [int(i) for i in order]
