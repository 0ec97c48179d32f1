"""``Idempotency-Key`` on any write: a retried write is applied once.

A pure ASGI middleware in front of the routes. For a request to a route that
writes (``ROUTES`` in :mod:`strata_serve.auth` says which) with the header, from a
tenant key that may write (resolved, and its rate limit taken, by
:class:`~strata_serve.auth.Authenticate`, outside it, for a replay as for a first
attempt), it reads the body (bounded by :class:`~strata_serve.guards.BodyLimit`,
outside it too), and:

- replays the kept answer when the tenant sent the same key with the same
  request before (``Idempotent-Replayed: true``), once the key's scope is checked
  against what the route does, as the route checks a first attempt (403 otherwise);
- answers 422 when the key came with a different request;
- otherwise runs the route and keeps a 2xx answer for ``serve.idempotency_ttl_s``.
  Errors are not kept: a retry after a 409, 429 or 503 is tried again.

Nothing else is kept: not the answers of read routes (``/v1/context``, ``/v1/search``,
GETs: they would outlive what they show), nor anything for a read-only key (the
header passes to the route, which answers as without it).

A tenant's full keys share its kept answers (a retry after a key rotation is
answered). A narrower key (one session's, or without documents and skills) is
answered only what it sent itself: another key's answer could be one its scope may
not read.

One key is handled at a time, over every Api replica: a first attempt claims
the key (:class:`~strata.access.idempotency.ClaimBook`, shared by the replicas
in ``strata_actors.limits``), then reads the kept answer, then applies the
write; the same key sent meanwhile, to this replica or another, waits up to
``serve.idempotency_wait_s`` for that answer and is replayed it, or gets 409
with Retry-After (422 if it came with another request). Claiming before the
read is what makes a lost claim harmless once an answer is kept: the store, not
the claim, says a write was applied. When the claims do not answer, the write
gets 503 with Retry-After rather than run unclaimed.

A delete (``DELETE``, 2xx) drops the tenant's kept answers: they may hold
content that is forgotten now.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strata.access.idempotency import Answer, Claim, ClaimBook, IdempotencyStore, fingerprint
from strata.access.keys import KeyInfo
from strata.access.scopes import Forbidden, Need, authorize
from strata.errors import StrataError
from strata_serve.auth import ROUTES, current_key
from strata_serve.errors import error_response
from strata_serve.guards import WRITE_METHODS, route_of

__all__ = ["Idempotent", "Replica", "replica_parts"]

_log = logging.getLogger(__name__)

_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
_KEPT_HEADERS = ("content-type", "etag", "location")

#: What the middleware needs from the Api replica: the store of kept answers, and where keys are claimed.
Replica = Callable[[], Awaitable[tuple[IdempotencyStore, ClaimBook]]]


def _refusal(message: str) -> JSONResponse:
    return JSONResponse({"error": "InvalidInput", "message": message, "field": "Idempotency-Key"}, status_code=422)


def _in_flight(claim: Claim) -> JSONResponse:
    wait = max(1, math.ceil(claim.retry_after_s))
    return JSONResponse(
        {"error": "Conflict", "field": "Idempotency-Key", "retry_after_s": claim.retry_after_s,
         "message": f"a request with this Idempotency-Key is being applied; retry in {wait} s for its answer"},
        status_code=409, headers={"Retry-After": str(wait)},
    )


class Idempotent:
    def __init__(self, app: ASGIApp, *, replica: Callable[[], Replica]) -> None:
        self.app = app
        self.replica = replica
        #: Per (tenant, key) being handled: its lock and how many requests hold or wait for it.
        self._locks: dict[tuple[str, str], list[Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        info = current_key() if scope["type"] == "http" and scope["method"] in WRITE_METHODS else None
        route = _route(scope) if info is not None and not info.admin else None
        if info is None or route is None or not route[1].stores:
            # Not a tenant key's write (the route answers 401/403 as without the header), or a
            # read route: nothing is kept.
            await self.app(scope, receive, send)
            return
        _, need, params = route
        headers = Headers(scope=scope)
        key = headers.get("idempotency-key")
        if key is None:
            if scope["method"] == "DELETE":
                await self._delete(scope, receive, send, info.tenant)
            else:
                await self.app(scope, receive, send)
            return
        if not _KEY.fullmatch(key):
            await _refusal("Idempotency-Key must be 1 to 255 visible ASCII characters")(scope, receive, send)
            return
        if info.read_only:  # stores nothing: the route refuses the write
            await self.app(scope, receive, send)
            return
        body, replay = await _read_body(receive)
        if info.session_id is not None or not info.sees_shared:
            key = f"{info.key_id}/{key}"
        tenant = info.tenant
        print_ = fingerprint(scope["method"], scope["path"], scope.get("query_string", b""), body)
        session = _session(params, body)
        slot = self._locks.setdefault((tenant, key), [asyncio.Lock(), 0])
        slot[1] += 1
        try:
            async with slot[0]:
                answers, claims = await self._parts()
                await self._claimed(scope, replay, send, (info, need, session), key, print_, (answers, claims))
        finally:
            slot[1] -= 1
            if not slot[1]:
                self._locks.pop((tenant, key), None)

    async def _parts(self) -> tuple[IdempotencyStore, ClaimBook]:
        return await self.replica()()

    async def _answers(self) -> IdempotencyStore:
        return (await self._parts())[0]

    async def _claimed(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        caller: tuple[KeyInfo, Need, str | None],
        key: str,
        print_: str,
        parts: tuple[IdempotencyStore, ClaimBook],
    ) -> None:
        """:meth:`_once` while holding the key over every replica."""
        answers, claims = parts
        tenant = caller[0].tenant
        holder = uuid.uuid4().hex
        try:
            claim = await claims.claim(tenant, key, fingerprint=print_, holder=holder)
        except StrataError as exc:  # the claims do not answer: no write runs unclaimed
            await error_response(exc)(scope, receive, send)
            return
        if not claim.granted:
            if not claim.same_request:
                await _refusal(
                    "this Idempotency-Key was sent with a different request; use a new key for a new write"
                )(scope, receive, send)
            else:
                await _in_flight(claim)(scope, receive, send)
            return
        try:
            await self._once(scope, receive, send, caller, key, print_, answers)
        finally:
            try:
                await claims.release(tenant, key, holder=holder)
            except StrataError as exc:  # it lapses after serve.idempotency_claim_s
                _log.warning("Idempotency-Key claim of tenant %s not released: %s", tenant, exc.message)

    async def _delete(self, scope: Scope, receive: Receive, send: Send, tenant: str) -> None:
        """A delete without a key: the tenant's kept answers go once it succeeded."""
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        await self.app(scope, receive, watch)
        if 200 <= status < 300:
            try:
                await asyncio.to_thread((await self._answers()).forget, tenant)
            except StrataError as exc:
                _log.warning("kept answers of idempotent writes not dropped after a delete: %s", exc.message)

    async def _once(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        caller: tuple[KeyInfo, Need, str | None],
        key: str,
        print_: str,
        answers: IdempotencyStore,
    ) -> None:
        info, need, session = caller
        tenant = info.tenant
        kept = await asyncio.to_thread(answers.get, tenant, key)
        if kept is not None:
            if kept.fingerprint != print_:
                await _refusal("this Idempotency-Key was sent with a different request; use a new key for a new write")(
                    scope, receive, send
                )
                return
            try:  # as the route checks a first attempt: a key of another scope gets no stored answer
                authorize(info, need, session=session)
            except Forbidden as exc:
                await error_response(exc)(scope, receive, send)
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
            answer = Answer(
                print_, status, {h: out[h] for h in _KEPT_HEADERS if h in out}, body.decode(errors="replace")
            )
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
    """The :data:`Replica` callable of an :class:`~strata_serve.api.Api` instance."""
    parts: Replica = replica.idempotency_parts
    return parts


def _route(scope: Scope) -> tuple[str, Need, dict[str, Any]] | None:
    """The tenant route ``scope`` goes to, what it does (:data:`~strata_serve.auth.ROUTES`)
    and its path parameters; None for an admin, open or unknown route."""
    found = route_of(scope)
    name = str(getattr(found[0], "name", "")) if found is not None else ""
    need = ROUTES.get(name)
    return None if found is None or need is None else (name, need, found[1])


def _session(params: dict[str, Any], body: bytes) -> str | None:
    """The session a request is confined to: its path's ``session_id``, else its JSON body's."""
    if isinstance(params.get("session_id"), str):
        return str(params["session_id"])
    try:
        parsed = json.loads(body)
    except ValueError:  # the route answers 422; a kept answer's body was valid JSON
        return None
    value = parsed.get("session_id") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None
