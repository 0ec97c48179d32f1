"""The scope matrix: every operation of the OpenAPI document and every MCP tool, with every kind
of key, on the request as it is sent and on its edge forms (a field left out, ``null``, ``[]``,
``{}``, every layer named, another session's id, another tenant's ids), against the stack as
``strata up`` starts it.

The expected answer of each cell is written down in ``scope_matrix.txt`` beside this file; the
variants are generated from the OpenAPI document and from the MCP tools' input schemas, so an
operation, a tool or a scope-relevant field added without its rows fails the test until the
table says what each key gets. Besides the status, no answer may carry what the key's scope
hides: another tenant's marker never, a document's or skill's marker unless the key sees
documents and skills, another session's marker unless the key is bound to no session.

Found by a hostile review: a session-bound key's ``POST /v1/search`` with ``"layers": []``
answered 200 with the tenant's documents, skills and other sessions' turns (authorization
asked for no layer, and the orchestrator read ``[]`` as "every layer")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client import Client

from tests.e2e.running import Running
from tests.e2e.test_mcp import over_http, text

TABLE = Path(__file__).with_name("scope_matrix.txt")
KINDS = ("admin", "tenant", "read-only", "session", "session-ro", "session-shared", "unshared", "revoked")
SCOPES: dict[str, dict[str, Any]] = {
    "tenant": {},
    "read-only": {"read_only": True},
    "session": {"session_id": "own"},
    "session-ro": {"session_id": "own", "read_only": True},
    "session-shared": {"session_id": "own", "shared": True},
    "unshared": {"shared": False},
    "revoked": {},
}
SEES_SHARED = {"tenant", "read-only", "session-shared"}  # documents and skills
SEES_EVERY_SESSION = {"tenant", "read-only", "unshared"}

#: Tenants of their own on the shared stack (tests/e2e/test_scopes.py works in "acme").
ACME, RIVAL_TENANT = "matrix-acme", "matrix-rival"
DOC = "Ocelot-Harbor-3391"  # only in acme's document and skill
OTHER = "Heron-Sable-5521"  # only in acme's session "other" (a turn and a working item)
RIVAL = "Quokka-Tundra-7784"  # only in the rival tenant (a document, a skill, a turn of its session "own")
LAYERS = ["working", "episodic", "semantic", "procedural"]

#: Edge values of the request fields that narrow what a call reads or where it writes.
LAYER_EDGES: dict[str, Any] = {
    "null": None,
    "[]": [],
    "{}": {},
    "all": LAYERS,
    **{layer: [layer] for layer in LAYERS},
}
#: The operations whose request is sent as is, then in each edge form of these fields.
BODY_EDGES = ("layers", "session_id", "doc_ids")
PATH_EDGES = ("session_id", "doc_id", "skill_id", "job_id", "turn_id")


# -- the table ------------------------------------------------------------------------------------


def read_table(section: str) -> dict[tuple[str, str], dict[str, str]]:
    """``(operation, variant) -> {key kind: expected}`` of one section of scope_matrix.txt."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    current = None
    for raw in TABLE.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        if current != section:
            continue
        cells = line.split()
        *where, variant = cells[: len(cells) - len(KINDS)]
        expected = cells[len(cells) - len(KINDS) :]
        rows[(" ".join(where), variant)] = dict(zip(KINDS, expected, strict=True))
    return rows


# -- the world: two tenants, the acme keys --------------------------------------------------------


