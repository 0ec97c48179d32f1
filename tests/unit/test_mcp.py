"""The MCP server without a stack: its tools as an MCP client lists them, and the ``/mcp``
endpoint driven by the SDK's own client, in front of a small app that answers as the REST API
does (the network boundary; tests/e2e/test_mcp.py drives the real stack)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.routing import Route

from strata.access.keys import KeyStore
from strata.config import StrataSettings
from strata.limits import DOCUMENT_CHARS_MAX, MESSAGE_CHARS_MAX, TURN_CHARS_MAX
from strata.store.records import InMemoryRecordStore
from strata_mcp import stdio_server
from strata_serve.auth import INNER_HEADER, Authenticate, KeyGate
from strata_serve.mcp_http import McpHttp
from tests.conftest import free_port

TOOLS = {
    "add_memory": {"text"},
    "search_memory": {"query"},
    "get_context": {"message"},
    "add_document": {"text"},
    "find_skill": {"task"},
    "record_skill_outcome": {"skill_id", "success"},
    "learn_skill": {"task", "trace"},
    "forget": {"what", "id"},
    "list_sessions": set(),
}


def api() -> tuple[FastAPI, list[str | None]]:
    """Two routes in the REST API's words; the Authorization header of each call is kept."""
    app = FastAPI()
    keys: list[str | None] = []

    @app.get("/v1/sessions")
    async def list_sessions(authorization: str | None = Header(default=None)) -> dict[str, Any]:
        keys.append(authorization)
        return {"sessions": [{"session_id": "s1", "turns": 2}], "total": 1, "next_after": None}

    @app.delete("/v1/documents/{doc_id}")
    async def delete_document(doc_id: str, authorization: str | None = Header(default=None)) -> JSONResponse:
        keys.append(authorization)
        message = "this key is read-only: it may not write semantic"
        return JSONResponse({"error": "Forbidden", "message": message}, status_code=403)

    return app, keys


@asynccontextmanager
async def mcp_over_http(app: FastAPI, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://api", headers={"Authorization": f"Bearer {key}"}
    )
    async with http, Client(streamable_http_client("http://api/mcp", http_client=http)) as client:
        yield client


@pytest.fixture()
async def endpoint() -> AsyncIterator[tuple[FastAPI, list[str | None]]]:
    app, keys = api()
    mcp = McpHttp()
    app.router.routes.append(Route("/mcp", mcp))
    yield app, keys
    await mcp.aclose()


async def test_every_tool_is_listed_with_a_schema_and_a_description() -> None:
    async with Client(stdio_server("http://127.0.0.1:1", "sk-x")) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    for name, required in TOOLS.items():
        schema = tools[name].input_schema
        assert set(schema.get("required", [])) == required, name
        assert "ctx" not in schema["properties"], name  # the context is injected, not asked for
        assert len(tools[name].description or "") > 80, name  # says what it returns and when to use it
        assert "return" in (tools[name].description or "").lower(), name
    assert tools["forget"].input_schema["properties"]["what"]["enum"] == ["session", "turn", "document", "skill"]
    assert tools["add_memory"].input_schema["properties"]["role"]["enum"] == ["user", "assistant", "note"]
    assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint
    assert tools["search_memory"].annotations is not None and tools["search_memory"].annotations.read_only_hint


async def test_http_tool_calls_reach_the_app_in_process_with_the_callers_own_key(
    endpoint: tuple[FastAPI, list[str | None]],
) -> None:
    app, keys = endpoint
    for key in ("sk-a", "sk-b"):
        async with mcp_over_http(app, key) as client:
            listed = await client.call_tool("list_sessions", {})
            assert not listed.is_error and listed.structured_content is not None
            assert listed.structured_content["sessions"][0]["session_id"] == "s1"
    assert keys == ["Bearer sk-a", "Bearer sk-b"]


async def test_a_strata_error_is_a_tool_error_with_its_message_and_the_server_answers_on(
    endpoint: tuple[FastAPI, list[str | None]],
) -> None:
    app, _ = endpoint
    async with mcp_over_http(app, "sk-ro") as client:
        refused = await client.call_tool("forget", {"what": "document", "id": "d1"})
        assert refused.is_error
        text = refused.content[0].text  # type: ignore[union-attr]
        assert "Forbidden (403): this key is read-only" in text
        assert not (await client.call_tool("list_sessions", {})).is_error


