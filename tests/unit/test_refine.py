"""Tests for refine_items against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from strata.config import LLMSettings
from strata.context.refine import refine_items
from strata.errors import LLMError, LLMOutputInvalid
from strata.providers.llm import OpenAIChatLLM
from strata.providers.tokens import TiktokenCounter
from strata.schema import ContextItem, SourceRef
from tests.llm_server import chat_body, hang, llm_server

COUNTER = TiktokenCounter()
MESSAGE = "When is the budget meeting, and how do I restart the node?"
ITEMS = [
    ContextItem(
        layer="episodic", kind="turn", id="t1", score=0.031,
        text="user: the budget meeting moved to Thursday 14:00, Caroline will send OPS-1234",
        timestamp=datetime(2024, 3, 1, 9, 30, tzinfo=UTC),
    ),
    ContextItem(
        layer="semantic", kind="passage", id="runbook#0", score=0.028,
        text="To restart a node: drain it, then run `make restart NODE=7`.",
        source=SourceRef(doc_id="runbook", title="Runbook", start=0, end=60),
    ),
    ContextItem(layer="procedural", kind="procedure", id="p1", score=0.8, text="我们周末去爬山"),
]
SHORT = "Budget meeting: Thursday 14:00 (moved, per Caroline, OPS-1234). Restart: drain, then `make restart NODE=7`."
LONG = " ".join([SHORT] * 10)


class Server:
    """One loopback server for the module (each costs ~0.5 s to shut down), scripted per test."""

    def __init__(self, url: str, received: list[dict[str, Any]]) -> None:
        self.url, self._received, self._start = url, received, 0
        self._script: Callable[[int], Any] = lambda n: _reply("unscripted")

    def reply(self, n: int) -> Any:
        return self._script(n - self._start)

    def serve(self, script: Callable[[int], Any]) -> str:
        """Answer this test's n-th request with ``script(n)``; return the base URL."""
        self._script, self._start = script, len(self._received)
        return self.url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The request bodies of this test."""
        return self._received[self._start :]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    holder: list[Server] = []
    with llm_server(lambda n: holder[0].reply(n)) as (url, received):
        holder.append(Server(url, received))
        yield holder[0]


def _llm(url: str, timeout_s: float = 5.0) -> OpenAIChatLLM:
    return OpenAIChatLLM(LLMSettings(base_url=url, timeout_s=timeout_s, max_retries=0))


def _reply(context: str) -> str:
    return json.dumps({"context": context})


def _refine(url: str, budget: int = 40) -> str:
    return refine_items(_llm(url), message=MESSAGE, items=ITEMS, budget_tokens=budget, counter=COUNTER)


def test_valid_reply_is_returned(server: Server) -> None:
    url = server.serve(lambda n: _reply(f"  {SHORT}\n"))
    assert _refine(url) == SHORT
    (body,) = server.requests
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["context"]
    assert body["max_tokens"] == 40 * 2 + 32  # the budget, in a smaller model's tokens, and the JSON


def test_prompt_carries_the_message_the_items_and_the_budget(server: Server) -> None:
    _refine(server.serve(lambda n: _reply(SHORT)), budget=120)
    system, user = (m["content"] for m in server.requests[0]["messages"])
    assert "120 tokens" in system and "90 English words" in system
    assert "JSON" in system and '{"context"' in system
    assert "exactly" in system and "language" in system
    assert MESSAGE in user
    lines = user.splitlines()
    assert any(line.startswith("[1] (episodic, 2024-03-01 09:30)") and "OPS-1234" in line for line in lines)
    assert any(
        line.startswith("[2] (semantic, undated, from Runbook)") and "make restart NODE=7" in line for line in lines
    )
    assert any(line.startswith("[3] (procedural, undated)") and "我们周末去爬山" in line for line in lines)
    assert user.index("[1]") < user.index("[2]") < user.index("[3]")  # the caller's order: best first


def test_long_input_is_truncated(server: Server) -> None:
    many = [ITEMS[0].model_copy(update={"id": f"t{n}", "text": f"<{n:03d}> " + "word " * 200}) for n in range(50)]
    url = server.serve(lambda n: _reply(SHORT))
    refine_items(
        _llm(url), message="hello " * 5000, items=many, budget_tokens=50, counter=COUNTER, max_input_chars=6000
    )
    user = server.requests[0]["messages"][1]["content"]
    assert len(user) <= 6000
    assert "<000>" in user and "<049>" not in user
    assert "items left out for length" in user


def test_over_budget_reply_is_retried_with_the_problem(server: Server) -> None:
    assert COUNTER.count(LONG) > 40
    replies = [_reply(LONG), _reply(SHORT)]
    assert _refine(server.serve(lambda n: replies[n]), budget=40) == SHORT
    assert len(server.requests) == 2
    retry = server.requests[1]["messages"][1]["content"]
    assert "previous reply was not valid" in retry
    assert f"has {COUNTER.count(LONG)} tokens but the limit is 40" in retry


def test_over_budget_twice_raises_and_never_returns_it(server: Server) -> None:
    url = server.serve(lambda n: _reply(LONG))
    with pytest.raises(LLMOutputInvalid, match="limit is 40"):
        _refine(url, budget=40)
    assert len(server.requests) == 2


@pytest.mark.parametrize("bad", ["not json", '{"context": ""}', '{"context": 42}', '{"summary": "x"}', "[1]"])
def test_invalid_output_twice_raises(server: Server, bad: str) -> None:
    url = server.serve(lambda n: bad)
    with pytest.raises(LLMOutputInvalid) as info:
        _refine(url)
    assert isinstance(info.value, LLMError)
    assert len(server.requests) == 2


def test_http_500_raises_llm_error(server: Server) -> None:
    url = server.serve(lambda n: lambda: (500, {"error": {"message": "boom", "type": "server_error"}}))
    with pytest.raises(LLMError) as info:
        _refine(url)
    assert not isinstance(info.value, LLMOutputInvalid)
    assert len(server.requests) == 1


def test_refusal_raises_llm_error(server: Server) -> None:
    url = server.serve(lambda n: lambda: (200, chat_body(None, refusal="no")))
    with pytest.raises(LLMError, match="refused"):
        _refine(url)


def test_hanging_server_times_out_quickly(server: Server) -> None:
    url = server.serve(lambda n: hang(5))
    started = time.monotonic()
    with pytest.raises(LLMError, match="did not answer"):
        refine_items(_llm(url, timeout_s=0.5), message=MESSAGE, items=ITEMS, budget_tokens=40, counter=COUNTER)
    assert time.monotonic() - started < 3.0
    assert len(server.requests) == 1


def test_nothing_to_refine_is_a_caller_error() -> None:
    llm = _llm("http://127.0.0.1:9/v1")  # never called
    with pytest.raises(ValueError, match="no items"):
        refine_items(llm, message=MESSAGE, items=[], budget_tokens=40, counter=COUNTER)
    with pytest.raises(ValueError, match="budget_tokens"):
        refine_items(llm, message=MESSAGE, items=ITEMS, budget_tokens=0, counter=COUNTER)
