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
def llm_server(script: Callable[[int], Reply]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve ``/v1/chat/completions``; ``script(n)`` decides the n-th reply.
    Yields the base URL and the list of received request bodies."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            received.append(json.loads(self.rfile.read(length) or b"{}"))
            reply = script(len(received) - 1)
            status, body = reply() if callable(reply) else (200, chat_body(reply))
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", received
    finally:
        server.shutdown()
        server.server_close()


def hang(seconds: float) -> Callable[[], tuple[int, dict[str, Any]]]:
    def reply() -> tuple[int, dict[str, Any]]:
        time.sleep(seconds)
        return 200, chat_body('{"summary": "too late"}')
    return reply
