"""The HTTP clients' errors: Strata's JSON errors by status, and Serve's proxy's own 404 (its
routes not back yet after a restart) as a retryable 503; the asynchronous client's aiohttp
transport raising httpx's errors when no answer comes, as its httpx transport does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from aiohttp import web

from strata.errors import EmbedderError, LLMError, NotFound, StoreUnavailable, StrataError, VersionConflict
from strata_serve.client import AsyncStrataClient, StrataClient
from strata_serve.retry import NO_RETRY


def _client(response: httpx.Response) -> StrataClient:
    transport = httpx.MockTransport(lambda _: response)
    return StrataClient("http://strata.test", "sk-strata-x", retry=NO_RETRY, transport=transport)


def test_a_plain_404_from_serves_proxy_is_retryable() -> None:
    proxy = httpx.Response(404, text="Path '/v1/documents' not found. Ping http://.../-/routes for available routes.")
    with pytest.raises(StoreUnavailable) as raised:
        _client(proxy).list_documents()
    assert raised.value.details["retry_after_s"] == 1 and "retry" in raised.value.message


def test_stratas_own_404_stays_not_found() -> None:
    strata = httpx.Response(404, json={"error": "NotFound", "message": "no document 'd1'"})
    with pytest.raises(NotFound, match="no document 'd1'"):
        _client(strata).get_document("d1")


def test_a_502_is_the_error_its_body_names_the_llms_or_the_embedders() -> None:
    for name, kind in (("EmbedderError", EmbedderError), ("LLMError", LLMError), ("Unheard", LLMError)):
        answer = httpx.Response(502, json={"error": name, "message": "the endpoint answered 400"})
        with pytest.raises(kind, match="answered 400") as raised:
            _client(answer).search("q")
        assert raised.value.status_code == 502
    with pytest.raises(StrataError) as raised:  # a name whose status is another: the status decides
        _client(httpx.Response(500, json={"error": "EmbedderError", "message": "?"})).search("q")
    assert type(raised.value) is StrataError


# -- the asynchronous client over the network (aiohttp), against a server on loopback ---------


@contextlib.asynccontextmanager
async def _server(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_async_client_sends_the_request_the_route_expects_and_reads_its_answer() -> None:
    seen: list[tuple[str, str, dict[str, str], str, bytes]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.method, request.path, dict(request.query), request.headers.get("Authorization", ""),
                     await request.read()))
        if request.path == "/v1/documents" and request.method == "GET":
            return web.json_response({"documents": [], "total": 0, "next_after": None})
        return web.json_response({"error": "VersionConflict", "message": "expected version 3, found 4",
                                  "current_version": 4}, status=409)

    async with _server(handler) as url, AsyncStrataClient(url, "sk-strata-x") as client:
        listed = await client.list_documents(after="d 1", limit=5)
        with pytest.raises(VersionConflict, match="expected version 3") as raised:
            await client.record_turn("s1", "hello", expected_version=3)
    assert listed.total == 0 and listed.documents == []
    assert seen[0][:4] == ("GET", "/v1/documents", {"after": "d 1", "limit": "5"}, "Bearer sk-strata-x")
    method, path, _, _, body = seen[1]
    assert (method, path) == ("POST", "/v1/sessions/s1/turns") and json.loads(body)["user"] == "hello"
    assert raised.value.details["current_version"] == 4


async def test_the_async_client_reads_serves_plain_404_as_retryable_and_strata_404_as_not_found() -> None:
    async def handler(request: web.Request) -> web.Response:
        if request.path.startswith("/v1/documents/"):
            return web.json_response({"error": "NotFound", "message": "no document 'd1'"}, status=404)
        return web.Response(status=404, text="Path '/v1/sessions' not found.")

    async with _server(handler) as url, AsyncStrataClient(url, "sk-strata-x", retry=NO_RETRY) as client:
        with pytest.raises(NotFound, match="no document 'd1'"):
            await client.get_document("d1")
        with pytest.raises(StoreUnavailable):
            await client.list_sessions()


async def test_the_async_client_raises_httpx_errors_when_no_answer_comes() -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.json_response({"status": "ok"})

    async def hang_up(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{free.getsockname()[1]}"
    async with AsyncStrataClient(closed, "sk-strata-x", retry=NO_RETRY) as client:
        with pytest.raises(httpx.ConnectError):
            await client.health()
    async with _server(slow) as url, AsyncStrataClient(url, "sk-strata-x", timeout_s=0.2) as client:
        with pytest.raises(httpx.TimeoutException, match=r"no answer within 0\.2 s"):
            await client.health()
    async with _server(hang_up) as url, AsyncStrataClient(url, "sk-strata-x", retry=NO_RETRY) as client:
        with pytest.raises(httpx.HTTPError):
            await client.health()


def test_the_async_client_answers_from_each_event_loop_it_is_used_on() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def serve_and_ask(client: AsyncStrataClient) -> str:
        async with _server(handler) as url:
            client._http._base = url  # type: ignore[attr-defined]  # the server's port changes with each loop
            return (await client.health()).status

    client = AsyncStrataClient("http://127.0.0.1:1", "sk-strata-x")
    assert asyncio.run(serve_and_ask(client)) == "ok"
    assert asyncio.run(serve_and_ask(client)) == "ok"  # a new loop: a session of its own, not the closed loop's
    asyncio.run(client.aclose())
