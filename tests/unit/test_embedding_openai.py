"""The ``openai`` embedding provider against an OpenAI-compatible server on loopback: vectors in
the texts' order, unit length; every failure of the endpoint an ``EmbedderError`` (502) that says
what it answered, never an exception the HTTP layer would answer with a bare 500."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from strata.config import EmbeddingSettings
from strata.errors import EmbedderError, StrataError
from strata.providers.embedder import Embedder, OpenAIEmbedder, make_embedder
from strata.providers.tokens import TiktokenCounter
from tests.llm_server import llm_server

DIM = 8
Body = dict[str, Any]  # a JSON request or answer


def _vectors(body: Body, *, dim: int = DIM, reverse: bool = False) -> tuple[int, Body]:
    texts = body["input"]
    rows = [{"object": "embedding", "index": i, "embedding": [float(len(t) + 1)] + [float(i + 1)] * (dim - 1)}
            for i, t in enumerate(texts)]
    return 200, {"object": "list", "data": rows[::-1] if reverse else rows, "model": body["model"],
                 "usage": {"prompt_tokens": 3, "total_tokens": 3}}


def _embedder(url: str, **kw: object) -> OpenAIEmbedder:
    settings = EmbeddingSettings.model_validate(
        {"provider": "openai", "base_url": url, "model": "emb-test", "dimension": DIM, **kw}
    )
    embedder = make_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder) and isinstance(embedder, Embedder)
    return embedder


@contextmanager
def _endpoint(answer: Callable[[Body], tuple[int, Body]]) -> Iterator[tuple[str, list[Body]]]:
    """``llm_server`` answering each request body with ``answer(body)``."""
    bodies: list[list[Body]] = []
    with llm_server(lambda n: lambda: answer(bodies[0][n])) as (url, received):
        bodies.append(received)
        yield url, received


def test_vectors_come_back_in_the_texts_order_and_unit_length() -> None:
    with _endpoint(lambda body: _vectors(body, reverse=True)) as (url, received):  # rows answered reversed
        embedder = _embedder(url)
        vectors = embedder.embed(["a", "bbb", "cc"])
        assert embedder.embed([]).shape == (0, DIM)
    assert [(r["model"], r["input"]) for r in received] == [("emb-test", ["a", "bbb", "cc"])]  # one call
    assert vectors.shape == (3, DIM) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    for row, text in enumerate(["a", "bbb", "cc"]):  # each its own text's, by the rows' index
        expected = np.array([len(text) + 1.0] + [row + 1.0] * (DIM - 1))
        np.testing.assert_allclose(vectors[row], expected / np.linalg.norm(expected), atol=1e-6)


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (400,
         {"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error"}},
         "answered 400 for model 'emb-test': This model's maximum context length is 8192 tokens"),
        (404, {"error": {"message": "model emb-test not found"}}, "answered 404"),
        (500, {"detail": "boom"}, "answered 500"),
    ],
)
def test_an_error_answer_is_an_embedder_error_with_its_status_and_message(status: int, body: Body, said: str) -> None:
    with llm_server(lambda n: (lambda: (status, body))) as (url, _), pytest.raises(EmbedderError) as caught:
        _embedder(url).embed(["hello"])
    assert said in caught.value.message and caught.value.status_code == 502
    assert isinstance(caught.value, StrataError)


def test_vectors_of_another_size_are_an_embedder_error() -> None:
    with _endpoint(lambda body: _vectors(body, dim=DIM + 1)) as (url, _), pytest.raises(EmbedderError, match="is 8"):
        _embedder(url).embed(["hello", "there"])


def test_no_answer_is_an_embedder_error_within_the_timeout() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(EmbedderError, match="did not answer"):
        _embedder(f"http://127.0.0.1:{port}/v1").embed(["hello"])  # nothing listens there

    def slow() -> tuple[int, Body]:
        time.sleep(3)
        return 200, {}

    with llm_server(lambda n: slow) as (url, _):
        started = time.monotonic()
        with pytest.raises(EmbedderError, match="did not answer"):
            _embedder(url, timeout_s=0.3).embed(["hello"])
        assert time.monotonic() - started < 2.5  # two tries of 0.3 s and a back-off, not the SDK's 600 s


def test_texts_over_the_input_limit_are_cut_and_calls_carry_batch_size_texts() -> None:
    """A turn of 16,000 characters can be 8,000 tokens and more ("a_" x 8,000): sent whole, the
    endpoint refuses the call (OpenAI: over 8,191 tokens) and the write fails with it."""
    texts = ["short", "a_" * 8000, "word " * 3000, "x" * 16000, "你好" * 4000]
    with _endpoint(_vectors) as (url, received):
        embedder = _embedder(url, endpoint_max_tokens=100, batch_size=2)
        vectors = embedder.embed(texts)
    assert [len(r["input"]) for r in received] == [2, 2, 1]
    sent = [t for r in received for t in r["input"]]
    counter = TiktokenCounter()
    assert sent[0] == "short" and all(90 <= counter.count(t) <= 100 for t in sent[1:])
    assert all(text.startswith(cut) for text, cut in zip(texts, sent, strict=True))
    for row, cut in enumerate(sent):  # each row its own text's, across the calls
        expected = np.array([len(cut) + 1.0] + [row % 2 + 1.0] * (DIM - 1))
        np.testing.assert_allclose(vectors[row], expected / np.linalg.norm(expected), atol=1e-6)
