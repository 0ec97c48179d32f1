"""Tests for the LLM boundary against a real OpenAI-compatible server on loopback.

The server is a ``ThreadingHTTPServer`` on 127.0.0.1 (port 0) that answers
``POST /v1/chat/completions`` from a script of replies and records every
request body, so the tests see exactly what the client sent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import BaseModel

from strata.config import LLMSettings
from strata.counting import COUNTER, on_behalf_of
from strata.episodic.summarize import ExtractiveSummarizer, LLMSummarizer, SummaryInput
from strata.errors import LLMError, LLMOutputInvalid
from strata.providers.llm import OpenAIChatLLM, complete_json, make_llm

TURNS = [
    SummaryInput("user", "I love hiking in the mountains near Denver."),
    SummaryInput("assistant", "Denver has great hiking trails in the mountains."),
    SummaryInput("user", "I need to book a hiking cabin by Friday."),
]
GOOD_SUMMARY = {
    "summary": "The user plans a hiking trip near Denver.",
    "key_topics": ["hiking", "Denver"],
    "action_items": ["book a cabin by Friday"],
    "user_preferences": ["loves hiking"],
}


# --- the scripted server -------------------------------------------------------


@dataclass
class Reply:
    content: str | None = None
    refusal: str | None = None
    status: int = 200
    #: Hold the request until the test ends (the client must time out first).
    hang: bool = False
    prompt_tokens: int = 11
    completion_tokens: int = 7


@dataclass
class Script:
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def push(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def next(self, path: str, body: dict[str, Any]) -> Reply | None:
        with self.lock:
            self.paths.append(path)
            self.requests.append(body)
            return self.replies.pop(0) if self.replies else None


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("retry-after-ms", "1")
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            reply = script.next(self.path, body)
            if reply is None:
                self._send(500, {"error": {"message": "no scripted reply left"}})
                return
            if reply.hang:
                script.release.wait(10)
            if reply.status != 200:
                self._send(reply.status, {"error": {"message": "scripted failure", "type": "server_error"}})
                return
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.refusal is not None:
                message["refusal"] = reply.refusal
            self._send(
                200,
                {
                    "id": f"chatcmpl-{len(script.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "m"),
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {
                        "prompt_tokens": reply.prompt_tokens,
                        "completion_tokens": reply.completion_tokens,
                        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                    },
                },
            )

    return Handler


@dataclass
class Server:
    script: Script
    base_url: str

    def settings(self, **kw: Any) -> LLMSettings:
        values: dict[str, Any] = {"base_url": self.base_url, "model": "test-model", "timeout_s": 5.0, "max_retries": 0}
        values.update(kw)
        return LLMSettings(**values)

    def llm(self, **kw: Any) -> OpenAIChatLLM:
        return OpenAIChatLLM(self.settings(**kw))


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield Server(script, f"http://127.0.0.1:{httpd.server_address[1]}/v1")
    finally:
        script.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
        assert not thread.is_alive()


class Answer(BaseModel):
    answer: int


def _validate(obj: dict[str, Any]) -> Answer:
    return Answer.model_validate(obj)


# --- OpenAIChatLLM -------------------------------------------------------------


def test_make_llm_none_without_base_url() -> None:
    assert make_llm(LLMSettings()) is None


def test_complete_sends_prompt_and_counts_usage(server: Server) -> None:
    server.script.push(Reply(content="hello", prompt_tokens=12, completion_tokens=3))
    llm = server.llm()
    assert llm.complete("be brief", "say hello") == "hello"
    (body,) = server.script.requests
    assert body["model"] == "test-model"
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hello"}]
    assert body["temperature"] == 0
    assert "response_format" not in body
    assert (llm.usage.calls, llm.usage.failures) == (1, 0)
    assert (llm.usage.prompt_tokens, llm.usage.completion_tokens) == (12, 3)


def test_complete_json_parses_clean_reply(server: Server) -> None:
    server.script.push(Reply(content='{"answer": 42}'))
    llm = server.llm()
    assert complete_json(llm, "sys", "question", validate=_validate) == Answer(answer=42)
    (body,) = server.script.requests
    assert body["response_format"] == {"type": "json_object"}  # no schema given: JSON mode alone
    assert body["max_tokens"] == 512  # llm.max_tokens.other
    assert llm.usage.calls == 1


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"answer": 7}\n```',
        '```\n{"answer": 7}\n```',
        'Sure! Here is the JSON you asked for:\n```json\n{"answer": 7}\n```\nLet me know if you need more.',
        'The result is {"answer": 7} as requested.',
    ],
)
def test_complete_json_repairs_fences_and_prose(server: Server, content: str) -> None:
    server.script.push(Reply(content=content))
    assert complete_json(server.llm(), "sys", "q", validate=_validate) == Answer(answer=7)
    assert len(server.script.requests) == 1  # repaired, not retried


@pytest.mark.parametrize("bad", ["not json at all", '{"answer": "many"}', "[1, 2, 3]", '{"answer": 1'])
def test_complete_json_retries_once_then_succeeds(server: Server, bad: str) -> None:
    server.script.push(Reply(content=bad), Reply(content='{"answer": 5}'))
    llm = server.llm()
    assert complete_json(llm, "sys", "the question", validate=_validate) == Answer(answer=5)
    first, second = server.script.requests
    assert first["messages"][1]["content"] == "the question"
    retry_prompt = second["messages"][1]["content"]
    assert retry_prompt.startswith("the question")
    assert "previous reply was not valid" in retry_prompt
    assert llm.usage.calls == 2


def test_complete_json_gives_up_after_two_invalid_replies(server: Server) -> None:
    server.script.push(Reply(content="nope"), Reply(content='{"answer": "still wrong"}'))
    with pytest.raises(LLMOutputInvalid) as info:
        complete_json(server.llm(), "sys", "q", validate=_validate)
    assert isinstance(info.value, LLMError)
    assert info.value.message.startswith("LLM output did not validate")
    assert len(server.script.requests) == 2


def test_complete_json_validator_with_bare_value_error(server: Server) -> None:
    def picky(obj: dict[str, Any]) -> dict[str, Any]:
        if obj.get("ok") is not True:
            raise ValueError
        return obj

    server.script.push(Reply(content='{"ok": false}'), Reply(content='{"ok": false}'))
    with pytest.raises(LLMOutputInvalid):
        complete_json(server.llm(), "sys", "q", validate=picky)


def test_http_500_raises_llm_error(server: Server) -> None:
    server.script.push(Reply(status=500))
    llm = server.llm()
    with pytest.raises(LLMError) as info:
        llm.complete("sys", "q")
    assert not isinstance(info.value, LLMOutputInvalid)
    assert "InternalServerError" in info.value.message
    assert (llm.usage.calls, llm.usage.failures) == (0, 1)
    assert len(server.script.requests) == 1  # max_retries=0


def test_http_500_is_retried_when_configured(server: Server) -> None:
    server.script.push(Reply(status=500), Reply(content="second time lucky"))
    llm = server.llm(max_retries=1)
    assert llm.complete("sys", "q") == "second time lucky"
    assert len(server.script.requests) == 2


def test_refusal_raises_llm_error(server: Server) -> None:
    server.script.push(Reply(content=None, refusal="I can't help with that."))
    with pytest.raises(LLMError, match="refused"):
        server.llm().complete("sys", "q")


def test_timeout_raises_llm_error(server: Server) -> None:
    server.script.push(Reply(content='{"answer": 1}', hang=True))
    llm = server.llm(timeout_s=0.5, max_retries=0)
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        llm.complete("sys", "q")
    elapsed = time.monotonic() - started
    assert "did not answer within 0.5 s" in info.value.message
    assert 0.4 < elapsed < 3.0
    assert llm.usage.failures == 1


def test_unreachable_endpoint_raises_llm_error() -> None:
    # A loopback port that was just free: nothing listens, the connection is refused.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = OpenAIChatLLM(LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", timeout_s=1.0, max_retries=0))
    with pytest.raises(LLMError, match="Connection"):
        llm.complete("sys", "q")


def test_no_base_url_is_rejected() -> None:
    with pytest.raises(ValueError):
        OpenAIChatLLM(LLMSettings())


# --- LLMSummarizer -------------------------------------------------------------


def _assert_extractive_fallback(result: Any, reason_part: str) -> None:
    expected = ExtractiveSummarizer().summarize(TURNS)
    assert result.method == "extractive"
    assert result.fallback_reason and reason_part in result.fallback_reason
    assert result.summary.strip()
    assert (result.summary, result.key_topics, result.action_items, result.user_preferences) == (
        expected.summary,
        expected.key_topics,
        expected.action_items,
        expected.user_preferences,
    )


def test_summarizer_uses_llm_reply(server: Server) -> None:
    server.script.push(Reply(content=json.dumps(GOOD_SUMMARY), prompt_tokens=100, completion_tokens=20))
    llm = server.llm()
    result = LLMSummarizer(llm).summarize(TURNS)
    assert result.method == "llm"
    assert result.fallback_reason is None
    assert result.summary == GOOD_SUMMARY["summary"]
    assert result.key_topics == ("hiking", "Denver")
    assert result.action_items == ("book a cabin by Friday",)
    assert result.user_preferences == ("loves hiking",)
    (body,) = server.script.requests
    transcript = body["messages"][1]["content"]
    assert "user: I love hiking in the mountains near Denver." in transcript
    assert "assistant: Denver has great hiking trails" in transcript
    assert (llm.usage.calls, llm.usage.prompt_tokens, llm.usage.completion_tokens) == (1, 100, 20)


def test_summarizer_falls_back_on_malformed_json(server: Server) -> None:
    server.script.push(Reply(content="{summary: oops"), Reply(content='{"summary": ""}'))
    llm = server.llm()
    result = LLMSummarizer(llm).summarize(TURNS)
    _assert_extractive_fallback(result, "did not validate")
    assert len(server.script.requests) == 2
    assert llm.usage.calls == 2


def test_summarizer_falls_back_on_timeout(server: Server) -> None:
    server.script.push(Reply(content=json.dumps(GOOD_SUMMARY), hang=True))
    llm = server.llm(timeout_s=0.5, max_retries=0)
    result = LLMSummarizer(llm).summarize(TURNS)
    _assert_extractive_fallback(result, "did not answer")
    assert (llm.usage.calls, llm.usage.failures) == (0, 1)


def test_summarizer_falls_back_on_refusal(server: Server) -> None:
    server.script.push(Reply(content=None, refusal="no"))
    result = LLMSummarizer(server.llm()).summarize(TURNS)
    _assert_extractive_fallback(result, "refused")


def test_summarizer_falls_back_on_http_500(server: Server) -> None:
    server.script.push(Reply(status=500))
    result = LLMSummarizer(server.llm()).summarize(TURNS)
    _assert_extractive_fallback(result, "InternalServerError")


def test_tokens_count_for_the_tenant_the_call_works_for(server: Server) -> None:
    def acme_tokens() -> dict[str, int]:
        rows = [r for r in COUNTER.pending() if r.session == "acme-llm-usage"]
        return {k: v for r in rows for k, v in r.payload["tokens"].items()}

    before = acme_tokens()
    server.script.push(Reply(content="hello", prompt_tokens=12, completion_tokens=3))
    server.script.push(Reply(content="again", prompt_tokens=7, completion_tokens=2))
    llm = server.llm()
    with on_behalf_of("acme-llm-usage"):
        llm.complete("be brief", "say hello")
    llm.complete("be brief", "say it again")  # nobody's: the meter counts it, no tenant does
    after = acme_tokens()
    assert after.get("llm_in", 0) - before.get("llm_in", 0) == 12
    assert after.get("llm_out", 0) - before.get("llm_out", 0) == 3
