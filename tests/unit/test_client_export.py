"""The HTTP clients' export() (GET /v1/export): parsed lines as they stream, the header first and
the end line last; a stream cut short, or a line this version cannot read, raised; an error
answer raised as its error; a 503 before the first line retried."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from strata.access.scopes import Forbidden
from strata.errors import InvalidInput
from strata.schema.export import (
    EmbedderTag,
    ExportEnd,
    ExportHeader,
    ExportItem,
    TurnRecord,
    dump_line,
)
from strata_serve.client import AsyncStrataClient, StrataClient
from strata_serve.retry import Retry

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HEADER = ExportHeader(strata_version="0.1.0", tenant="acme", created_at=T0, layers=["episodic"],
                      embedder=EmbedderTag(provider="onnx-minilm", model="all-MiniLM-L6-v2", dim=384))
TURNS = [TurnRecord(session_id="s", turn_id=f"t{n}", timestamp=T0, user=f"turn {n} " + "x" * 5000) for n in range(3)]
WHOLE = [dump_line(HEADER), *(dump_line(t) for t in TURNS), dump_line(ExportEnd(records=len(TURNS)))]
CLIENTS = pytest.mark.parametrize("kind", ["sync", "async"])


def _chunks(lines: list[str]) -> list[bytes]:
    """The body cut every 1,000 bytes, across lines, as a network would."""
    body = "".join(lines).encode()
    return [body[i : i + 1000] for i in range(0, len(body), 1000)]


class _Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body sent a chunk at a time, to either client."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def _serve(answers: list[tuple[int, list[bytes]]], seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status, chunks = answers[min(len(seen), len(answers)) - 1]
        return httpx.Response(status, stream=_Body(chunks), headers={"content-type": "application/x-ndjson"})

    return httpx.MockTransport(handle)


def _export(kind: str, transport: httpx.MockTransport, **kwargs: Any) -> list[ExportItem]:
    retry = Retry(base_delay_s=0.0)
    if kind == "sync":
        with StrataClient("http://strata", "sk-x", transport=transport, retry=retry) as client:
            return list(client.export(**kwargs))

    async def run() -> list[ExportItem]:
        async with AsyncStrataClient("http://strata", "sk-x", transport=transport, retry=retry) as client:
            return [item async for item in client.export(**kwargs)]

    return asyncio.run(run())


def _error(status: int, name: str, message: str) -> tuple[int, list[bytes]]:
    return status, [json.dumps({"error": name, "message": message}).encode()]


@CLIENTS
def test_export_yields_the_header_each_record_and_the_end_line(kind: str) -> None:
    seen: list[httpx.Request] = []
    items = _export(kind, _serve([(200, _chunks(WHOLE))], seen), layers=["episodic", "working"])
    assert items == [HEADER, *TURNS, ExportEnd(records=3)]
    assert seen[0].url.path == "/v1/export" and seen[0].url.params.get_list("layers") == ["episodic", "working"]


@CLIENTS
@pytest.mark.parametrize(("lines", "phrase"), [
    (WHOLE[:-1], "without its end line: cut short"),
    ([*WHOLE[:2], '{"kind": "turn", "session_id": "s"\n'], "line 3"),
    ([WHOLE[0].replace('"version":1', '"version":9')], "version 9"),
])
def test_an_export_that_cannot_be_read_whole_is_an_error(kind: str, lines: list[str], phrase: str) -> None:
    with pytest.raises(InvalidInput, match=phrase):
        _export(kind, _serve([(200, _chunks(lines))], []))


@CLIENTS
def test_an_error_answer_is_raised_and_a_503_before_the_first_line_retried(kind: str) -> None:
    with pytest.raises(Forbidden, match="may not export"):
        _export(kind, _serve([_error(403, "Forbidden", "a session key may not export")], []))
    seen: list[httpx.Request] = []
    busy = _error(503, "StoreUnavailable", "busy")
    assert len(_export(kind, _serve([busy, (200, _chunks(WHOLE))], seen))) == len(WHOLE)
    assert len(seen) == 2




def test_the_async_client_streams_over_the_network_a_line_longer_than_aiohttp_reads_at_once() -> None:
    long = TurnRecord(session_id="s", turn_id="long", timestamp=T0, user="y" * 300_000)
    lines = [dump_line(HEADER), dump_line(long), dump_line(ExportEnd(records=1))]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in _chunks(lines):
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def run() -> list[ExportItem]:
        async with AsyncStrataClient(f"http://127.0.0.1:{server.server_port}", "sk-x") as client:
            return [item async for item in client.export()]

    try:
        assert asyncio.run(run()) == [HEADER, long, ExportEnd(records=1)]
    finally:
        server.shutdown()
        server.server_close()
