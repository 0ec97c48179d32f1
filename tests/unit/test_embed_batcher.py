"""Concurrent queries share model calls (strata.providers.batching), with the real packaged model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from strata.config import EmbeddingSettings
from strata.providers.batching import EmbedBatcher
from strata.providers.embedder import make_embedder


@pytest.fixture(scope="module")
def embed() -> object:
    return make_embedder(EmbeddingSettings()).embed


async def test_a_lone_query_is_one_call_with_the_models_vector(embed: object) -> None:
    batcher = EmbedBatcher(embed)  # type: ignore[arg-type]
    vector = await batcher.embed("where do I live now?")
    np.testing.assert_allclose(vector, embed(["where do I live now?"])[0], atol=1e-5)  # type: ignore[operator]
    assert (batcher.calls, batcher.texts) == (1, 1)


async def test_queries_arriving_during_a_call_join_the_next_batch(embed: object) -> None:
    batcher = EmbedBatcher(embed, max_batch=8)  # type: ignore[arg-type]
    texts = [f"question number {n} about the trip to Lisbon" for n in range(20)]
    vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    # All 20 are queued before the first model call starts: three calls of at most 8.
    assert batcher.texts == 20 and batcher.calls == 3
    np.testing.assert_allclose(np.stack(vectors), embed(texts), atol=1e-4)  # type: ignore[operator]


async def test_a_query_arriving_while_the_model_runs_waits_for_the_next_call() -> None:
    release = threading.Event()
    calls: list[list[str]] = []

    def slow(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        if len(calls) == 1:
            release.wait(5)
        return np.zeros((len(texts), 3), np.float32)

    batcher = EmbedBatcher(slow)
    first = asyncio.ensure_future(batcher.embed("first"))
    while not calls:  # the first call is running in its thread
        await asyncio.sleep(0.001)
    later = [asyncio.ensure_future(batcher.embed(f"later {n}")) for n in range(5)]
    await asyncio.sleep(0.01)
    release.set()
    await asyncio.gather(first, *later)
    assert calls == [["first"], [f"later {n}" for n in range(5)]]


async def test_a_failing_model_call_fails_its_waiters_and_not_the_next() -> None:
    started = threading.Event()
    calls: list[list[str]] = []

    def flaky(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        started.set()
        if texts[0] == "bad":
            raise RuntimeError("model down")
        return np.ones((len(texts), 3), np.float32)

    batcher = EmbedBatcher(flaky)
    with pytest.raises(RuntimeError, match="model down"):
        await batcher.embed("bad")
    assert (await batcher.embed("good")).shape == (3,)
    assert calls == [["bad"], ["good"]]


async def test_a_cancelled_caller_does_not_break_the_batch(embed: object) -> None:
    batcher = EmbedBatcher(embed)  # type: ignore[arg-type]
    first = asyncio.ensure_future(batcher.embed("first"))
    second = asyncio.ensure_future(batcher.embed("second"))
    third = asyncio.ensure_future(batcher.embed("third"))
    await asyncio.sleep(0)
    third.cancel()
    assert (await first).shape == (384,) and (await second).shape == (384,)
