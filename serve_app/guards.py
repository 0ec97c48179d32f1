"""The middleware that bounds a request: its body (413, :class:`BodyLimit`), its time (504,
:class:`Deadline`), and what it may raise (500, :class:`Internal`, logged without a word of the
request). Each is pure ASGI and answers in Strata's error shape (:mod:`strata_serve.errors`).

The API's other middleware: the bearer key (:class:`strata_serve.auth.Authenticate`), the
replay of a retried write (:class:`strata_serve.idempotent.Idempotent`) and the security
headers (:class:`strata_serve.headers.SecurityHeaders`); their order is in
:mod:`strata_serve.api`.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strata.errors import StrataError
from strata_actors.errors import unwrap
from strata_serve.errors import error_response, internal_response

__all__ = [
    "WRITE_METHODS",
    "BodyLimit",
    "Deadline",
    "Internal",
    "deadline_response",
    "route_of",
    "too_large_response",
]

_log = logging.getLogger(__name__)

#: The methods that change something: a retried one may carry an Idempotency-Key.
WRITE_METHODS = frozenset(("POST", "PATCH", "PUT", "DELETE"))

def too_large_response(limit_bytes: int, *, declared_bytes: int | None = None) -> JSONResponse:
    """The 413 for a body over ``serve.max_body_bytes``; ``declared_bytes``: its Content-Length."""
    size = f"{declared_bytes:,} bytes, over" if declared_bytes is not None else "over"
    mib = f" ({limit_bytes / 2**20:.4g} MiB)" if limit_bytes >= 2**20 else ""
    message = (
        f"the request body is {size} the limit of {limit_bytes:,} bytes{mib}; send less, or raise "
        "serve.max_body_bytes (STRATA_SERVE__MAX_BODY_BYTES) on the server"
    )
    return JSONResponse(
        {"error": "BodyTooLarge", "message": message, "max_body_bytes": limit_bytes},
        status_code=413,
        # No "Connection: close": the server would close with the rest of the body unread,
        # and the kernel answers that with a reset that can drop this very answer. Kept
        # open, the connection's parser discards the rest of the body, and the client
        # reads its 413 once it has sent it.
    )


class _OverLimit(Exception):
    """Raised into the app by :class:`BodyLimit`'s ``receive`` once the body passes the limit."""


class BodyLimit:
    """Answer 413 to a request whose body is over ``max_bytes()`` bytes, before the app reads it.

    Pure ASGI: ``BaseHTTPMiddleware`` would buffer the very body it is meant to bound. A
    ``Content-Length`` over the limit is refused before the app is called. A body without one
    (chunked) is counted as the app receives it: the message that passes the limit is never
    handed on, the app's read fails instead, whatever the app answers to that is dropped,
    and the client gets the 413.

    Args:
        app: the ASGI app to guard.
        max_bytes: the limit in bytes, read once per request (the Api replica's settings
            arrive after the app is built).
    """

    def __init__(self, app: ASGIApp, *, max_bytes: Callable[[], int]) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes()
        try:
            declared: int | None = int(Headers(scope=scope).get("content-length", ""))
        except ValueError:  # absent (chunked) or malformed: counted below all the same
            declared = None
        if declared is not None and declared > limit:
            await too_large_response(limit, declared_bytes=declared)(scope, receive, send)
            return

        received = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal received, refused
            if received > limit:
                raise _OverLimit
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = not started
                    raise _OverLimit
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if refused:  # the app's answer to its failed read (FastAPI makes it a 400)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not refused:  # anything but the consequence of the refused read is the app's own
                raise
        if refused:
            await too_large_response(limit)(scope, receive, send)


def deadline_response(timeout_s: float, method: str) -> JSONResponse:
    """The 504 for a request still running after ``timeout_s``."""
    if method in WRITE_METHODS:
        what = (
            "it is still running and will be applied unless it fails; read the result back, or retry "
            "with the same Idempotency-Key header to get its answer once it is done"
        )
    else:
        what = "retry shortly"
    message = (
        f"the request took longer than {timeout_s:g} s (serve.request_timeout_s); {what}. "
        "A server this slow is overloaded: fewer concurrent calls, or more replicas, help"
    )
    return JSONResponse(
        {"error": "Timeout", "message": message, "timeout_s": timeout_s}, status_code=504, headers={"Retry-After": "5"}
    )