@pytest.fixture(scope="module")
def world(agents_stack: Running) -> dict[str, Any]:
    stack = agents_stack
    admin = stack.new_key("create-admin")
    keys: dict[str, str] = {"admin": admin}
    ids: dict[str, str] = {}
    for kind, scope in SCOPES.items():
        made = stack.call("POST", "/v1/admin/keys", admin, {"tenant": ACME, "name": kind, **scope})
        assert made.status_code == 201, made.text
        keys[kind] = made.json()["key"]
        if kind == "revoked":
            gone = stack.call("DELETE", f"/v1/admin/keys/{made.json()['key_id']}", admin)
            assert gone.status_code in (200, 204), gone.text
    rival = stack.call("POST", "/v1/admin/keys", admin, {"tenant": RIVAL_TENANT}).json()["key"]
    full = keys["tenant"]
    for key, tenant_doc, marker in ((full, "d1", DOC), (rival, "d-rival", RIVAL)):
        made = stack.call(
            "POST", "/v1/documents?wait=true", key, {"doc_id": tenant_doc, "text": f"# Plans\n\n{marker} uses Kafka."}
        )
        assert made.status_code == 201, made.text
    for key, name, marker in ((full, "skill", DOC), (rival, "rival_skill", RIVAL)):
        made = stack.call(
            "POST", "/v1/skills:extract", key, {"task": f"Rotate the {marker} keys", "trace": ["vault rotate"]}
        )
        assert made.status_code in (200, 201), made.text  # 200: merged into one made before
        ids[name] = made.json()["skill_id"]
    learned = {"session_id": "own", "user": "deploy billing", "agent": "done", "task_type": "deployment",
               "success": True, "trace": ["make deploy"]}
    for key, name in ((full, "job"), (rival, "rival_job")):
        job = stack.call("POST", "/v1/interactions", key, learned)
        assert job.status_code == 201 and job.json()["skill_job"], job.text
        ids[name] = job.json()["skill_job"]["job_id"]
    said = stack.call("POST", "/v1/sessions/other/turns", full, {"user": f"my locker code is {OTHER} plans Kafka"})
    assert said.status_code == 201, said.text
    note = stack.call(
        "POST", "/v1/sessions/other/working/items", full, {"items": [{"role": "user", "content": f"{OTHER} plans"}]}
    )
    assert note.status_code in (200, 201), note.text
    rival_turn = stack.call("POST", "/v1/sessions/own/turns", rival, {"user": f"my locker code is {RIVAL} plans Kafka"})
    assert rival_turn.status_code == 201, rival_turn.text
    ids["rival_turn"] = rival_turn.json()["turns"][0]["turn_id"]
    return {"keys": keys, "rival": rival, "ids": ids}


# -- REST -----------------------------------------------------------------------------------------


def base_request(op: str, kind: str, ids: dict[str, str]) -> tuple[str, Any, dict[str, str]]:
    """The path, body and headers of ``op`` as sent plainly (deletions of nothing, stale If-Match:
    the world stays as made)."""
    stale = {"If-Match": '"999"'}
    skill, job = ids["skill"], ids["job"]
    return {
        "POST /v1/sessions/{session_id}/turns": ("/v1/sessions/own/turns", {"user": "hi"}, {}),
        "GET /v1/sessions/{session_id}/turns": ("/v1/sessions/own/turns", None, {}),
        "POST /v1/sessions/{session_id}/turns/batch": ("/v1/sessions/own/turns/batch", {"turns": [{"user": "hi"}]}, {}),
        "GET /v1/sessions": ("/v1/sessions", None, {}),
        "POST /v1/context": ("/v1/context", {"message": "plans Kafka", "session_id": "own"}, {}),
        "POST /v1/search": ("/v1/search", {"query": "plans Kafka locker", "session_id": "own", "top_k": 100}, {}),
        "GET /v1/sessions/{session_id}/working": ("/v1/sessions/own/working", None, {}),
        "POST /v1/sessions/{session_id}/working/items": (
            "/v1/sessions/own/working/items",
            {"items": [{"role": "user", "content": "x"}]},
            {},
        ),
        "DELETE /v1/sessions/{session_id}": ("/v1/sessions/own", None, {}),
        "DELETE /v1/sessions/{session_id}/turns/{turn_id}": ("/v1/sessions/own/turns/never-made", None, {}),
        "POST /v1/documents": ("/v1/documents", {"doc_id": f"d-{kind}", "text": "# x\n\ny"}, {}),
        "GET /v1/documents": ("/v1/documents", None, {}),
        "GET /v1/documents/{doc_id}": ("/v1/documents/d1?include_text=true", None, {}),
        "DELETE /v1/documents/{doc_id}": ("/v1/documents/never-made", None, {}),
        "GET /v1/entities": ("/v1/entities?name=Kafka", None, {}),
        "POST /v1/skills:extract": ("/v1/skills:extract", {"task": "list files", "trace": ["ls"]}, {}),
        "GET /v1/skills": ("/v1/skills?task=rotate%20keys", None, {}),
        "GET /v1/skills/{skill_id}": (f"/v1/skills/{skill}", None, {}),
        "PATCH /v1/skills/{skill_id}": (f"/v1/skills/{skill}", {"description": "d"}, stale),
        "DELETE /v1/skills/{skill_id}": (f"/v1/skills/{skill}", None, stale),
        "POST /v1/skills/{skill_id}/outcomes": (f"/v1/skills/{skill}/outcomes", {"success": True}, {}),
        "GET /v1/skills/{skill_id}/history": (f"/v1/skills/{skill}/history", None, {}),
        "GET /v1/skill-jobs/{job_id}": (f"/v1/skill-jobs/{job}", None, {}),
        "POST /v1/interactions": ("/v1/interactions", {"session_id": "own", "user": "x", "agent": "y"}, {}),
        "POST /v1/admin/keys": ("/v1/admin/keys", {"tenant": "scratch"}, {}),
        "GET /v1/admin/keys": (f"/v1/admin/keys?tenant={ACME}", None, {}),
        "POST /v1/admin/keys/{key_id}:rotate": ("/v1/admin/keys/000000000000:rotate", None, {}),
        "DELETE /v1/admin/keys/{key_id}": ("/v1/admin/keys/000000000000", None, {}),
        "DELETE /v1/admin/tenants/{tenant}": ("/v1/admin/tenants/never-made", None, {}),
        # The stack's own count (the default settings' two): answered, and nothing moves.
        "POST /v1/admin/layers/{layer}:scale": ("/v1/admin/layers/working:scale", {"shards": 2}, {}),
        "GET /v1/audit": ("/v1/audit", None, {}),
        "GET /v1/export": ("/v1/export", None, {}),
        "GET /metrics": ("/metrics", None, {}),
        "GET /v1/usage": ("/v1/usage", None, {}),
        "GET /v1/admin/usage": (f"/v1/admin/usage?tenant={ACME}", None, {}),
    }[op]


