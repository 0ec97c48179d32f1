"""The MCP server against the running stack, driven by the MCP SDK's own client: over stdio
(``strata mcp`` spawned as an MCP client spawns it) and over streamable HTTP at ``/mcp`` on the
API's port; and the two read routes its ``list_sessions`` tool and the inspector use.

Each test works in tenants of its own on the shared ``agents_stack``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from strata.access.scopes import Forbidden
from strata.errors import InvalidInput, NotFound
from strata_serve.client import StrataClient
from tests.e2e.running import STRATA, Running

TOOLS = {
    "add_memory",
    "search_memory",
    "get_context",
    "add_document",
    "find_skill",
    "record_skill_outcome",
    "learn_skill",
    "forget",
    "list_sessions",
}


@pytest.fixture(scope="module")
def admin(agents_stack: Running) -> str:
    return agents_stack.new_key("create-admin")


def key_for(stack: Running, admin: str, tenant: str, **scope: Any) -> str:
    made = stack.call("POST", "/v1/admin/keys", admin, {"tenant": tenant, **scope})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


@asynccontextmanager
async def over_stdio(env: dict[str, str], *args: str) -> AsyncIterator[Client]:
    """``strata mcp`` as a desktop client starts it: a child process, the protocol on its stdio."""
    params = StdioServerParameters(command=STRATA[0], args=[*STRATA[1:], "mcp", *args], env=env)
    async with Client(params) as client:
        yield client


@asynccontextmanager
async def over_http(stack: Running, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http)) as client:
        yield client


def stdio_env(stack: Running, key: str) -> dict[str, str]:
    return {**os.environ, "STRATA_URL": stack.url, "STRATA_API_KEY": key}


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, text(result))
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


def text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def every_tool(client: Client, word: str) -> None:
    """Each tool once, as an agent would use them; ``word`` is unique to the caller's tenant."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    assert all(tool.input_schema.get("properties") is not None and tool.description for tool in tools.values())

    said = await call(
        client,
        "add_memory",
        text=f"My cat {word} hides under the bed during thunderstorms.",
        session_id="chat-1",
        speaker="Ana",
    )
    assert said["turn_id"] and said["kept"] == "user turn"
    await call(client, "add_memory", text="Noted: a quiet room helps.", session_id="chat-1", role="assistant")
    note = await call(client, "add_memory", text=f"{word} is the cat's name", session_id="chat-1", role="note")
    assert note["items"] >= 1

    found = await call(client, "search_memory", query=f"{word} thunderstorms", layers=["episodic"])
    assert any(word in hit["text"] and hit["layer"] == "episodic" for hit in found["hits"]), found
    context = await call(client, "get_context", message="Where does my cat hide during storms?", session_id="chat-1")
    assert word in context["context"] and context["token_count"] > 0

    doc = await call(
        client,
        "add_document",
        title="Runbook",
        text=f"# Runbook\n\nThe {word} gateway restarts with `systemctl restart gw`.",
    )
    assert doc["status"] == "ready"
    passages = await call(client, "search_memory", query=f"{word} gateway restart", layers=["semantic"])
    assert any(hit.get("source", {}).get("doc_id") == doc["doc_id"] for hit in passages["hits"]), passages

    learned = await call(
        client,
        "learn_skill",
        task=f"Restart the {word} gateway",
        trace=["systemctl stop gw", "systemctl start gw", {"command": "systemctl status gw"}],
        outcome="the gateway answers",
    )
    skills = await call(client, "find_skill", task=f"restart the {word} gateway")
    assert learned["skill_id"] in [s["skill_id"] for s in skills["skills"]]
    used = await call(client, "record_skill_outcome", skill_id=learned["skill_id"], success=True)
    assert used["uses"] == 1 and used["success_rate"] == 1.0

    sessions = await call(client, "list_sessions")
    assert [(s["session_id"], s["turns"]) for s in sessions["sessions"]] == [("chat-1", 2)]

    # An error is a tool error in Strata's words, and the server answers the next call.
    missing = await client.call_tool("forget", {"what": "document", "id": "never-made"})
    assert missing.is_error and "NotFound (404)" in text(missing) and "never-made" in text(missing)
    bad = await client.call_tool("forget", {"what": "session", "id": "no spaces allowed"})
    assert bad.is_error and "InvalidInput (422)" in text(bad)
    alone = await client.call_tool("forget", {"what": "turn", "id": said["turn_id"]})
    assert alone.is_error and "session_id" in text(alone)

    # Forgetting what the user said: find the turn, forget it; the session's other turn stays.
    hit = next(h for h in found["hits"] if word in h["text"] and h["kind"] == "turn")
    gone = await call(client, "forget", what="turn", id=hit["id"], session_id=hit["session_id"])
    assert gone["forgot"] == "turn" and gone["by_layer"]["episodic"] >= 1, gone
    assert [(s["session_id"], s["turns"]) for s in (await call(client, "list_sessions"))["sessions"]] == [("chat-1", 1)]

    for what, ident in (("document", doc["doc_id"]), ("skill", learned["skill_id"]), ("session", "chat-1")):
        forgotten = await call(client, "forget", what=what, id=ident)
        assert forgotten["removed"] >= 1, forgotten
    assert (await call(client, "list_sessions"))["sessions"] == []


