"""The request body limit (413) on a tiny app with the API's middleware and handlers, over ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel

from strata_serve.errors import install_handlers
from strata_serve.guards import BodyLimit, too_large_response

LIMIT = 1000


class Note(BaseModel):
    text: str


class Recorder:
    """What the app behind the middleware was handed."""

    def __init__(self) -> None:
        self.notes: list[int] = []  # len(text) of each Note the endpoint got
        self.streamed: list[int] = []  # bytes read so far by /raw, after each chunk


@pytest.fixture
def seen() -> Recorder:
    return Recorder()


@pytest.fixture
def client(seen: Recorder) -> httpx.AsyncClient:
    app = FastAPI()
    install_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=lambda: LIMIT)

    @app.post("/notes")
    async def note(body: Note) -> dict[str, int]:
        seen.notes.append(len(body.text))
        return {"chars": len(body.text)}

    @app.post("/raw")
    async def raw(request: Request) -> dict[str, int]:
        total = 0
        async for chunk in request.stream():
            total += len(chunk)
            seen.streamed.append(total)
        return {"bytes": total}

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def chunks(count: int, size: int, sent: list[int]) -> AsyncIterator[bytes]:
    """A body without Content-Length (httpx sends it chunked); ``sent`` counts chunks pulled."""

    async def body() -> AsyncIterator[bytes]:
        for _ in range(count):
            sent.append(size)
            yield b"x" * size

    return body()


def assert_refused(response: httpx.Response) -> str:
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["error"] == "BodyTooLarge" and body["max_body_bytes"] == LIMIT
    assert "1,000 bytes" in body["message"] and "serve.max_body_bytes" in body["message"]
    assert "STRATA_SERVE__MAX_BODY_BYTES" in body["message"]
    return str(body["message"])


async def test_a_body_up_to_the_limit_passes(client: httpx.AsyncClient, seen: Recorder) -> None:
    ok = await client.post("/notes", json={"text": "a" * 500})
    assert ok.status_code == 200 and ok.json() == {"chars": 500}
    exactly = await client.post("/raw", content=b"y" * LIMIT)
    assert exactly.status_code == 200 and exactly.json() == {"bytes": LIMIT}
    sent: list[int] = []
    streamed = await client.post("/raw", content=chunks(4, 250, sent))
    assert streamed.status_code == 200 and streamed.json() == {"bytes": LIMIT}
    assert seen.notes == [500]


async def test_content_length_over_the_limit_is_refused_before_the_app_runs(
    client: httpx.AsyncClient, seen: Recorder
) -> None:
    refused = await client.post("/raw", content=b"y" * (LIMIT + 1))
    message = assert_refused(refused)
    assert "1,001 bytes, over the limit" in message
    # Not "Connection: close": closing with the body unread makes the kernel reset the
    # connection, which can drop the 413 itself; kept open, the server discards the rest.
    assert "connection" not in refused.headers
    big = await client.post("/notes", json={"text": "a" * 5000})
    assert "5,0" in assert_refused(big)  # says how big the body was
    assert seen.notes == [] and seen.streamed == []


async def test_a_chunked_body_is_refused_once_it_passes_the_limit(client: httpx.AsyncClient, seen: Recorder) -> None:
    sent: list[int] = []
    refused = await client.post("/raw", content=chunks(10, 300, sent))
    assert "over the limit of 1,000 bytes" in assert_refused(refused)
    # The app read three chunks (900 bytes); the fourth, past the limit, never reached it,
    # and nothing after it was pulled from the client.
    assert seen.streamed == [300, 600, 900]
    assert sum(sent) <= 1200


async def test_a_chunked_body_for_a_model_is_refused_with_413_not_400(
    client: httpx.AsyncClient, seen: Recorder
) -> None:
    # FastAPI answers a failed body read with 400; the middleware drops that answer.
    sent: list[int] = []
    refused = await client.post("/notes", content=chunks(10, 300, sent), headers={"content-type": "application/json"})
    assert_refused(refused)
    assert seen.notes == [] and sum(sent) <= 1200


async def test_bodies_that_are_not_the_model_answer_422(client: httpx.AsyncClient, seen: Recorder) -> None:
    for content in (b"not json", b"[1, 2]", b'"text"', b"", b'{"text": 3}', b'{"text": "\xff"}'):
        bad = await client.post("/notes", content=content, headers={"content-type": "application/json"})
        assert bad.status_code == 422, (content, bad.text)
        assert bad.json()["error"] == "InvalidInput"
    assert seen.notes == []
    # FastAPI reports a body that is not UTF-8 as a 400 {"detail": ...}; Strata says what is wrong.
    not_utf8 = await client.post("/notes", content=b'{"text": "\xff"}', headers={"content-type": "application/json"})
    assert "not UTF-8" in not_utf8.json()["message"]


async def test_framework_errors_have_strata_s_shape(client: httpx.AsyncClient) -> None:
    missing = await client.get("/nowhere")
    assert missing.status_code == 404 and missing.json() == {"error": "NotFound", "message": "Not Found"}
    wrong = await client.get("/notes")
    assert wrong.status_code == 405 and wrong.json()["error"] == "MethodNotAllowed"
    assert wrong.headers["allow"] == "POST"


def test_the_message_names_the_limit_in_mib() -> None:
    message = bytes(too_large_response(128 * 2**20, declared_bytes=200_000_000).body).decode()
    assert "200,000,000 bytes, over the limit of 134,217,728 bytes (128 MiB)" in message
