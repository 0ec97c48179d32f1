"""Concurrent queries share model calls (strata.providers.batching), with the real packaged model."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.config import EmbeddingSettings
from strata.providers.batching import EmbedBatcher, length_groups
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


async def test_a_question_does_not_wait_behind_a_long_message_in_the_model() -> None:
    """A text of the maximum length costs the model ~16x a question: it goes in a lane of its
    own, and questions asked meanwhile are answered while it runs."""
    release = threading.Event()
    calls: list[list[str]] = []

    def model(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        if len(texts[0]) >= EmbedBatcher.LONG_CHARS:
            release.wait(5)
        return np.zeros((len(texts), 3), np.float32)

    batcher = EmbedBatcher(model)
    long = asyncio.ensure_future(batcher.embed("a_" * 8000))
    while not calls:  # the long text is in the model
        await asyncio.sleep(0.001)
    short = await asyncio.wait_for(asyncio.gather(*(batcher.embed(f"question {n}") for n in range(3))), 2)
    assert len(short) == 3 and not long.done()  # answered while the long one still runs
    release.set()
    assert (await long).shape == (3,)
    assert calls == [["a_" * 8000], [f"question {n}" for n in range(3)]]


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


async def test_a_long_query_gets_its_own_call() -> None:
    """One query at the maximum length among short ones: padded together, every short query
    would cost what the long one costs (the hostile neighbour's 16,000-character search)."""
    calls: list[list[str]] = []

    def model(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.zeros((len(texts), 3), np.float32)

    batcher = EmbedBatcher(model)
    long = "a_" * 8000
    short = [f"what did I say about trip {n}?" for n in range(7)]
    await asyncio.gather(batcher.embed(long), *(batcher.embed(t) for t in short))
    assert sorted(calls, key=len) == [[long], sorted(short, key=len)]


async def test_texts_of_like_length_share_a_call_and_the_shortest_go_first() -> None:
    calls: list[list[str]] = []

    def model(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.zeros((len(texts), 3), np.float32)

    batcher = EmbedBatcher(model)
    medium = ["word " * 100 + str(n) for n in range(2)]  # 500 characters: the short lane, its own call
    short = [f"what did I say about trip {n}?" for n in range(3)]
    await asyncio.gather(*(batcher.embed(t) for t in medium + short))
    assert calls == [sorted(short, key=len), medium]


def test_the_real_model_gives_the_same_vectors_however_a_batch_is_cut(embed: object) -> None:
    texts = ["hi", "a_" * 8000, "where did we go in May?", "word " * 120, "ok", "the deploy failed with error 137"]
    together = embed(texts)  # type: ignore[operator]
    alone = np.vstack([embed([t]) for t in texts])  # type: ignore[operator]
    np.testing.assert_allclose(together, alone, atol=1e-4)


@given(st.lists(st.integers(min_value=1, max_value=400), max_size=60), st.integers(min_value=1, max_value=8))
def test_length_groups_cover_every_text_once_within_twice_their_shortest(lengths: list[int], max_batch: int) -> None:
    groups = length_groups(lengths, max_batch=max_batch, slack=16)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        sizes = [lengths[i] for i in group]
        assert len(group) <= max_batch and sizes == sorted(sizes)
        assert sizes[-1] <= max(2 * sizes[0], sizes[0] + 16)
        assert sum(sizes[-1] for _ in sizes) <= 2 * sum(sizes) + 16 * len(sizes)  # padding at most doubles the work


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own CPU priority is a Linux notion")
async def test_long_texts_are_embedded_at_a_lower_cpu_priority() -> None:
    """Under contention a message of the maximum length takes the cycles questions leave: its
    model call runs in a thread LONG_NICE nicer than the process; a question's does not."""
    niceness: dict[str, int] = {}

    def model(texts: Sequence[str]) -> np.ndarray:
        niceness[texts[0][:8]] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return np.zeros((len(texts), 3), np.float32)

    batcher = EmbedBatcher(model)
    await batcher.embed("a_" * 8000)
    await batcher.embed("a question?")
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert niceness["a question"[:8]] == own
    assert niceness["a_a_a_a_"] == min(own + EmbedBatcher.LONG_NICE, 19) > own
