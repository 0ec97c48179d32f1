"""The memory tools over streamable HTTP, at ``/mcp`` inside the REST API's own app.

:class:`McpHttp` is an ASGI endpoint mounted in that app, so a request to ``/mcp`` passes the
app's middleware first: a missing or wrong bearer key is answered 401 before its body is read,
and the key's rate limit is taken. Each tool call then calls the API *in process*, through
``httpx.ASGITransport`` on the app that served the request (``scope["app"]``), with the
caller's own ``Authorization`` header: the same middleware, routes and scope checks as a REST
call (but for the key's rate limit, which the /mcp request took: a tool call costs one request
of it, not two), no second definition of any of them, and no loopback address to find (the app
need not know the host and port it is served on, behind Serve's proxy or another).

The MCP side is stateless, with JSON responses: any replica answers any call, and nothing is
kept between calls. The SDK's session manager needs a task group running for as long as the
endpoint serves; it is started on first use, on the loop that serves the requests (under
Serve, the replica's), in a task of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from strata.access.origins import OriginCheck
from strata.access.scopes import Forbidden
from strata_serve.auth import INNER_HEADER, bearer_key, inner_token
from strata_serve.client import AsyncStrataClient
from strata_serve.errors import error_response
from strata_serve.mcp_tools import Connect, build_server
from strata_serve.retry import NO_RETRY

__all__ = ["McpHttp"]

_log = logging.getLogger(__name__)


@asynccontextmanager
async def _as_caller(ctx: Context) -> AsyncIterator[AsyncStrataClient]:
    """A client of the app that served the call, with the caller's key."""
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise ToolError("this server answers MCP over HTTP only")
    key = bearer_key(request.headers.get("authorization"))
    if not key:  # the app's Authenticate refuses such a request before it gets here
        raise ToolError("send your API key as 'Authorization: Bearer <key>'")
    transport = _Inner(app=request.scope["app"])
    # No retries here: the /mcp request took the key's rate limit, and a busy store is the MCP
    # client's to wait for, not a request the ingress holds open (nor an Idempotency-Key to keep).
    async with AsyncStrataClient(
        "http://strata", key, transport=transport, retry=NO_RETRY, idempotency_keys=False
    ) as client:
        yield client


class _Inner(httpx.ASGITransport):
    """The app in process, each request marked as made on behalf of the MCP request being served
    (``INNER_HEADER``): the /mcp request took the key's rate limit, the API call does not again."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers[INNER_HEADER] = inner_token()
        return await super().handle_async_request(request)


@asynccontextmanager
async def _lifespan(_: MCPServer) -> AsyncIterator[Connect]:
    yield _as_caller


class McpHttp:
    """The ``/mcp`` endpoint: an ASGI app, the endpoint of a route (``Route("/mcp", McpHttp())``).

    A request from a browser page (one with an ``Origin`` header) is answered 403 unless that
    page is served from a loopback host or from one of ``allowed_origins``: the MCP transport's
    rule against DNS rebinding (:mod:`strata.access.origins`). The SDK's own check also
    compares the ``Host`` header with a list, which would refuse every name the API is reached
    by but localhost's; it stays off.

    Args:
        max_body_bytes: the largest request body the MCP transport reads (called once, on
            first use: under Serve the replica's ``serve.max_body_bytes``); default 4 MiB.
        allowed_origins: the browser origins let in besides loopback ones (called once, on
            first use: under Serve the replica's ``serve.mcp_allowed_origins``); default none.
    """

    def __init__(
        self,
        *,
        max_body_bytes: Callable[[], int] | None = None,
        allowed_origins: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self.allowed_origins = allowed_origins
        self._origins: OriginCheck | None = None
        self._manager: asyncio.Future[StreamableHTTPSessionManager] | None = None
        self._task: asyncio.Task[None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Serve pickles the app with this endpoint in it: a copy starts its own manager.
        return {"max_body_bytes": self.max_body_bytes, "allowed_origins": self.allowed_origins,
                "_origins": None, "_manager": None, "_task": None}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._origins is None:
            self._origins = OriginCheck(self.allowed_origins() if self.allowed_origins else ())
        origin = Headers(scope=scope).get("origin")
        if not self._origins.allows(origin):
            shown = (origin or "")[:200]
            refused = Forbidden(
                f"a page of origin {shown!r} may not call /mcp: browser pages are let in from a loopback "
                "host or from an origin listed in serve.mcp_allowed_origins (protection against DNS rebinding)"
            )
            await error_response(refused)(scope, receive, send)
            return
        manager = await self._started()
        await manager.handle_request(scope, receive, send)

    async def aclose(self) -> None:
        """Stop the session manager (a request after this starts it again)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _started(self) -> StreamableHTTPSessionManager:
        if self._manager is None:
            loop = asyncio.get_running_loop()
            self._manager = loop.create_future()
            # A context of its own: the tools' tasks must not inherit the first request's
            # (the key the middleware resolved for it, say).
            self._task = loop.create_task(self._serve(self._manager), context=contextvars.Context())
        return await asyncio.shield(self._manager)

    async def _serve(self, ready: asyncio.Future[StreamableHTTPSessionManager]) -> None:
        try:
            server = build_server(_lifespan)
            limit = self.max_body_bytes() if self.max_body_bytes else DEFAULT_MAX_REQUEST_BODY_SIZE
            # Made for its session manager; the app itself is not used (this endpoint is the route).
            server.streamable_http_app(
                json_response=True,
                stateless_http=True,
                # The bearer key guards the endpoint; a Host check would refuse every name the
                # API is reached by but localhost's.
                transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                max_request_body_size=limit,
            )
            manager = server.session_manager
            async with manager.run():
                ready.set_result(manager)
                await asyncio.Event().wait()  # until the loop (the replica) stops
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            _log.warning("the MCP session manager stopped: %s", type(exc).__name__)
        finally:
            if not ready.done():
                ready.cancel()
            if self._manager is ready:
                self._manager = None
