"""A server on loopback that answers a few of Strata's routes as Strata does, or refuses them
(429, 503) as a test scripts it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The n-th answer: a status and its Retry-After header (None: none), or None for Strata's success.
Script = Callable[[int], tuple[int, str | None] | None]
#: What the server saw of each request: method, path and the Idempotency-Key header.
Seen = list[tuple[str, str, str | None]]

_OK: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/v1/sessions"): {"sessions": [], "total": 0, "next_after": None},
    ("GET", "/v1/sessions/s1/turns"): {"session_id": "s1", "turns": [], "total": 0, "next_after": None},
    ("POST", "/v1/search"): {"hits": [], "versions": {}},
    ("DELETE", "/v1/sessions/s1"): {"session_id": "s1", "removed": {}, "versions": {}},
}
_REFUSED = {429: "RateLimited", 503: "StoreUnavailable"}


@contextmanager
def strata_server(script: Script) -> Iterator[tuple[str, Seen]]:
    """A server on loopback answering as Strata does; ``script(n)`` decides the n-th answer."""
    seen: Seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            path = self.path.split("?")[0]
            seen.append((self.command, path, self.headers.get("Idempotency-Key")))
            scripted = script(len(seen) - 1)
            status, retry_after = scripted or (200, None)
            body = _OK[(self.command, path)] if status == 200 else {"error": _REFUSED[status], "message": "busy"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if retry_after is not None:
                self.send_header("retry-after", retry_after)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