async def test_input_the_client_refuses_is_a_tool_error_that_says_what_to_fix() -> None:
    """A turn of blanks passes the tool's schema and is refused by the client before it is
    sent: the caller reads why, not a bare "Error executing tool"."""
    async with Client(stdio_server("http://127.0.0.1:1", "sk-x")) as client:
        blank = await client.call_tool("add_memory", {"text": "   ", "session_id": "s1"})
    assert blank.is_error
    assert "InvalidInput" in blank.content[0].text and "both are empty" in blank.content[0].text  # type: ignore[union-attr]


async def test_text_limits_are_in_the_schemas_and_a_refusal_names_the_field_without_pydantics_links() -> None:
    """Issue 45: the schemas did not say 16,000 characters, and an argument the schema refused came
    back as pydantic's report, each error ending "For further information visit https://errors.pydantic.dev/..."."""
    async with Client(stdio_server("http://127.0.0.1:1", "sk-x")) as client:
        tools = {tool.name: tool.input_schema["properties"] for tool in (await client.list_tools()).tools}
        too_long = await client.call_tool("add_memory", {"text": "x" * (TURN_CHARS_MAX + 1), "session_id": "s1"})
        long_note = await client.call_tool(
            "add_memory", {"text": "x" * (MESSAGE_CHARS_MAX + 1), "session_id": "s1", "role": "note"}
        )
        not_a_number = await client.call_tool("search_memory", {"query": "q", "top_k": "many"})
    for tool, field in (("search_memory", "query"), ("get_context", "message")):
        assert tools[tool][field]["maxLength"] == MESSAGE_CHARS_MAX, tool
    # A turn is as long as a turn of the HTTP API (issue 44); a note stays in working memory.
    assert tools["add_memory"]["text"]["maxLength"] == TURN_CHARS_MAX
    assert "up to 1,000,000 characters" in tools["add_memory"]["text"]["description"]
    assert tools["add_document"]["text"]["maxLength"] == DOCUMENT_CHARS_MAX
    texts = [result.content[0].text for result in (too_long, not_a_number)]  # type: ignore[union-attr]
    assert too_long.is_error and "InvalidInput: text: String should have at most 1000000 characters" in texts[0]
    assert long_note.is_error and "InvalidInput: text: a note is at most 16,000 characters" in (
        long_note.content[0].text  # type: ignore[union-attr]
    )
    assert not_a_number.is_error and "InvalidInput: top_k: Input should be a valid integer" in texts[1]
    assert not any("pydantic.dev" in text or "validation error" in text for text in texts), texts


async def test_a_strata_that_does_not_answer_is_a_tool_error() -> None:
    async with Client(stdio_server(f"http://127.0.0.1:{free_port()}", "sk-x")) as client:
        first = await client.call_tool("list_sessions", {})
        again = await client.call_tool("search_memory", {"query": "anything"})
    for result in (first, again):
        assert result.is_error and "Strata did not answer" in result.content[0].text  # type: ignore[union-attr]


def test_the_example_client_configs_start_what_this_package_serves() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "mcp"
    stdio = json.loads((examples / "stdio.json").read_text())["mcpServers"]["strata"]
    assert (stdio["command"], stdio["args"]) == ("strata", ["mcp"])
    assert set(stdio["env"]) == {"STRATA_URL", "STRATA_API_KEY"}  # what `strata mcp` reads
    http = json.loads((examples / "http.json").read_text())["mcpServers"]["strata"]
    assert http["url"].endswith("/mcp") and http["headers"]["Authorization"].startswith("Bearer ")


