"""``best``: the top ids a filter accepts, whether the filter refuses few ids (the best few are
enough) or most of them (the whole index is looked through)."""

from __future__ import annotations

import numpy as np
import pytest

from strata.retrieval.vectors import VectorIndex, best


@pytest.mark.parametrize("accepted", [1.0, 0.5, 0.02, 0.0])
@pytest.mark.parametrize("top_k", [1, 10, 300])
def test_best_with_a_filter_is_the_filtered_full_ranking(accepted: float, top_k: int) -> None:
    rng = np.random.default_rng(7)
    index = VectorIndex()
    vectors = rng.standard_normal((2_000, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for n, vector in enumerate(vectors):
        index.add(f"t{n}", vector, group="s")
    allowed = {f"t{n}" for n in range(2_000) if rng.random() < accepted}
    query = vectors[0]
    scores = index.scores(query)
    expected = [(f"t{i}", float(scores[i])) for i in np.argsort(-scores, kind="stable") if f"t{i}" in allowed][:top_k]
    assert best(index, query, top_k, allowed.__contains__) == expected
    ranked = [(f"t{i}", float(scores[i])) for i in np.argsort(-scores, kind="stable")]
    assert best(index, query, top_k) == ranked[:top_k]
