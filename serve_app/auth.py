"""Who is calling: the bearer key of a request, checked before anything reads its body; its
tenant and scope, the admin check, and the rate limits.

Every ``/v1`` call authenticates with ``Authorization: Bearer <key>``. :class:`Authenticate`,
a middleware outside the body limit and the Idempotency-Key replay, resolves the key through
the replica's :class:`~strata.access.keycache.KeyCache` and answers 401 (or 429) without
reading the body. The route then finds the key it resolved in :func:`current_key`: the key
decides the tenant, and its scope (read-only, one session, documents and skills or not)
decides what it may do: :data:`ROUTES` says what each route reads and writes, and
:func:`strata.access.keys.authorize` checks the key against it (403 otherwise), for a first
attempt and for an Idempotency-Key replay alike. ``/v1/admin`` routes take an admin key.

What a key lookup costs, and what it guarantees:

- a known key is read from the store at most once per ``auth.key_cache_ttl_s`` (1 s) per
  replica, so a revoked key is refused on every replica within that time (at once on the
  replica that revoked it);
- a wrong key is remembered as wrong for ``auth.unknown_key_ttl_s``, and each client address
  may fail ``auth.failed_auth_per_s`` times a second (after a burst): beyond that it gets
  429 without a store read, unless it sends a key the replica has found good before (one
  client behind the same address as a flood keeps working).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from contextvars import ContextVar
from datetime import UTC, datetime

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strata.access.keycache import KeyCache
from strata.access.keys import KeyCreated, KeyInfo, KeyStore, hash_key, open_keys, well_formed
from strata.access.ratelimit import Grant, RateLimiter, SharedRateLimiter
from strata.access.scopes import SESSION_LAYERS, Forbidden, Need, authorize, visible_layers
from strata.config import StrataSettings
from strata.errors import RateLimited, StrataError, Unauthorized
from strata.ids import SYSTEM_TENANT
from strata.layers import LAYERS, Layer
from strata.schema import Health
from strata.store.layout import open_store
from strata_serve.errors import error_response

__all__ = [
    "ADMIN_ROUTES",
    "FAILED_AUTH_HEADER",
    "GOOD_KEY_HEADER",
    "INNER_HEADER",
    "OPEN_PATHS",
    "ROUTES",
    "UI_PATH",
    "Authenticate",
    "KeyGate",
    "bearer_key",
    "current_key",
    "health_for_caller",
    "inner_token",
]

#: Paths served without a key (a key sent along is still resolved: /healthz shows more to an admin).
OPEN_PATHS = frozenset(("/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"))
#: Where the memory inspector's static files are served. A GET of it or of a file below it
#: needs no key: the page holds no data, and each call it makes sends the key pasted into it.
UI_PATH = "/ui"
#: Where /docs' and /redoc's scripts are served (``strata_serve.docs_page``): open as UI_PATH is.
DOCS_STATIC_PATH = "/docs/static"

#: Marks a request this process's app sends to itself on behalf of one it is serving (an MCP
#: tool call, ``strata_serve.mcp_http``): its key is checked as any other's, but its rate limit
#: is not taken again, the outer request took it. The value is :func:`inner_token`, made at
#: import and never sent off the process: a request from outside cannot carry it.
INNER_HEADER = "x-strata-inner"
_INNER_TOKEN = secrets.token_urlsafe(32)

_ALL: frozenset[Layer] = frozenset(LAYERS)
_DOCS: frozenset[Layer] = frozenset({"semantic"})
_SKILLS: frozenset[Layer] = frozenset({"procedural"})
_WORKING: frozenset[Layer] = frozenset({"working"})
_EPISODIC: frozenset[Layer] = frozenset({"episodic"})

#: What every tenant route of the API (by its method's name in ``serve_app/routes/``) reads
#: and writes: the one table the key's scope is checked against (:func:`authorize`), by the
#: route and by an Idempotency-Key replay. A route that writes nothing is never
#: idempotency-cached. ``tests/unit/test_scopes.py`` checks it names every route.
ROUTES: dict[str, Need] = {
    # one session's memory (session_id in the path, or in the body for interactions)
    "record_turn": Need(writes=SESSION_LAYERS),
    "record_turns": Need(writes=SESSION_LAYERS),
    "get_working": Need(reads=_WORKING),
    "add_working_items": Need(writes=_WORKING),
    "forget_session": Need(writes=SESSION_LAYERS),
    "forget_turn": Need(writes=SESSION_LAYERS),
    "post_interaction": Need(writes=SESSION_LAYERS, learns=_SKILLS),
    "list_turns": Need(reads=_EPISODIC),
    # the layers the request names, by default all the key sees
    "build_context": Need(reads=_ALL, chosen=True),
    "search": Need(reads=_ALL, chosen=True),
    # documents
    "index_document": Need(writes=_DOCS),
    "list_documents": Need(reads=_DOCS),
    "get_document": Need(reads=_DOCS),
    "delete_document": Need(writes=_DOCS),
    "entity": Need(reads=_DOCS),
    # skills
    "extract_skill": Need(writes=_SKILLS),
    "find_skills": Need(reads=_SKILLS),
    "get_skill": Need(reads=_SKILLS),
    "record_outcome": Need(writes=_SKILLS),
    "update_skill": Need(writes=_SKILLS),
    "delete_skill": Need(writes=_SKILLS),
    "skill_history": Need(reads=_SKILLS),
    "skill_job": Need(reads=_SKILLS),
    # every session's
    "list_sessions": Need(reads=_EPISODIC),
    # every layer's changes, of every session
    "audit": Need(reads=_ALL),
    # every record of the layers the request names (by default all the key sees), of every session
    "export": Need(reads=_ALL, chosen=True),
    # counts of every session's items and calls: a session key is refused (it would learn of
    # the other sessions), a key without documents and skills is not (it gets the counts of its layers)
    "usage": Need(reads=SESSION_LAYERS),
}
#: The routes that take an admin key (and nothing else).
ADMIN_ROUTES = frozenset(
    ("admin_create_key", "admin_list_keys", "admin_rotate_key", "admin_revoke_key", "admin_forget_tenant",
     "admin_scale_layer", "admin_metrics", "admin_usage")
)

#: The key :class:`Authenticate` resolved for the request being served (a ContextVar: the
#: routes take the Authorization header, not the request, and run in the middleware's task).
_CURRENT: ContextVar[KeyInfo | None] = ContextVar("strata_current_key", default=None)

#: ``auth.admin_key`` as a key: admin, never stored, "admin" in audit records.
_CONFIGURED_ADMIN = KeyInfo(
    key_id="admin", tenant=SYSTEM_TENANT, admin=True, name="auth.admin_key", created_at=datetime(1970, 1, 1, tzinfo=UTC)
)


def bearer_key(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header; None without one."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[7:].strip()


def inner_token() -> str:
    """The value of :data:`INNER_HEADER` on a request this process sends to its own app."""
    return _INNER_TOKEN


def current_key() -> KeyInfo | None:
    """The key of the request being served, as :class:`Authenticate` resolved it; None on an
    open route called without a valid key, or outside a request."""
    return _CURRENT.get()


def health_for_caller(health: Health) -> Health:
    """All of ``/healthz`` for an admin key; up or down for anyone else. The details name what
    is down in the store's own words, internal addresses included: an operator's business, and
    a tenant's key is held by an agent, not by whoever runs the stack."""
    key = _CURRENT.get()
    return health if key is not None and key.admin else Health(status=health.status)