class Deadline:
    """Answer 504 in Strata's error shape to a request still running after ``timeout_s()``.

    Serve's HTTP proxy has its own timeout, which answers a plain-text 408 and cancels the
    request wherever it is; the stack sets the proxy's a few seconds longer, so this one
    answers first. The work is not cancelled: a write half done when a timer fired would
    be worse than one that completes late. It runs on in the replica, and its answer is
    dropped (or kept for an Idempotency-Key retry, by :class:`~strata_serve.idempotent.Idempotent`,
    which runs inside this middleware). A response that has started (a stream) is let finish.
    """

    def __init__(self, app: ASGIApp, *, timeout_s: Callable[[], float]) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self._late: set[asyncio.Task[None]] = set()  # work answered with a 504, still running

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timeout_s = self.timeout_s()
        started = abandoned = False

        async def guarded(message: Message) -> None:
            nonlocal started
            if abandoned:  # the client has its 504 already
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        work = asyncio.ensure_future(self.app(scope, receive, guarded))
        try:
            done, _ = await asyncio.wait({work}, timeout=timeout_s)
        except asyncio.CancelledError:  # the client went away: so does the work, as without this
            work.cancel()
            raise
        if done or started:
            await work
            return
        abandoned = True
        self._late.add(work)
        work.add_done_callback(self._finished_late)
        await deadline_response(timeout_s, scope["method"])(scope, receive, send)

    def _finished_late(self, work: asyncio.Task[None]) -> None:
        self._late.discard(work)
        if not work.cancelled() and work.exception() is not None:
            _log.warning("a request answered with a 504 failed afterwards: %s", _safe_trace(work.exception()))


def _safe_trace(exc: BaseException | None) -> str:
    """An exception's type and where it was raised, without its message: the message of an
    unexpected error may quote the request (``int('...')``, a validation error's input)."""
    if exc is None:
        return "no exception"
    frames = traceback.extract_tb(exc.__traceback__)[-8:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(exc).__module__}.{type(exc).__qualname__} at {where or 'an unknown place'}"


def route_of(scope: Scope) -> tuple[BaseRoute, dict[str, Any]] | None:
    """The route of the app ``scope`` goes to, with its path parameters; None if none matches
    in full (FastAPI nests the routes of an included router, as Serve's ingress makes)."""

    def leaves(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
        for route in routes:
            nested = getattr(route, "original_router", None)
            yield from leaves(nested.routes) if nested is not None else (route,)

    for route in leaves(getattr(getattr(scope.get("app"), "router", None), "routes", ())):
        match, child = route.matches(scope)
        if match == Match.FULL:
            return route, dict(child.get("path_params", {}))
    return None


def _route_template(scope: Scope) -> str:
    """The route's path template (``/v1/sessions/{session_id}/turns``), never the path itself."""
    found = route_of(scope)
    return str(getattr(found[0], "path", "?")) if found is not None else "an unknown route"

class Internal:
    """Answer 500 to anything unexpected a request raises, and log what and where, never why.

    Starlette's last-resort handler answers too, but then re-raises, and Serve logs the
    exception with its message: the message of an unexpected error may quote the request
    (a header's value, a body's field), which would then sit in the logs. Here the
    exception ends: the log line holds its type, the route's template and the frames it
    passed through. A Strata error wrapped by Ray is answered as itself.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            err = unwrap(exc)
            if isinstance(err, StrataError):
                response = error_response(err)
            else:
                _log.error("500 on %s %s: %s", scope["method"], _route_template(scope), _safe_trace(err))
                response = internal_response()
            if not started:  # a started answer cannot change its status; the client sees it cut
                await response(scope, receive, send)

