"""Relevance: how well a hit matches its query, in [0, 1], comparable across queries.

A fused score (weighted RRF) orders one query's hits well, but it is made of ranks:
the best hit of any query scores about 1, an unrelated one included. Relevance is
made of what each path measured instead:

* dense: the cosine, placed on the embedder's own span (``embedding.relevance_span``:
  the cosines of a query with an unrelated text and with the text that answers it);
  a model that packs every cosine into 0.78-0.88 and one that spreads them over
  0-0.7 then say the same thing;
* lexical: the BM25 score over the query's own maximum, the sum of its terms' idf
  (what a text holding each term once, at average length, scores): the share of the
  query's information the text matches, terms the memory has never seen included;

and combined as ``1 - (1 - dense) (1 - lexical)``: either path alone can vouch for a
hit (a paraphrase shares no words; an error code has no meaning to the embedder), and
both together more than either.
"""

from __future__ import annotations

import numpy as np

from strata.config import COSINE_SPANS

__all__ = ["MINILM_SPAN", "combined", "dense_relevance", "on_span"]

#: The packaged MiniLM's span: thresholds in the settings are cosines on its scale.
MINILM_SPAN = COSINE_SPANS["onnx-minilm"]


def dense_relevance(cosines: np.ndarray | float, span: tuple[float, float]) -> np.ndarray:
    """Cosines placed on ``span`` (lo: relevance 0, hi: relevance 1), clipped to [0, 1]."""
    lo, hi = span
    placed: np.ndarray = np.clip((np.asarray(cosines, dtype=np.float32) - lo) / (hi - lo), 0.0, 1.0)
    return placed


def combined(dense: float | None, lexical: float | None) -> float:
    """Either path vouches: ``1 - (1 - dense)(1 - lexical)``; a path that did not run counts 0."""
    return round(1.0 - (1.0 - (dense or 0.0)) * (1.0 - (lexical or 0.0)), 4)


def on_span(cosine: float, span: tuple[float, float]) -> float:
    """A cosine threshold set on MiniLM's scale, moved to the same relevance on ``span``:
    0.9 (near-duplicates with MiniLM) is 0.93 with e5, whose unrelated texts already
    reach 0.78."""
    lo, hi = MINILM_SPAN
    return span[0] + (cosine - lo) / (hi - lo) * (span[1] - span[0])