async def test_every_tool_over_stdio(agents_stack: Running, admin: str) -> None:
    key = key_for(agents_stack, admin, "mcp-stdio")
    async with over_stdio(stdio_env(agents_stack, key)) as client:
        await every_tool(client, "Juniper")


async def test_every_tool_over_streamable_http(agents_stack: Running, admin: str) -> None:
    key = key_for(agents_stack, admin, "mcp-http")
    async with over_http(agents_stack, key) as client:
        await every_tool(client, "Tamarind")


async def test_strata_mcp_defaults_to_the_stack_of_its_data_dir_and_its_dev_key(agents_stack: Running) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_URL", "STRATA_API_KEY")}
    async with over_stdio(env, "--data-dir", str(agents_stack.data_dir)) as client:
        await call(client, "add_memory", text="the dev key writes to tenant demo", session_id="mcp-default")
    with StrataClient(agents_stack.url, agents_stack.key) as rest:  # the dev key: tenant demo
        turns = rest.list_turns("mcp-default")
    assert [t.user for t in turns.turns] == ["the dev key writes to tenant demo"]


def test_mcp_without_a_good_key_is_401_before_anything_else(agents_stack: Running) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    for key in (None, "sk-strata-not-a-key"):
        sent = {**headers, **({"Authorization": f"Bearer {key}"} if key else {})}
        refused = httpx.post(f"{agents_stack.url}/mcp", json=hello, headers=sent, timeout=30)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"] == "Unauthorized"


def test_a_page_of_a_foreign_origin_is_refused_403_even_with_a_good_key(agents_stack: Running, admin: str) -> None:
    """The replica's serve.mcp_allowed_origins reaches /mcp (none here: only loopback pages)."""
    key = key_for(agents_stack, admin, "mcp-origin")
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {key}"}
    for origin, status in (("https://rebound.example", 403), ("http://localhost:6274", 200), (None, 200)):
        sent = {**headers, **({"Origin": origin} if origin else {})}
        answer = httpx.post(f"{agents_stack.url}/mcp", json=hello, headers=sent, timeout=30)
        assert answer.status_code == status, (origin, answer.text)
        if status == 403:
            assert "serve.mcp_allowed_origins" in answer.json()["message"]
        else:
            assert "add_memory" in answer.text