def rest_variants(openapi: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(operation, variant, what to change)`` for every operation of the document: ``base``,
    then an edge form per scope-relevant field its path or body has."""
    schemas = openapi["components"]["schemas"]
    for path, operations in openapi["paths"].items():
        for method, spec in operations.items():
            op = f"{method.upper()} {path}"
            if path == "/healthz":
                continue
            yield op, "base", {}
            for param in spec.get("parameters", []):
                if param["in"] == "path" and param["name"] in PATH_EDGES:
                    name = param["name"]
                    if name == "session_id":
                        yield op, "session_id=other", {"path": (name, "other")}
                    else:
                        yield op, f"{name}=rival's", {"path": (name, "rival")}
            ref = spec.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            props = schemas.get(ref.get("$ref", "").rsplit("/", 1)[-1], {}).get("properties", {})
            for name in BODY_EDGES:
                if name not in props:
                    continue
                if name == "layers":
                    for label, value in LAYER_EDGES.items():
                        yield op, f"layers={label}", {"body": {"layers": value}}
                elif name == "session_id":
                    yield op, "session_id=other", {"body": {"session_id": "other"}}
                    yield op, "session_id=null", {"body": {"session_id": None}}
                    yield op, "session_id=omitted", {"drop": "session_id"}
                elif name == "doc_ids":
                    yield op, "doc_ids=[]", {"body": {"doc_ids": []}}
                    yield op, "doc_ids=rival's", {"body": {"doc_ids": ["d-rival"]}}


def _with_path_edge(op: str, path: str, name: str, value: str, ids: dict[str, str]) -> str:
    if name == "session_id":  # another session of the same tenant: read "other", delete one never made
        other = "elsewhere" if op.startswith("DELETE") else value
        return path.replace("/sessions/own", f"/sessions/{other}", 1).replace(
            "/sessions/never-made", f"/sessions/{other}", 1
        )
    rival = {
        "doc_id": "d-rival",
        "skill_id": ids["rival_skill"],
        "job_id": ids["rival_job"],
        "turn_id": ids["rival_turn"],
    }[name]
    template = op.split(" ", 1)[1]
    parts, sent = template.split("/"), path.split("?", 1)[0].split("/")
    sent[parts.index("{" + name + "}")] = rival
    query = path.split("?", 1)[1] if "?" in path else ""
    return "/".join(sent) + (f"?{query}" if query else "")


def send(stack: Running, method: str, path: str, key: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    for _ in range(20):
        r = httpx.request(
            method, stack.url + path, json=body, timeout=60, headers={"Authorization": f"Bearer {key}", **headers}
        )
        if r.status_code != 429 or "retry-after" not in r.headers:
            return r
        time.sleep(min(float(r.headers["retry-after"]), 2.0))
    return r


def outcome(status: int) -> str:
    """A cell's value: ok for a 2xx, else the status."""
    return "ok" if 200 <= status < 300 else str(status)


def leaks(kind: str, answer: str) -> list[str]:
    found = [RIVAL] if RIVAL in answer else []
    if DOC in answer and kind not in SEES_SHARED:
        found.append(DOC)
    if OTHER in answer and kind not in SEES_EVERY_SESSION:
        found.append(OTHER)
    return found


def _ordered(variants: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    # Deletions last: the rows before them read a world they left as made.
    return sorted(variants, key=lambda v: v[0].startswith("DELETE"))


def test_every_operation_with_every_key_and_edge_body(agents_stack: Running, world: dict[str, Any]) -> None:
    stack = agents_stack
    openapi = httpx.get(stack.url + "/openapi.json", timeout=30).json()
    table = read_table("rest")
    variants = _ordered(list(rest_variants(openapi)))
    generated = {(op, variant) for op, variant, _ in variants}
    assert generated - set(table) == set(), f"rows missing from {TABLE.name}: {sorted(generated - set(table))}"
    assert set(table) - generated == set(), f"rows of no operation: {sorted(set(table) - generated)}"

    ids = world["ids"]
    problems = []
    for op, variant, change in variants:
        method = op.split(" ", 1)[0]
        for kind in KINDS:
            path, body, headers = base_request(op, kind, ids)
            if "path" in change:
                name, value = change["path"]
                path = _with_path_edge(op, path, name, value, ids)
            if body is not None and "body" in change:
                body = {**body, **change["body"]}
            if body is not None and "drop" in change:
                body = {k: v for k, v in body.items() if k != change["drop"]}
            if op == "DELETE /v1/sessions/{session_id}":  # a session with memory to forget, each time
                said = stack.call("POST", path + "/turns", world["keys"]["tenant"], {"user": "hi"})
                assert said.status_code == 201, said.text
            r = send(stack, method, path, world["keys"][kind], body, headers)
            got, want = outcome(r.status_code), table[(op, variant)][kind]
            if got != want:
                problems.append(f"{op} [{variant}] {kind}: expected {want}, got {r.status_code} {r.text[:200]}")
            elif r.status_code >= 400 and not r.json().get("message"):
                problems.append(f"{op} [{variant}] {kind}: {r.status_code} without a message")
            if leaked := leaks(kind, r.text):
                problems.append(f"{op} [{variant}] {kind}: LEAK of {leaked}")
    assert not problems, f"{len(problems)} cells differ:\n" + "\n".join(problems)

    # Nothing of the rival tenant, nor acme's other session, was lost to an acme key's call.
    rival = stack.call("GET", "/v1/documents/d-rival", world["rival"])
    assert rival.status_code == 200, rival.text
    assert stack.call("GET", f"/v1/skills/{ids['rival_skill']}", world["rival"]).status_code == 200
    turns = stack.call("GET", "/v1/sessions/own/turns", world["rival"])
    assert RIVAL in turns.text
    assert OTHER in stack.call("GET", "/v1/sessions/other/turns", world["keys"]["tenant"]).text


# -- MCP ------------------------------------------------------------------------------------------


def base_arguments(tool: str, ids: dict[str, str]) -> dict[str, Any]:
    arguments: dict[str, dict[str, Any]] = {
        "add_memory": {"text": "hi", "session_id": "own"},
        "search_memory": {"query": "plans Kafka locker", "session_id": "own", "top_k": 50},
        "get_context": {"message": "plans Kafka", "session_id": "own"},
        "add_document": {"text": "# x\n\ny", "doc_id": "d-mcp"},
        "find_skill": {"task": "rotate keys"},
        "record_skill_outcome": {"skill_id": ids["skill"], "success": True},
        "learn_skill": {"task": "list files", "trace": ["ls"]},
        "forget": {"what": "turn", "id": "never-made", "session_id": "own"},
        "list_sessions": {},
    }
    return arguments[tool]


def tool_variants(tools: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(tool, variant, arguments to change)`` for every tool the server lists."""
    for tool, schema in sorted(tools.items()):
        props = schema.get("properties", {})
        yield tool, "base", {}
        if "layers" in props:
            for label, value in LAYER_EDGES.items():
                yield tool, f"layers={label}", {"layers": value}
        if "session_id" in props:
            yield tool, "session_id=other", {"session_id": "other"}
            yield tool, "session_id=null", {"session_id": None}
        if "skill_id" in props:
            yield tool, "skill_id=rival's", {"skill_id": ids_placeholder("rival_skill")}
        if tool == "forget":
            yield tool, "turn=rival's", {"id": ids_placeholder("rival_turn")}
            yield tool, "document=rival's", {"what": "document", "id": "d-rival"}
            yield tool, "skill=rival's", {"what": "skill", "id": ids_placeholder("rival_skill")}


def ids_placeholder(name: str) -> str:
    return "{" + name + "}"


def mcp_outcome(error: bool, said: str) -> str:
    if not error:
        return "ok"
    for word, value in (("Unauthorized", "401"), ("Forbidden", "403"), ("NotFound", "404"), ("Conflict", "409")):
        if word in said:
            return value
    if "InvalidInput" in said or "validation error" in said.lower():
        return "422"
    return "error"


async def _call_tool(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[str, str]:
    result = await client.call_tool(tool, arguments)
    said = text(result)
    return mcp_outcome(bool(result.is_error), said), said


def test_every_tool_with_every_key_and_edge_arguments(agents_stack: Running, world: dict[str, Any]) -> None:
    stack = agents_stack
    table = read_table("mcp")
    ids = world["ids"]

    async def run() -> list[str]:
        problems: list[str] = []
        for kind in KINDS:
            refused = _refused_at_the_door(stack, world["keys"][kind])
            if refused is not None:  # no tool runs: every row of this kind must say so
                wrong = sorted(f"{tool} [{variant}]" for (tool, variant), row in table.items() if row[kind] != refused)
                problems += [
                    f"{cell} {kind}: expected {table[c][kind]}, got {refused} at /mcp"
                    for cell, c in zip(wrong, sorted(c for c in table if table[c][kind] != refused), strict=True)
                ]
                continue
            async with over_http(stack, world["keys"][kind]) as client:
                tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
                variants = _ordered_tools(list(tool_variants(tools)))
                generated = {(tool, variant) for tool, variant, _ in variants}
                assert generated == set(table), (
                    f"rows missing from {TABLE.name} [mcp]: {sorted(generated - set(table))}; "
                    f"rows of no tool: {sorted(set(table) - generated)}"
                )
                for tool, variant, change in variants:
                    arguments = {**base_arguments(tool, ids), **change}
                    arguments = {
                        k: (ids[v[1:-1]] if isinstance(v, str) and v.startswith("{") else v)
                        for k, v in arguments.items()
                    }
                    got, said = await _call_tool(client, tool, arguments)
                    want = table[(tool, variant)][kind]
                    if got != want:
                        problems.append(f"{tool} [{variant}] {kind}: expected {want}, got {got}: {said[:200]}")
                    if leaked := leaks(kind, said):
                        problems.append(f"{tool} [{variant}] {kind}: LEAK of {leaked}")
        return problems

    problems = asyncio.run(run())
    assert not problems, f"{len(problems)} cells differ:\n" + "\n".join(problems)


def _refused_at_the_door(stack: Running, key: str) -> str | None:
    """The status /mcp answers a key with before any tool runs (401, 403), or None."""
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {key}"}
    answer = httpx.post(f"{stack.url}/mcp", json=hello, headers=headers, timeout=30)
    return str(answer.status_code) if answer.status_code in (401, 403) else None


def _ordered_tools(variants: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    return sorted(variants, key=lambda v: v[0] == "forget")
