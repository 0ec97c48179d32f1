"""An OpenAI-compatible chat server on loopback, scripted by the test that starts it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A reply is either a message content string, or a callable returning (status, body dict).
Reply = str | Callable[[], tuple[int, dict[str, Any]]]


def chat_body(content: str | None, refusal: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "test",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content, "refusal": refusal}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


@contextmanager
def serving(answer: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]) -> Iterator[str]:
    """Serve ``POST`` on loopback: ``answer(body)`` gives each reply's status and JSON body.
    Yields the base URL (``/v1`` included)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            status, body = answer(json.loads(self.rfile.read(length) or b"{}"))
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up; the reply was made for nobody

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def llm_server(script: Callable[[int], Reply]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve ``/v1/chat/completions``; ``script(n)`` decides the n-th reply.
    Yields the base URL and the list of received request bodies."""
    received: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        received.append(body)
        reply = script(len(received) - 1)
        return reply() if callable(reply) else (200, chat_body(reply))

    with serving(answer) as url:
        yield url, received


def hang(seconds: float) -> Callable[[], tuple[int, dict[str, Any]]]:
    def reply() -> tuple[int, dict[str, Any]]:
        time.sleep(seconds)
        return 200, chat_body('{"summary": "too late"}')
    return reply


class SmallModel:
    """An OpenAI-compatible server that misbehaves as a small local model behind llama.cpp's
    server did (SmolLM2-135M, issue 43), in seconds instead of minutes:

    - it generates one reply at a time: a request waits behind the others (``waited_s``);
    - it writes ``per_token_s`` per token, ~4 characters a token, and goes on generating after
      the client gave up (holding up the requests behind it);
    - without ``max_tokens`` it runs away: ``runaway_tokens`` of prose after the object;
    - with ``max_tokens`` its reply is cut there, JSON and all (``finish_reason: length``);
    - without a schema in ``response_format`` it leaves out every key but the first;
    - it refuses OpenAI's ``json_schema`` form with a 422, as llama-cpp-python 0.3.36 does
      (a 500 naming ``response_format`` under FastAPI 0.165: ``refusal_status``).

    ``answer(body)`` gives the JSON object the model means to write for a request.
    """

    def __init__(
        self,
        answer: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        per_token_s: float = 0.001,
        runaway_tokens: int = 4000,
        refuse_json_schema: bool = True,
        refusal_status: int = 422,
    ) -> None:
        self.answer = answer
        self.per_token_s = per_token_s
        self.runaway_tokens = runaway_tokens
        self.refuse_json_schema = refuse_json_schema
        self.refusal_status = refusal_status
        self.requests: list[dict[str, Any]] = []
        self.waited_s: list[float] = []
        self._generating = threading.Lock()

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        fmt = body.get("response_format") or {}
        if self.refuse_json_schema and fmt.get("type") == "json_schema":
            return self.refusal_status, {"detail": [{"loc": ["body", "response_format", "type"],
                                     "msg": "Input should be 'text' or 'json_object'", "type": "literal_error"}]}
        meant = self.answer(body)
        if "schema" not in fmt:
            meant = dict(list(meant.items())[:1])
        text = json.dumps(meant)
        limit = body.get("max_tokens")
        if limit is None:
            text += " Let me explain." * (self.runaway_tokens // 4)
            tokens = len(text) // 4 + 1
        else:
            tokens = min(len(text) // 4 + 1, int(limit))
            text = text[: tokens * 4]
        arrived = time.monotonic()
        with self._generating:
            self.waited_s.append(time.monotonic() - arrived)
            time.sleep(tokens * self.per_token_s)
        body_out = chat_body(text)
        body_out["usage"] = {"prompt_tokens": 50, "completion_tokens": tokens, "total_tokens": 50 + tokens}
        return 200, body_out

    @contextmanager
    def serving(self) -> Iterator[str]:
        """Serve it on loopback; yields the base URL."""
        with serving(self.reply) as url:
            yield url