async def test_a_tool_call_takes_one_request_of_the_keys_rate_limit_not_two() -> None:
    """The /mcp requests take it; the API call a tool makes in process is marked as made on their
    behalf (a token only this process knows) and takes none. A request from outside with a forged
    mark takes one as any other."""
    store = InMemoryRecordStore()
    store.ensure_collection("keys", dim=4)
    keys = KeyStore(store, "keys")
    gate = KeyGate(StrataSettings(), keys=keys)
    key = keys.create("tenant-a")
    taken: list[str] = []
    take = gate._limits.take

    def recorded_take(key_id: str) -> None:
        taken.append(key_id)
        take(key_id)

    gate._limits.take = recorded_take  # type: ignore[method-assign]  # on this gate's limits only
    app, seen = api()
    mcp = McpHttp()
    app.router.routes.append(Route("/mcp", mcp))
    app.add_middleware(Authenticate, gate=lambda: gate)
    requests: list[str] = []

    @app.middleware("http")
    async def count(request: Any, call_next: Any) -> Any:
        requests.append(request.url.path)
        return await call_next(request)

    try:
        async with mcp_over_http(app, key) as client:
            for _ in range(2):
                listed = await client.call_tool("list_sessions", {})
                assert not listed.is_error
        assert seen == [f"Bearer {key}"] * 2 and requests.count("/v1/sessions") == 2  # the API route was called
        assert len(taken) == requests.count("/mcp") > 0  # and took nothing more
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as outside:
            forged = {"Authorization": f"Bearer {key}", INNER_HEADER: "a-guess"}
            assert (await outside.get("/v1/sessions", headers=forged)).status_code == 200
        assert len(taken) == requests.count("/mcp") + 1
    finally:
        await mcp.aclose()


def test_building_the_server_leaves_the_processs_logging_alone() -> None:
    """The MCP library configures the root logger when its server is built (rich's handler): in
    the ingress, every later line of the process was re-formatted, a 500's line wrapped over
    several lines at 80 columns."""
    import logging

    from strata_serve.mcp_tools import build_server

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[Any]:
        yield None

    root = logging.getLogger()
    kept = (list(root.handlers), root.level)
    root.handlers[:] = []  # as in a Serve replica: logging.basicConfig acts only on a bare root
    root.setLevel(logging.NOTSET)
    try:
        build_server(lifespan)
        assert (root.handlers, root.level) == ([], logging.NOTSET)
    finally:
        root.handlers[:] = kept[0]
        root.setLevel(kept[1])


async def test_a_browser_page_of_another_origin_is_refused_403_and_loopback_or_listed_pages_are_let_in() -> None:
    """DNS rebinding: a page on any site can make its host name resolve to 127.0.0.1 and call
    /mcp as if it were the server's own page; its browser still sends the page's Origin."""
    app, _ = api()
    mcp = McpHttp(allowed_origins=lambda: ["https://agents.example.com", "null"])
    app.router.routes.append(Route("/mcp", mcp))
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http:

            async def status(origin: str | None) -> httpx.Response:
                sent = {**headers, **({"Origin": origin} if origin is not None else {})}
                return await http.post("/mcp", json=hello, headers=sent)

            for refused in ("https://evil.example", "http://evil.example:8000", "https://agents.example.com:8443",
                            "http://agents.example.com", "https://localhost.evil.example", "http://[::1",
                            "http://localhost:99999", "https://agents.example.com/path", "ftp://localhost",
                            "not an origin", "", "x" * 100_000):
                answer = await status(refused)
                assert answer.status_code == 403, (refused[:40], answer.text)
                assert answer.json()["error"] == "Forbidden"
                assert "serve.mcp_allowed_origins" in answer.json()["message"]
            for let_in in (None, "http://localhost:6274", "http://127.0.0.1:8080", "http://[::1]:3000",
                           "http://app.localhost", "https://agents.example.com", "HTTPS://Agents.Example.com:443",
                           "null"):
                answer = await status(let_in)
                assert answer.status_code == 200, (let_in, answer.text)
                assert "list_sessions" in answer.text
    finally:
        await mcp.aclose()


def test_an_allowed_mcp_origin_that_is_not_an_origin_is_refused_at_start_up() -> None:
    assert StrataSettings.from_dict({"serve": {"mcp_allowed_origins": ["https://a.example:8443", "null"]}})
    for bad in ("a.example", "https://a.example/app", "https://", "ws://a.example", "https://a.example:0x50"):
        with pytest.raises(ValueError, match="is not an origin"):
            StrataSettings.from_dict({"serve": {"mcp_allowed_origins": [bad]}})