def _plain(route: str) -> Need:
    need = ROUTES[route]
    # A route that names its layers is checked on what it asks (the caller passes it); the
    # table's ``reads`` are the most it may ask, not what it needs.
    return Need(writes=need.writes) if need.chosen else Need(reads=need.reads, writes=need.writes)


def _bearer(authorization: str | None) -> str:
    key = bearer_key(authorization)
    if key is None:
        raise Unauthorized("send your API key as 'Authorization: Bearer <key>'")
    return key


class KeyGate:
    """One Api replica's key checks: its key store (opened on first use), key cache and rate limiters.

    Args:
        settings: ``auth`` gives the admin key, the TTLs and the limits.
        keys: the key store; by default opened from ``settings`` on first use.
        limits: where every replica's keys take their requests from
            (``strata_actors.limits.SharedLimits.grant``); None: this replica limits alone.
        clock: a monotonic clock for the cache and the limiters (tests move their own).
    """

    def __init__(
        self,
        settings: StrataSettings,
        *,
        keys: KeyStore | None = None,
        limits: Grant | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._keys = keys
        auth = settings.auth
        # A key's limit, over every replica when shared; this replica's own bucket when it is
        # not, and while the shared one does not answer.
        self._limits = RateLimiter(per_s=auth.rate_limit_per_s, burst=auth.rate_burst, clock=clock)
        self._shared = None if limits is None or auth.rate_limit_per_s <= 0 else SharedRateLimiter(
            limits, lease=auth.rate_lease, lease_s=auth.rate_lease_s, fallback=self._limits, clock=clock
        )
        # Per replica on purpose: a flood guard for this replica's loop and store reads, counted
        # before any key is known; sharing it would put an actor call in front of every wrong key.
        self._failures = RateLimiter(
            per_s=auth.failed_auth_per_s, burst=auth.failed_auth_burst, clock=clock, what="this address"
        )
        self._cache = KeyCache(
            known_ttl_s=auth.key_cache_ttl_s,
            unknown_ttl_s=auth.unknown_key_ttl_s,
            max_entries=auth.key_cache_entries,
            clock=clock,
        )
        self._admin_digest = hash_key(auth.admin_key) if auth.admin_key else None
        self._reading: dict[str, asyncio.Future[KeyInfo | None]] = {}  # one store read per key at a time
        self._refreshing: set[asyncio.Future[None]] = set()  # reads ahead of time, kept until done

    async def key_store(self) -> KeyStore:
        if self._keys is None:
            store, names = await asyncio.to_thread(open_store, self._settings)
            self._keys = open_keys(store, names)
        return self._keys

    # -- resolving a key (the middleware's) --------------------------------------------

    async def check(self, authorization: str | None, *, address: str | None, take: bool = True) -> KeyInfo:
        """The active key of an ``Authorization`` header, after taking one request from its rate limit.

        Args:
            address: the client's address, whose failed attempts are limited; None: not limited.
            take: False for a request whose rate limit its outer request took (:data:`INNER_HEADER`).

        Raises:
            strata.errors.Unauthorized: no key, or an unknown or revoked one (the same words for both).
            strata.errors.RateLimited: the key, or the address's failed attempts, over their limit.
            strata.errors.StoreUnavailable: the key store does not answer.
        """
        info = await self.resolve(_bearer(authorization), address=address)
        if info is None:
            raise Unauthorized("unknown API key")
        if take:
            if self._shared is not None:
                await self._shared.take(info.tenant, info.key_id)
            else:
                self._limits.take(info.key_id)
        return info

    async def resolve(self, key: str, *, address: str | None) -> KeyInfo | None:
        """The active key's info, None for a wrong one: from the cache, else one store read.

        Raises:
            strata.errors.RateLimited: ``address`` failed too often; nothing was read.
            strata.errors.StoreUnavailable: the key store does not answer.
        """
        digest = hash_key(key)
        if self._admin_digest is not None and hmac.compare_digest(digest, self._admin_digest):
            return _CONFIGURED_ADMIN
        cached = self._cache.get(digest)
        if cached is not None and cached.info is not None:
            if self._cache.due(cached) and digest not in self._reading:
                self._refresh(key, digest)
            return cached.info
        if address is not None and not self._cache.known(digest):  # a good key is re-read from anywhere
            try:
                self._failures.check(address)
            except RateLimited as exc:
                exc.failed_auth = True
                raise
        info = None if cached is not None or not well_formed(key) else await self._read(key, digest)
        if info is None and address is not None:
            with suppress(RateLimited):  # this one is answered 401; the next ones 429
                self._failures.take(address)
        return info

    def _refresh(self, key: str, digest: str) -> None:
        """Read a key in use again while its cached answer still holds (:meth:`KeyCache.due`)."""

        async def read() -> None:
            with suppress(StrataError):  # the next request past the answer's time reads and reports it
                await self._read(key, digest)

        task = asyncio.ensure_future(read())
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _read(self, key: str, digest: str) -> KeyInfo | None:
        reading = self._reading.get(digest)
        if reading is None:
            reading = asyncio.ensure_future(self._read_store(key, digest))
            self._reading[digest] = reading
            reading.add_done_callback(lambda _: self._reading.pop(digest, None))
        return await asyncio.shield(reading)  # a caller that goes away does not cancel the others' read

    async def _read_store(self, key: str, digest: str) -> KeyInfo | None:
        keys = await self.key_store()
        read_at = self._cache.now()
        info = await asyncio.to_thread(keys.lookup, key)
        self._cache.put(digest, info, read_at=read_at)
        return info

    # -- what the routes ask -------------------------------------------------------------

    async def authenticate(self, authorization: str | None) -> KeyInfo:
        """The request's key: as :class:`Authenticate` resolved it, else checked now."""
        info = _CURRENT.get()
        return info if info is not None else await self.check(authorization, address=None)

    async def caller(
        self, authorization: str | None, route: str, *, session: str | None = None, need: Need | None = None
    ) -> KeyInfo:
        """The bearer key, once its scope covers what ``route`` does (:data:`ROUTES`).

        Args:
            route: the route's name in :data:`ROUTES`.
            session: the session the route is confined to (its path's or body's
                ``session_id``); None for a route over every session.
            need: for a route whose request names its layers, what this request reads
                (:func:`strata.access.keys.visible_layers`); by default the table's.

        Raises:
            strata.access.keys.Forbidden: the key's scope does not cover it.
        """
        info = await self.authenticate(authorization)
        authorize(info, need if need is not None else _plain(route), session=session)
        return info

    async def reader(
        self,
        authorization: str | None,
        route: str,
        *,
        session: str | None,
        asked: Iterable[Layer] | None,
        default: Iterable[Layer] = LAYERS,
        always: Iterable[Layer] = (),
    ) -> tuple[KeyInfo, list[Layer]]:
        """For a route whose request names the layers it reads (search, context): the key, and
        the layers to read, those ``asked`` for (each one the key must see) or, without any,
        those of ``default`` the key sees (:func:`strata.access.keys.visible_layers`).

        Args:
            always: layers the route reads whatever is asked (context: working memory).

        Raises:
            strata.access.keys.Forbidden: an admin key, a layer asked for that the key does
                not see, or a session layer of another session.
        """
        info = await self.authenticate(authorization)
        if info.admin:
            authorize(info, Need(), session=session)  # raises, in the words for an admin key
        layers = visible_layers(info, asked, default=default)
        allowed = ROUTES[route].reads
        authorize(info, Need(reads=frozenset(layers) & allowed | frozenset(always)), session=session)
        return info, layers

    async def admin(self, authorization: str | None) -> None:
        """Pass an admin key (stored by ``strata keys create-admin``, or ``auth.admin_key``)."""
        if not (await self.authenticate(authorization)).admin:
            raise Forbidden(
                "this route needs an admin key (`strata keys create-admin`); a tenant key cannot manage keys"
            )

    # -- managing keys: this replica forgets what it cached at once -------------------------

    async def revoke(self, key_id: str) -> KeyInfo:
        """:meth:`KeyStore.revoke`; this replica refuses the key from now on, the others within the TTL."""
        revoked = await asyncio.to_thread((await self.key_store()).revoke, key_id)
        self._cache.drop(key_id)
        return revoked

    async def rotate(self, key_id: str) -> KeyCreated:
        """:meth:`KeyStore.rotate`, the old key forgotten as by :meth:`revoke`."""
        rotated = await asyncio.to_thread((await self.key_store()).rotate, key_id)
        self._cache.drop(key_id)
        return rotated

    async def optional(self, authorization: str | None, *, address: str | None) -> KeyInfo | None:
        """An open route's key, if one is sent and good; nothing is refused."""
        key = bearer_key(authorization)
        if not key:
            return None
        try:
            return await self.resolve(key, address=address)
        except StrataError:  # over the limit, or the store is down: the open route answers without it
            return None


def _is_ui_file(method: str, path: str) -> bool:
    """A GET of the inspector's files or of /docs' scripts: static files that hold no data."""
    return method == "GET" and any(path == root or path.startswith(root + "/") for root in (UI_PATH, DOCS_STATIC_PATH))


#: Marks a response to a failed authentication (401, or 429 for the address's failed attempts):
#: the HAProxy ``strata up`` runs counts them per client address and removes the header
#: (``strata_cli.haproxy``).
FAILED_AUTH_HEADER = "X-Strata-Failed-Auth"
#: Marks a response to a request whose key was found good: HAProxy lets that key through an
#: address it turns away for its failed authentications, and removes the header.
GOOD_KEY_HEADER = "X-Strata-Good-Key"
_GOOD_KEY = (GOOD_KEY_HEADER.lower().encode(), b"1")


def _marked_good(send: Send) -> Send:
    async def marked(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), _GOOD_KEY]}
        await send(message)

    return marked


