"""Tests for the packaged MiniLM embedder (the real ONNX model, loaded once)."""

from __future__ import annotations

import numpy as np
import pytest

from strata.config import EmbeddingSettings
from strata.providers.embedder import MINILM_DIM, Embedder, OnnxMiniLMEmbedder, embedding_dim, minilm_files


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


def test_minilm_files_exist() -> None:
    model, tokenizer = minilm_files()
    assert model.is_file() and model.name == "model.onnx" and model.stat().st_size > 1_000_000
    assert tokenizer.is_file() and tokenizer.name == "tokenizer.json"


def test_shape_dtype_and_unit_norm(embedder: OnnxMiniLMEmbedder) -> None:
    texts = ["hello world", "我喜欢喝咖啡", "", "   ", "A somewhat longer sentence about the weather in Paris."]
    vectors = embedder.embed(texts)
    assert isinstance(embedder, Embedder)
    assert embedder.dim == MINILM_DIM == 384
    assert vectors.shape == (len(texts), 384)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_list(embedder: OnnxMiniLMEmbedder) -> None:
    vectors = embedder.embed([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_paraphrase_scores_higher_than_unrelated(embedder: OnnxMiniLMEmbedder) -> None:
    anchor, paraphrase, unrelated = embedder.embed(
        [
            "How do I reset my password?",
            "I forgot my password and need to change it.",
            "The recipe needs two cups of flour and an egg.",
        ]
    )
    close, far = float(anchor @ paraphrase), float(anchor @ unrelated)
    assert close > far + 0.2
    assert -1.0 <= far < close <= 1.0


def test_same_text_same_vector(embedder: OnnxMiniLMEmbedder) -> None:
    a, b = embedder.embed(["deterministic output", "deterministic output"])
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert float(a @ b) == pytest.approx(1.0, abs=1e-5)


def test_batch_of_mixed_lengths_equals_each_alone(embedder: OnnxMiniLMEmbedder) -> None:
    texts = [
        "hi",
        "The quick brown fox jumps over the lazy dog near the riverbank on a sunny afternoon.",
        "我们明天下午三点在会议室讨论新项目的预算。",
        "ok",
        "Caroline said she would move to Berlin next spring to start a new job at a bakery.",
    ]
    batched = embedder.embed(texts)
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    np.testing.assert_allclose(batched, alone, atol=1e-4)
    # Order of the input is the order of the output (the embedder sorts internally).
    reversed_batch = embedder.embed(texts[::-1])
    np.testing.assert_allclose(reversed_batch[::-1], batched, atol=1e-4)


def test_more_texts_than_one_batch(embedder: OnnxMiniLMEmbedder) -> None:
    # 34 texts of varied lengths: two batches of the default size 32.
    texts = [f"word{i} " * (1 + i % 5) for i in range(34)]
    batched = embedder.embed(texts)
    assert batched.shape == (34, 384)
    np.testing.assert_allclose(batched, np.stack([embedder.embed([t])[0] for t in texts]), atol=1e-4)


def test_embedding_dim_without_loading() -> None:
    assert embedding_dim(EmbeddingSettings()) == 384
    assert embedding_dim(EmbeddingSettings(provider="openai", base_url="http://x", dimension=1536)) == 1536


def test_a_query_is_read_from_its_first_query_max_tokens_pieces_and_stored_text_from_max_tokens() -> None:
    embedder = OnnxMiniLMEmbedder(max_tokens=64, query_max_tokens=32)
    opening = " ".join(f"word{n}" for n in range(10))  # about 30 pieces
    longer = opening + " " + " ".join(f"other{n}" for n in range(200))
    question = "where do I live?"
    # A short query is embedded as stored text is; a long one from its opening only.
    np.testing.assert_allclose(embedder.embed_query([question]), embedder.embed([question]), atol=1e-6)
    tokens = embedder._tokenizer.encode(longer).ids
    cut = embedder._tokenizer.decode(tokens[1:31])  # the 30 pieces between [CLS] and [SEP]
    np.testing.assert_allclose(embedder.embed_query([longer]), embedder.embed_query([cut]), atol=1e-5)
    assert float(embedder.embed([longer])[0] @ embedder.embed_query([longer])[0]) < 0.999


def test_a_text_of_pathological_length_costs_only_the_characters_its_pieces_can_come_from() -> None:
    embedder = OnnxMiniLMEmbedder(max_tokens=64, query_max_tokens=32)
    hostile = "a_" * 8_000
    # The first 32 x 32 characters already hold more than 32 pieces: the rest changes nothing.
    np.testing.assert_allclose(embedder.embed_query([hostile]), embedder.embed_query([hostile[:1_024]]), atol=1e-6)
    np.testing.assert_allclose(embedder.embed([hostile]), embedder.embed([hostile[:2_048]]), atol=1e-6)


def test_leading_space_does_not_use_up_the_characters_a_text_is_read_from() -> None:
    embedder = OnnxMiniLMEmbedder(max_tokens=64, query_max_tokens=32)
    text = "where do I live now?"
    np.testing.assert_allclose(embedder.embed_query([" " * 5_000 + text]), embedder.embed_query([text]), atol=1e-6)
    np.testing.assert_allclose(embedder.embed(["   "]), embedder.embed([" "]), atol=1e-6)  # blank: as before


async def test_the_embedding_replica_runs_no_more_model_calls_at_once_than_it_has_cores() -> None:
    """More calls at once than cores embed no faster and each holds its own activations:
    twenty concurrent requests run in the replica's own threads, at most one per core, and
    each gets its own texts' vectors."""
    import asyncio
    import os
    import threading
    import time
    from typing import cast

    from ray.serve import Deployment

    from strata.config import StrataSettings
    from strata_serve.deployments import Embedding

    # @serve.deployment made the class a Deployment, which mypy cannot see (it applies no class decorators).
    cls = cast(Deployment, Embedding).func_or_class
    assert isinstance(cls, type)
    replica: Embedding = cls(StrataSettings().to_dict())
    model, running, seen = replica._embedder, [0], []
    lock = threading.Lock()

    def counting(texts: list[str]) -> np.ndarray:
        with lock:
            running[0] += 1
            seen.append((running[0], threading.current_thread().name))
        time.sleep(0.01)  # long enough for the others to pile up behind it
        try:
            return model.embed(texts)
        finally:
            with lock:
                running[0] -= 1

    replica._embedder = type("Counting", (), {"embed": staticmethod(counting), "dim": model.dim})()
    batches = [[f"request {i} text {j}" for j in range(3)] for i in range(20)]
    answers = await asyncio.gather(*(replica.embed(b) for b in batches))
    cores = len(os.sched_getaffinity(0))
    assert len(seen) == 20 and max(n for n, _ in seen) <= cores
    assert all(name.startswith("strata-embed") for _, name in seen)
    for batch, (vectors, tokens) in zip(batches, answers, strict=True):
        np.testing.assert_allclose(vectors, model.embed(batch), atol=1e-5)
        assert tokens == [0, 0, 0]  # an embedder without embed_counted counts nothing
