"""Security headers on every answer, and /docs that needs no network: the API app in process
(open paths only: they need no Serve replica), and the middleware on a route, an error and a
streamed answer."""

from __future__ import annotations

import re
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from ray import serve

from strata_serve import api
from strata_serve.headers import SECURITY_HEADERS, SecurityHeaders

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def _has_headers(response: httpx.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (response.request.url, name, dict(response.headers))


async def test_every_answer_carries_them_and_a_route_keeps_its_own() -> None:
    app = FastAPI()
    app.add_middleware(SecurityHeaders)

    @app.get("/json")
    async def json() -> JSONResponse:
        return JSONResponse({"ok": True})

    @app.get("/own")
    async def own() -> PlainTextResponse:
        return PlainTextResponse("x", headers={"Referrer-Policy": "same-origin"})

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        return StreamingResponse(iter([b"a", b"b"]), media_type="text/plain")

    async with _client(app) as client:
        for path in ("/json", "/stream", "/missing"):
            _has_headers(await client.get(path))
        own_answer = await client.get("/own")
        assert own_answer.headers["referrer-policy"] == "same-origin"
        assert own_answer.headers.get_list("referrer-policy") == ["same-origin"]
        assert own_answer.headers["x-frame-options"] == "DENY"


class _Replica:
    """What the app's middleware reads of the Serve replica serving it (open paths need no more)."""

    request_timeout_s = 30.0
    max_body_bytes = 4 << 20

    class _gate:  # the replica's attribute name; a request without a key asks it nothing else
        @staticmethod
        async def optional(authorization: str | None, *, address: str | None) -> None:
            assert authorization is None


async def test_docs_redoc_and_their_files_are_served_from_the_package_with_the_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/docs loaded Swagger UI from a public CDN: blank on an offline machine, no integrity hash."""
    monkeypatch.setattr(serve, "get_replica_context", lambda: SimpleNamespace(servable_object=_Replica()))
    async with _client(api.app) as client:
        for page in ("/docs", "/redoc"):
            html = await client.get(page)
            assert html.status_code == 200
            _has_headers(html)
            sources = re.findall(r'(?:src|href)="([^"]+)"', html.text)
            assert sources and all(s.startswith("/") for s in sources), sources
            assert "cdn." not in html.text and "fonts.googleapis" not in html.text
            for source in sources:
                if source.startswith("/docs/static/"):
                    asset = await client.get(source)
                    assert asset.status_code == 200 and len(asset.content) > 1000, source
                    _has_headers(asset)
        bundle = await client.get("/docs/static/swagger-ui-bundle.js")
        assert b"SwaggerUIBundle" in bundle.content
        _has_headers(await client.get("/openapi.json"))
