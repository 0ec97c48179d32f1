"""How an episodic search ranks: the fused paths, and the speakers a query names.

:func:`ranked` fuses the dense ranking (cosine), the lexical one (BM25) and,
when weighted, the graph one (turns that mention the entities a query names) by
a weighted sum of their scores normalised per query (or by weighted RRF), then
applies a per-item factor such as the speaker and time boosts. The speaker helpers
find which of a tenant's speakers a query names, so the search can boost their
turns and the embedding can leave their names out.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable

import numpy as np

from strata.providers.batching import EmbedBatcher
from strata.retrieval.graph import KnowledgeGraph
from strata.retrieval.lexical import LexicalIndex, cjk_share, rrf_fuse, score_fuse
from strata.retrieval.relevance import combined, dense_relevance
from strata.retrieval.vectors import VectorIndex, best

__all__ = ["NAMES_KEPT_FROM", "dense_text", "ranked", "speakers_named", "speakers_token", "without_speakers"]

#: A query this long or longer is embedded with the speaker names it mentions
#: (:func:`dense_text`): the length from which the query batcher also gives a text a lane of
#: its own.
NAMES_KEPT_FROM = EmbedBatcher.LONG_CHARS


def ranked(
    index: VectorIndex,
    lexical: LexicalIndex,
    vector: np.ndarray,
    text: str | None,
    top_k: int,
    keep: Callable[[str], bool],
    weights: dict[str, float],
    *,
    factor: Callable[[str], float] | None = None,
    graph: KnowledgeGraph | None = None,
    lexical_top: Callable[[str, int, Callable[[str], bool]], list[tuple[str, float]]] | None = None,
    span: tuple[float, float] = (0.0, 1.0),
    fusion: str = "rrf",
    feedback: tuple[int, float] = (0, 0.0),
    neighbours: tuple[Callable[[np.ndarray], np.ndarray], float] | None = None,
    passages: tuple[Callable[[np.ndarray], np.ndarray | None], float] | None = None,
    dense_scores: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[tuple[str, float, dict[str, int], float]]:
    """The ``top_k`` best keys that ``keep`` accepts: by cosine alone, or fused with
    BM25 and (given ``graph``) the entities the text names; each with its fused score,
    its rank per path and its relevance (:mod:`strata.retrieval.relevance`, the cosine
    placed on ``span``).

    ``fusion``: ``rrf`` (weighted RRF of the ranks), or a weighted sum of the paths'
    scores normalised per query, ``minmax`` over the candidates or ``theoretical``
    from each path's floor (BM25 0, the cosine ``span[0]`` of an unrelated text) to
    its best. ``feedback`` ``(m, beta)``: the dense path ranks by the query plus
    ``beta`` x the mean vector of its ``m`` best hits (Rocchio); relevance stays the
    original query's cosine. ``neighbours`` ``(near, weight)``: when the paths are fused,
    each item's dense score adds ``weight`` x how far the best score among its neighbours
    (``near(scores)``, :class:`strata.episodic.neighbours.NeighbourRows`) is above its own:
    an item is drawn toward a better-matching neighbour, and one that matches as well as
    its neighbours gains nothing. Relevance stays the item's own cosine. ``passages`` ``(best,
    weight)``: ``best(query)`` gives each item the best cosine of its passages (a long turn's,
    :mod:`strata.episodic.passages`), or None; an item's cosine adds ``weight`` x how far that is
    above its own (1: the better of the two). ``dense_scores(query)``: each item's cosine when
    it is not ``index.scores(query)`` (a turn a second model embedded: its cosine by that model,
    placed on ``span``, :mod:`strata.providers.routes`).

    ``factor`` (at least 1) reweighs candidates before the cut; scores are divided
    by its largest value, so they stay in the range of the unweighted ones."""
    depth = max(top_k * 4, 50)  # rank deeper than we return, so agreement or a factor can lift an item
    def scores(query: np.ndarray) -> np.ndarray:
        own = index.scores(query) if dense_scores is None else dense_scores(query)
        if passages is None:
            return own
        best_of, weight = passages
        best_passage = best_of(query)
        return own if best_passage is None else own + weight * np.maximum(best_passage - own, 0)

    cosines = scores(vector)
    searched = cosines
    docs, beta = feedback
    if docs and beta and len(cosines):
        seeds = [key for key, _ in best(index, vector, docs, keep, scores=cosines)]
        if seeds:
            moved = vector.astype(np.float32) + beta * index.vectors(seeds).mean(axis=0)
            norm = float(np.linalg.norm(moved))
            searched = scores(moved / norm if norm else moved)
    if "lexical" not in weights or not text:
        text = None
    if text is None:
        found = best(index, vector, depth, keep, scores=searched)
        fused = [(key, score, {"dense": n}) for n, (key, score) in enumerate(found, 1)]
    else:
        if neighbours is not None and len(searched):
            near, share = neighbours
            searched = searched + share * np.maximum(near(searched) - searched, 0)
        dense = best(index, vector, depth, keep, scores=searched)
        words = (lexical_top or lexical.top_scored)(text, depth, keep)
        rankings = {"dense": [key for key, _ in dense], "lexical": [key for key, _ in words]}
        mentions: list[tuple[str, float]] = []
        if graph is not None and weights.get("graph", 0) > 0:
            mentions = [(key, score) for key, score in graph.rank(text, limit=depth * 2) if keep(key)][:depth]
            if mentions:  # a query naming no known entity leaves the other paths' scale alone
                rankings["graph"] = [key for key, _ in mentions]
        if fusion == "rrf":
            fused = rrf_fuse(rankings, weights)
        else:
            # Every candidate has a cosine; a candidate outside a ranking counts as
            # that path's minimum (its score is below the ranking's last).
            candidates = set().union(*rankings.values())
            places = {key: index.position(key) for key in candidates}
            scored = {
                "dense": {key: float(searched[row]) for key, row in places.items() if row is not None},
                "lexical": dict(words),
            }
            if mentions:
                scored["graph"] = dict(mentions)
            floors = {"dense": span[0], "lexical": 0.0, "graph": 0.0} if fusion == "theoretical" else None
            fused = score_fuse(scored, weights, rankings, floors=floors)
    if factor is not None:
        factors = {key: factor(key) for key, _, _ in fused}
        top = max(factors.values(), default=1.0)
        fused = sorted(
            ((key, score * factors[key] / top, ranks) for key, score, ranks in fused), key=lambda h: (-h[1], h[0])
        )
    fused = fused[:top_k]
    keys = [key for key, _, _ in fused]
    rows = [index.position(key) for key in keys]
    indexed = [(key, row) for key, row in zip(keys, rows, strict=True) if row is not None]
    placed = dense_relevance(cosines[[row for _, row in indexed]], span) if indexed else np.zeros(0)
    by_dense = {key: float(value) for (key, _), value in zip(indexed, placed, strict=True)}
    by_words = lexical.relevance(text, keys) if text is not None else {}
    return [
        (key, score, ranks, combined(by_dense.get(key), by_words.get(key)))
        for key, score, ranks in fused
    ]


def speakers_named(speakers: Iterable[str], text: str) -> set[str]:
    """The speaker labels that ``text`` mentions (whole words; CJK names as substrings)."""
    lowered = text.lower()
    found = set()
    for speaker in speakers:
        label = speaker.lower()
        if cjk_share(label) > 0.5:
            if label in lowered:
                found.add(speaker)
        elif re.search(r"(?<![\w])" + re.escape(label) + r"(?![\w])", lowered):
            found.add(speaker)
    return found


def without_speakers(text: str, speakers: Iterable[str]) -> str:
    """``text`` with the names of ``speakers`` (and their possessives) taken out, the longest
    first (and so the same in every process); ``text`` itself when nothing but punctuation would
    be left."""
    stripped = text
    for speaker in sorted(speakers, key=lambda name: (-len(name), name)):
        if cjk_share(speaker) > 0.5:
            stripped = stripped.replace(speaker, " ")
        else:
            pattern = r"(?<![\w])" + re.escape(speaker) + r"(?:'s|’s)?(?![\w])"
            stripped = re.sub(pattern, " ", stripped, flags=re.IGNORECASE)
    stripped = " ".join(stripped.split())
    return stripped if stripped.strip(" ?!.,") else text


def dense_text(text: str, speakers: Iterable[str]) -> str:
    """The text to embed for the dense path: ``text`` without the ``speakers`` it names, unless
    it is :data:`NAMES_KEPT_FROM` characters or longer (see ``EpisodicMemory.dense_query``)."""
    if len(text) >= NAMES_KEPT_FROM:
        return text
    return without_speakers(text, speakers_named(speakers, text))


def speakers_token(speakers: Iterable[str]) -> int:
    """A number that changes when the set of ``speakers`` does, the same in every process."""
    return zlib.crc32("\x1f".join(sorted(speakers)).encode())
