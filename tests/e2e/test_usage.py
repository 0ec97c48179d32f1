"""Usage (issue 45) on the shared stack: a tenant of its own makes known calls, and ``GET
/v1/usage`` (and the admin's ``GET /v1/admin/usage``) answer the items it holds, the calls
it made per route, and the tokens its texts cost the embedding model (as the model's own
tokenizer counts them, each cut to its limit) and the LLM (none: the stack has no LLM). The
processes write their counts every ``serve.usage_flush_s`` (5 s): a read writes its own
replica's first, the others' may take one interval, so the test polls."""

from __future__ import annotations

import time
from typing import Any

from tokenizers import Tokenizer

from strata.config import EmbeddingSettings
from strata.providers.embedder import embed_counted, minilm_files
from strata.providers.routes import script_route
from strata_actors.episodic import turn_text
from tests.e2e.running import SHARED_ADMIN_KEY, Running

TENANT = "usage-probe"
SESSION = "u1"
TURNS = [{"user": f"Question {i} about the Ostrava depot", "agent": f"Answer {i}"} for i in range(3)]
DOCUMENT = {"doc_id": "depot", "text": "# Depot\n\nThe Ostrava depot opens at six.\n\n## Keys\n\nAsk the guard."}


def _usage_until(stack: Running, key: str, calls: dict[str, int], *, timeout_s: float = 20.0) -> dict[str, Any]:
    """``/v1/usage`` once its calls (but its own route's, which grow with each poll) are ``calls``."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = stack.call("GET", "/v1/usage", key)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        seen = {route: n for route, n in body["calls"].items() if route != "usage"}
        if seen == calls or time.monotonic() > deadline:
            assert seen == calls
            return body
        time.sleep(1.0)


def test_usage_counts_what_a_tenant_wrote_and_called(agents_stack: Running) -> None:
    stack = agents_stack
    key = stack.new_key("create", TENANT)
    assert stack.call("POST", f"/v1/sessions/{SESSION}/turns/batch", key, {"turns": TURNS}).status_code == 201
    assert stack.call("POST", f"/v1/sessions/{SESSION}/turns", key, TURNS[0]).status_code == 201
    assert stack.call("POST", "/v1/documents", key, DOCUMENT).status_code == 201
    note = {"items": [{"role": "system", "content": "keep it short"}]}
    assert stack.call("POST", f"/v1/sessions/{SESSION}/working/items", key, note).status_code == 200
    for _ in range(3):
        assert stack.call("POST", "/v1/search", key, {"query": "depot"}).status_code == 200
    assert stack.call("GET", "/v1/documents/never-made", key).status_code == 404  # a call all the same
    working = stack.call("GET", f"/v1/sessions/{SESSION}/working", key).json()["items"]

    body = _usage_until(stack, key, {"record_turns": 1, "record_turn": 1, "index_document": 1,
                                     "add_working_items": 1, "search": 3, "get_document": 1, "get_working": 1})
    assert body["tenant"] == TENANT  # a usage call is counted once answered: not in its own answer
    items = body["items"]
    assert items["episodic"]["turns"] == 4 and items["episodic"]["sessions"] == 1
    assert items["working"]["items"] == len(working) and items["working"]["bytes"] > 0
    assert items["semantic"]["documents"] == 1 and items["semantic"]["passages"] >= 1
    assert items["procedural"] == {"skills": 0, "bytes": 0}
    assert items["episodic"]["bytes"] >= sum(len(t["user"]) + len(t["agent"]) for t in TURNS)
    assert sum(n for hour in body["hours"] for n in hour["calls"].values()) == sum(body["calls"].values())

    admin = stack.call("GET", f"/v1/admin/usage?tenant={TENANT}", SHARED_ADMIN_KEY)
    assert admin.status_code == 200, admin.text
    [mine] = admin.json()["tenants"]
    assert mine["items"] == items and mine["calls"]["search"] == 3
    every = stack.call("GET", "/v1/admin/usage", SHARED_ADMIN_KEY).json()["tenants"]
    assert any(t["tenant"] == TENANT and t["items"] is None for t in every)

    late = stack.call("GET", "/v1/usage?since=2026-12-07T05:00:00Z&until=2026-12-07T04:00:00Z", key)
    assert late.status_code == 422 and late.json()["field"] == "since", late.text
    long = stack.call("GET", "/v1/usage?since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z", key)
    assert long.status_code == 422 and "31 days" in long.json()["message"]
    session_key = stack.new_key("create", TENANT, "--session", SESSION)
    assert stack.call("GET", "/v1/usage", session_key).status_code == 403


def test_a_turn_in_another_script_counts_the_second_models_tokens_too(agents_stack: Running) -> None:
    # A Chinese turn is embedded by MiniLM and by e5 (embedding.script_route), and so is a query of
    # a tenant that has one: both models' tokens are the tenant's.
    stack = agents_stack
    key = stack.new_key("create", "usage-route")
    turns = [{"user": "最近在学弹吉他，手指很疼", "agent": "慢慢来，每天练二十分钟就好"}]
    query = "我在学什么乐器？"
    assert stack.call("POST", "/v1/sessions/t1/turns/batch", key, {"turns": turns}).status_code == 201
    assert stack.call("POST", "/v1/search", key, {"query": query, "layers": ["episodic"]}).status_code == 200
    route = script_route(EmbeddingSettings())
    assert route is not None
    _, (stored,) = embed_counted(route._model(), [turn_text(turns[0])])
    _, (asked,) = embed_counted(route._model(), [query], query=True)
    minilm = _pieces(turn_text(turns[0]), 256) + _pieces(query, 128)
    expected = {"embedding": minilm + stored + asked, "llm_in": 0, "llm_out": 0}
    deadline = time.monotonic() + 20.0
    while True:
        tokens = stack.call("GET", "/v1/usage", key).json()["tokens"]
        if tokens == expected or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert tokens == expected, (tokens, minilm, stored, asked)


def _pieces(text: str, limit: int) -> int:
    """Word pieces the MiniLM model reads of ``text``: its tokenizer's count, [CLS] and [SEP]
    included, cut to ``limit`` (``embedding.max_tokens`` 256 for a stored text, 128 for a query)."""
    tokenizer = Tokenizer.from_file(str(minilm_files()[1]))
    tokenizer.no_truncation()
    tokenizer.no_padding()  # its file pads to 128
    return min(len(tokenizer.encode(text.strip()).ids), limit)


def test_usage_counts_the_tokens_a_tenants_texts_were_embedded_from(agents_stack: Running) -> None:
    stack = agents_stack
    key = stack.new_key("create", "usage-tokens")
    turns = [{"user": f"Turn {i}: the Brno depot moved to Olomouc in spring", "agent": "Noted"} for i in range(4)]
    # Over 256 pieces, under episodic.passage_chars (no passages): counted as 256.
    turns.append({"user": "a " * 400, "agent": "ok"})
    query = "Where did the depot move?"
    assert stack.call("POST", "/v1/sessions/t1/turns/batch", key, {"turns": turns}).status_code == 201
    assert stack.call("POST", "/v1/search", key, {"query": query, "layers": ["episodic"]}).status_code == 200
    stored = sum(_pieces(turn_text(t), 256) for t in turns)
    assert _pieces(turn_text(turns[-1]), 10_000) > 256 and stored == 4 * _pieces(turn_text(turns[0]), 256) + 256
    expected = {"embedding": stored + _pieces(query, 128), "llm_in": 0, "llm_out": 0}
    deadline = time.monotonic() + 20.0
    while True:
        body = stack.call("GET", "/v1/usage", key).json()
        if body["tokens"] == expected or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert body["tokens"] == expected
    assert sum(h["tokens"]["embedding"] for h in body["hours"]) == expected["embedding"]
    admin = stack.call("GET", "/v1/admin/usage?tenant=usage-tokens", SHARED_ADMIN_KEY).json()
    assert admin["tenants"][0]["tokens"] == expected

    # A document's passages are embedded by the semantic shard, which writes its counts itself
    # every serve.usage_flush_s.
    document = {"doc_id": "depots", "text": "The Brno depot moved to Olomouc in spring. It opens at six."}
    assert stack.call("POST", "/v1/documents", key, document).status_code == 201
    deadline = time.monotonic() + 20.0
    while True:
        tokens = stack.call("GET", "/v1/usage", key).json()["tokens"]
        if tokens["embedding"] > expected["embedding"] or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert tokens["embedding"] >= expected["embedding"] + _pieces(document["text"], 256)