async def test_a_key_of_one_tenant_never_sees_another_tenants_memory(agents_stack: Running, admin: str) -> None:
    secret = "Marmalade-Vault-4417"
    alice, bob = key_for(agents_stack, admin, "mcp-alice"), key_for(agents_stack, admin, "mcp-bob")
    async with over_http(agents_stack, alice) as a, over_http(agents_stack, bob) as b:
        await call(a, "add_memory", text=f"The vault code word is {secret}.", session_id="shared-name")
        await call(a, "add_document", text=f"# Vault\n\nThe code word is {secret}.", doc_id="vault")
        await call(b, "add_memory", text="Bob likes tea.", session_id="shared-name")
        # Calls of both tenants at once, on one replica: each answer is its caller's.
        answers = await asyncio.gather(
            *(
                call(client, tool, **args)
                for _ in range(3)
                for client in (a, b)
                for tool, args in (
                    ("search_memory", {"query": f"vault code word {secret}"}),
                    ("get_context", {"message": f"what is the code word {secret}?", "session_id": "shared-name"}),
                    ("list_sessions", {}),
                )
            )
        )
    seen_by: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    for i, answer in enumerate(answers):
        seen_by["a" if (i // 3) % 2 == 0 else "b"].append(answer)
    assert any(secret in str(answer) for answer in seen_by["a"])  # alice finds her own
    assert not any(secret in str(answer) for answer in seen_by["b"])
    assert all(s["turns"] == 1 for answer in seen_by["b"] for s in answer.get("sessions", []))


async def test_a_read_only_key_writes_nothing_through_mcp(agents_stack: Running, admin: str) -> None:
    reader = key_for(agents_stack, admin, "mcp-reader", read_only=True)
    async with over_http(agents_stack, reader) as client:
        refused = await client.call_tool("add_memory", {"text": "may I?", "session_id": "s1"})
        assert refused.is_error and "Forbidden (403)" in text(refused) and "read-only" in text(refused)
        assert (await call(client, "list_sessions"))["sessions"] == []  # it still reads
    async with over_stdio(stdio_env(agents_stack, reader)) as client:
        refused = await client.call_tool("add_document", {"text": "# no\n\nnot allowed"})
        assert refused.is_error and "Forbidden (403)" in text(refused)


def test_sessions_and_turns_read_back_a_page_at_a_time(agents_stack: Running, admin: str) -> None:
    full = key_for(agents_stack, admin, "mcp-pages")
    t0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    with StrataClient(agents_stack.url, full) as rest:
        for session in ("s-c", "s-a", "s-b"):
            rest.record_turns(
                session,
                [
                    {
                        "user": f"{session} hour {h}",
                        "timestamp": t0 + timedelta(hours=h),
                        "turn_id": f"h{h}",
                        "speaker": "Ana",
                    }
                    for h in (3, 1, 2)
                ],
            )
        first = rest.list_sessions(limit=2)
        assert [s.session_id for s in first.sessions] == ["s-a", "s-b"] and first.total == 3
        assert first.next_after == "s-b"
        last = rest.list_sessions(after=first.next_after, limit=2)
        assert [s.session_id for s in last.sessions] == ["s-c"] and last.next_after is None
        assert (last.sessions[0].turns, last.sessions[0].first_at, last.sessions[0].last_at) == (
            3,
            t0 + timedelta(hours=1),
            t0 + timedelta(hours=3),
        )

        page = rest.list_turns("s-a", limit=2)
        assert [t.turn_id for t in page.turns] == ["h1", "h2"] and page.next_after == "h2" and page.total == 3
        assert page.turns[0].speaker == "Ana" and page.turns[0].text == "Ana: s-a hour 1"
        rest_of = rest.list_turns("s-a", after=page.next_after, limit=2)
        assert [t.turn_id for t in rest_of.turns] == ["h3"] and rest_of.next_after is None
        with pytest.raises(NotFound, match="no turns"):
            rest.list_turns("s-none")
        with pytest.raises(InvalidInput, match="no turn 'h9'"):
            rest.list_turns("s-a", after="h9")
        latest = rest.list_turns("s-a", limit=2, newest_first=True)
        assert [t.turn_id for t in latest.turns] == ["h3", "h2"] and latest.next_after == "h2" and latest.total == 3
        earliest = rest.list_turns("s-a", after=latest.next_after, limit=2, newest_first=True)
        assert [t.turn_id for t in earliest.turns] == ["h1"] and earliest.next_after is None
    session_key = key_for(agents_stack, admin, "mcp-pages", session_id="s-b")
    with StrataClient(agents_stack.url, session_key) as own:
        assert [t.turn_id for t in own.list_turns("s-b").turns] == ["h1", "h2", "h3"]
        with pytest.raises(Forbidden):
            own.list_turns("s-a")
        with pytest.raises(Forbidden, match="every session"):
            own.list_sessions()
