"""``Idempotency-Key`` on any write: a retried write is applied once.

A pure ASGI middleware in front of the routes. For a POST, PATCH, PUT or
DELETE with the header, and a valid tenant key in ``Authorization`` (checked,
with its rate limit, by :class:`~strata_serve.auth.Authenticate`, outside it:
a replay is authorised as a first attempt is), it reads the body (bounded by
:class:`~strata_serve.errors.BodyLimit`, outside it too), and:

- replays the kept answer when the tenant sent the same key with the same
  request before (``Idempotent-Replayed: true``);
- answers 422 when the key came with a different request;
- otherwise runs the route and keeps a 2xx answer for ``serve.idempotency_ttl_s``.
  Errors are not kept: a retry after a 409, 429 or 503 is tried again.

A tenant's full keys share its kept answers (a retry after a key rotation is
answered). A narrower key (read-only, or one session's) is answered only what
it sent itself: another key's answer could be one its scope may not read.

One key is handled at a time per Api replica. Two replicas that receive the
same key at the same moment may both apply it (there is no insert-if-absent in
Milvus); a client retrying after a timeout does not hit that.

A delete (``DELETE``, 2xx) drops the tenant's kept answers: they may hold
content that is forgotten now.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strata.access.idempotency import Answer, IdempotencyStore, fingerprint
from strata.errors import StrataError
from strata_serve.auth import bearer_key, current_key
from strata_serve.errors import WRITE_METHODS

__all__ = ["Idempotent", "Replica", "replica_parts"]

_log = logging.getLogger(__name__)

_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
_KEPT_HEADERS = ("content-type", "etag", "location")

#: What the middleware needs from the Api replica: the tenant of a bearer key (None if it is
#: not an active tenant key) and the store of kept answers.
Replica = tuple[Callable[[str | None], Awaitable[str | None]], Callable[[], Awaitable[IdempotencyStore]]]


def _refusal(message: str) -> JSONResponse:
    return JSONResponse({"error": "InvalidInput", "message": message, "field": "Idempotency-Key"}, status_code=422)


class Idempotent:
    def __init__(self, app: ASGIApp, *, replica: Callable[[], Replica]) -> None:
        self.app = app
        self.replica = replica
        #: Per (tenant, key) being handled: its lock and how many requests hold or wait for it.
        self._locks: dict[tuple[str, str], list[Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope) if scope["type"] == "http" else None
        key = headers.get("idempotency-key") if headers is not None else None
        if headers is None or scope["method"] not in WRITE_METHODS:
            await self.app(scope, receive, send)
            return
        if key is None:
            if scope["method"] == "DELETE":
                await self._delete(scope, receive, send, headers)
            else:
                await self.app(scope, receive, send)
            return
        if not _KEY.fullmatch(key):
            await _refusal("Idempotency-Key must be 1 to 255 visible ASCII characters")(scope, receive, send)
            return
        body, replay = await _read_body(receive)
        tenant_of, answers_of = self.replica()
        try:
            tenant = await tenant_of(bearer_key(headers.get("authorization")))
        except StrataError:
            tenant = None
        if tenant is None:  # no valid tenant key: the route answers 401/403 as without the header
            await self.app(scope, replay, send)
            return
        scoped = current_key()
        if scoped is not None and (scoped.read_only or scoped.session_id is not None):
            key = f"{scoped.key_id}/{key}"
        print_ = fingerprint(scope["method"], scope["path"], scope.get("query_string", b""), body)
        slot = self._locks.setdefault((tenant, key), [asyncio.Lock(), 0])
        slot[1] += 1
        try:
            async with slot[0]:
                await self._once(scope, replay, send, tenant, key, print_, await answers_of())
        finally:
            slot[1] -= 1
            if not slot[1]:
                self._locks.pop((tenant, key), None)

    async def _delete(self, scope: Scope, receive: Receive, send: Send, headers: Headers) -> None:
        """A delete without a key: the tenant's kept answers go once it succeeded."""
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, receive, watch)
        if 200 <= status < 300:
            tenant_of, answers_of = self.replica()
            try:
                tenant = await tenant_of(bearer_key(headers.get("authorization")))
                if tenant is not None:
                    await asyncio.to_thread((await answers_of()).forget, tenant)
            except StrataError as exc:
                _log.warning("kept answers of idempotent writes not dropped after a delete: %s", exc.message)

    async def _once(
        self, scope: Scope, receive: Receive, send: Send, tenant: str, key: str, print_: str, answers: IdempotencyStore
    ) -> None:
        kept = await asyncio.to_thread(answers.get, tenant, key)
        if kept is not None:
            if kept.fingerprint != print_:
                await _refusal("this Idempotency-Key was sent with a different request; use a new key for a new "
                               "write")(scope, receive, send)
                return
            headers = {**kept.headers, "idempotent-replayed": "true"}
            response = JSONResponse(None, status_code=kept.status, headers=headers)
            response.body = kept.body.encode()
            response.headers["content-length"] = str(len(response.body))
            await response(scope, receive, send)
            return
        messages: list[Message] = []

        async def capture(message: Message) -> None:
            messages.append(message)

        try:
            await self.app(scope, receive, capture)
        except Exception:  # the app's error handler answered (captured) and re-raised
            for message in messages:
                await send(message)
            raise
        start = next((m for m in messages if m["type"] == "http.response.start"), None)
        status = int(start["status"]) if start else 500
        if 200 <= status < 300:
            out = Headers(raw=start["headers"]) if start else Headers()
            body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
            answer = Answer(print_, status, {h: out[h] for h in _KEPT_HEADERS if h in out}, body.decode(errors="replace"))
            try:
                if scope["method"] == "DELETE":
                    await asyncio.to_thread(answers.forget, tenant)
                if not await asyncio.to_thread(answers.put, tenant, key, answer):
                    _log.warning("answer to an idempotent write of tenant %s is too large to keep", tenant)
            except StrataError as exc:  # applied and answered: a retry now would apply it again
                _log.warning("answer to an idempotent write of tenant %s not kept: %s", tenant, exc.message)
        for message in messages:
            await send(message)


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body, and a ``receive`` that hands it to the app again."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(parts)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # a disconnect, if the app waits for one
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, replay


def replica_parts(replica: Any) -> Replica:
    """The :data:`Replica` callables of an :class:`~strata_serve.api.Api` instance."""
    return replica.tenant_of_key, replica.idempotency_store