class Authenticate:
    """Answer 401 (or 429, or 503) to a request without a good key before anything reads its body.

    Pure ASGI, like :class:`~strata_serve.guards.BodyLimit`: a refused request's body is
    never received, so a wrong key with 128 MiB behind it costs a header and at most one store
    read. Paths in ``open_paths``, and a GET of the inspector's files under :data:`UI_PATH`,
    pass without a key; a key sent to one is resolved all the same (and never refused). The
    resolved key is the route's :func:`current_key`.

    Args:
        app: the ASGI app to guard.
        gate: the :class:`KeyGate` of the replica serving the request (read per request, as
            the Api replica is made after the app).
        open_paths: the paths that need no key.
    """

    def __init__(self, app: ASGIApp, *, gate: Callable[[], KeyGate], open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.gate = gate
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        gate = self.gate()
        headers = Headers(scope=scope)
        client = scope.get("client")
        address = str(client[0]) if client else "unknown"
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"  # as routed under a route prefix
        try:
            if path in self.open_paths or _is_ui_file(scope["method"], path):
                info = await gate.optional(headers.get("authorization"), address=address)
            else:
                inner = headers.get(INNER_HEADER)
                take = inner is None or not hmac.compare_digest(inner.encode(), _INNER_TOKEN.encode())
                info = await gate.check(headers.get("authorization"), address=address, take=take)
        except StrataError as exc:
            response = error_response(exc)
            if isinstance(exc, Unauthorized) or (isinstance(exc, RateLimited) and exc.failed_auth):
                response.headers[FAILED_AUTH_HEADER] = "1"  # counted, and removed, by strata-haproxy
            if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
                # The body is not read: a wrong key's is not worth it (a flood of maximal bodies
                # costs the proxy nothing). The price: closing with it unread, the kernel resets the
                # connection, and a client still sending may see that instead of this 401. A 413
                # (a known key) keeps the connection and discards the rest (BodyLimit).
                response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        token = _CURRENT.set(info)
        try:
            await self.app(scope, receive, send if info is None else _marked_good(send))
        finally:
            _CURRENT.reset(token)
