"""The HTTP ingress: the FastAPI app, its middleware, and :class:`Api`, the Serve deployment
whose methods answer the routes.

Every ``/v1`` call authenticates with ``Authorization: Bearer <key>``; the
key decides the tenant, which never appears in a URL, and its scope (read-only,
one session) decides which routes it may call (403 otherwise; the table is in
``strata/access/scopes.py``, the checks in :mod:`strata_serve.auth`). ``/v1/admin/keys``
manages keys and takes an admin key only. The ingress authenticates, validates, and does the
request's work itself with :class:`strata_actors.orchestration.Orchestration` over the layer
actors: no deployment in between only forwards. A request body over ``serve.max_body_bytes``
gets 413 before any of that (:class:`strata_serve.guards.BodyLimit`), and a request without a
good key 401 before its body is read (:class:`strata_serve.auth.Authenticate`).

The routes live in :mod:`strata_serve.routes`, one module per group, each a base class of
:class:`Api` with its own router; this module includes the routers in ``app`` before
``@serve.ingress`` freezes it with every route of :class:`Api` and its bases. Here are the app,
its middleware in order, the ``/mcp`` endpoint and the inspector's files, and the replica's
state the routes use; ``/healthz`` is answered here too.
"""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

import asyncio
import functools
import pathlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import FastAPI, Response
from ray import serve
from starlette.routing import Route
from starlette.staticfiles import StaticFiles

from strata.access.idempotency import ClaimBook, Claims, IdempotencyStore
from strata.config import StrataSettings
from strata.counting import count_tokens, process_counter
from strata.errors import StrataError
from strata.providers.batching import EmbedBatcher
from strata.providers.embedder import embed_counted, make_embedder
from strata.schema import Health
from strata.store.layout import open_store
from strata_actors.limits import SharedLimits
from strata_actors.orchestration import Orchestration
from strata_serve.auth import UI_PATH, Authenticate, KeyGate, health_for_caller
from strata_serve.docs_page import install_docs
from strata_serve.errors import install_handlers
from strata_serve.guards import BodyLimit, Deadline, Internal
from strata_serve.headers import SecurityHeaders
from strata_serve.idempotent import Idempotent, Replica, replica_parts
from strata_serve.mcp_http import McpHttp
from strata_serve.routes import admin, audit, context, documents, export, skills, turns, usage, working
from strata_serve.usage import CountCalls, UsageBook

__all__ = ["Api", "app"]


app = FastAPI(
    title="Strata",
    summary="Four-layer memory for AI agents",
    version="0.1.0",
    description="Authenticate every /v1 call with `Authorization: Bearer <key>`; the key decides the tenant. "
    "/v1/admin routes take an admin key.",
    docs_url=None,  # served from installed files: strata_serve.docs_page
    redoc_url=None,
)
install_handlers(app)
install_docs(app)


def _replica_max_body_bytes() -> int:
    """``serve.max_body_bytes`` of the Api replica serving the request, from Serve's replica context.

    The settings arrive in ``Api.__init__``, after ``@serve.ingress`` has frozen a copy of
    ``app`` with its middleware. A value that ``__init__`` assigns to a global of this module
    would not reach it either: Serve pickles ``Api`` by value, and its methods write to a copy
    of these globals.
    """
    replica: Any = serve.get_replica_context().servable_object
    return int(replica.max_body_bytes)


def _replica_mcp_origins() -> list[str]:
    """``serve.mcp_allowed_origins`` of the Api replica serving the request (as above)."""
    replica: Any = serve.get_replica_context().servable_object
    return list(replica.mcp_allowed_origins)


def _replica_parts() -> Replica:
    return replica_parts(serve.get_replica_context().servable_object)


def _replica_gate() -> KeyGate:
    """The key checks of the Api replica serving the request (as above)."""
    replica: Any = serve.get_replica_context().servable_object
    gate: KeyGate = replica._gate
    return gate


def _replica_usage() -> UsageBook:
    """The call counts of the Api replica serving the request (as above)."""
    replica: Any = serve.get_replica_context().servable_object
    book: UsageBook = replica._usage_book
    return book


def _replica_timeout_s() -> float:
    """``serve.request_timeout_s`` of the Api replica serving the request (as above)."""
    replica: Any = serve.get_replica_context().servable_object
    return float(replica.request_timeout_s)


# The last added runs first: SecurityHeaders, Deadline, Internal, Authenticate, CountCalls, BodyLimit, Idempotent,
# the route. CountCalls runs inside Authenticate, whose key it counts by, once the route answered.
# Idempotent runs inside BodyLimit, so the body it reads is bounded already, and inside
# Authenticate, so a replay is rate-limited and authorised as a first attempt is;
# Authenticate answers a wrong key before anything reads the body. Internal answers 500 to
# anything unexpected below it and logs no word of the request. Deadline is outermost: a
# write it answers 504 to runs on through Idempotent, which keeps its answer.
app.add_middleware(Idempotent, replica=_replica_parts)
app.add_middleware(BodyLimit, max_bytes=_replica_max_body_bytes)
app.add_middleware(CountCalls, book=_replica_usage)
app.add_middleware(Authenticate, gate=_replica_gate)
app.add_middleware(Internal)
app.add_middleware(Deadline, timeout_s=_replica_timeout_s)
# Outermost of all: every answer, also one a middleware above made, carries the security headers.
app.add_middleware(SecurityHeaders)

# MCP over streamable HTTP, behind the same middleware: a request without a good key gets 401,
# and each tool call calls these routes in process with the caller's key (strata_serve.mcp_http).
app.router.routes.append(
    Route("/mcp", McpHttp(max_body_bytes=_replica_max_body_bytes, allowed_origins=_replica_mcp_origins),
          include_in_schema=False)
)

# The memory inspector: static files, no build step. The page needs no key (Authenticate lets
# a GET of UI_PATH through); each call it makes to /v1 sends the key pasted into it.
app.mount(UI_PATH, StaticFiles(directory=pathlib.Path(__file__).with_name("ui"), html=True), name="ui")

# Each group's routes (their methods are Api's, below); the OpenAPI document lists them in this order.
for _group in (turns, context, working, documents, skills, admin, audit, export, usage):
    app.include_router(_group.router)


@serve.deployment(name="api", ray_actor_options={"num_cpus": 0.25}, max_ongoing_requests=256)
@serve.ingress(app)
class Api(
    turns.TurnRoutes,
    context.ContextRoutes,
    working.WorkingRoutes,
    documents.DocumentRoutes,
    skills.SkillRoutes,
    admin.AdminRoutes,
    audit.AuditRoutes,
    export.ExportRoutes,
    usage.UsageRoutes,
):
    """The ingress deployment: the replica's state, ``/healthz``, and the routes of its bases
    (:mod:`strata_serve.routes`)."""

    def __init__(self, settings: dict[str, Any], embedding: Any) -> None:
        self._settings = StrataSettings.from_dict(settings)
        self._embedding = embedding
        # The request's work runs here, not one more Serve hop away: that hop only forwarded,
        # and cost more CPU than the memory work of a context call.
        self._flow = Orchestration(self._settings, embed=self._embed, embed_query=self._embed_query)
        # A query embedded here skips a hop whose Serve overhead costs more than the embedding;
        # concurrent queries share model calls.
        self._local: EmbedBatcher | None = None
        if self._settings.serve.query_embedding == "ingress":
            embedder = make_embedder(self._settings.embedding)
            self._local = EmbedBatcher(functools.partial(embed_counted, embedder, query=True))
        self.max_body_bytes = self._settings.serve.max_body_bytes  # read by the BodyLimit middleware
        self.request_timeout_s = self._settings.serve.request_timeout_s  # read by Deadline
        self.mcp_allowed_origins = self._settings.serve.mcp_allowed_origins  # read by McpHttp
        # Rate limits and Idempotency-Key claims every replica shares; this replica's own with
        # auth.limit_shards 0.
        self._claims: ClaimBook
        if self._settings.auth.limit_shards:
            shared = SharedLimits(self._settings)
            shared.start()  # its actors' workers start with the stack, not on a first request
            self._claims = shared
            self._gate = KeyGate(self._settings, limits=shared.grant)  # also the Authenticate middleware's
        else:
            s = self._settings.serve
            self._claims = Claims(hold_s=s.idempotency_claim_s, wait_s=s.idempotency_wait_s)
            self._gate = KeyGate(self._settings)
        self._health: tuple[float, Health] | None = None  # (when, what) of the last check
        self._health_check: asyncio.Future[Health] | None = None
        self._answers: IdempotencyStore | None = None
        # Counted by the CountCalls middleware, and by the flows (tokens embedded, the LLM's).
        self._usage_book = UsageBook(self._settings, counter=process_counter())

    async def __del__(self) -> None:
        """Serve calls this when the replica stops gracefully: the queued audit entries and the
        call counts are written."""
        await self._usage_book.aclose()
        await self._flow.aclose()

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors, tokens = await self._embedding.embed.remote(list(texts))
        self._count_embedded(sum(tokens))
        result: np.ndarray = vectors
        return result

    async def _embed_query(self, texts: Sequence[str]) -> np.ndarray:
        if self._local is not None and texts:  # together: a query and its speakerless twin share a call
            rows = await asyncio.gather(*(self._local.embed_counted(text) for text in texts))
            self._count_embedded(sum(n for _, n in rows))
            return np.stack([vector for vector, _ in rows])
        vectors, tokens = await self._embedding.embed_query.remote(list(texts))
        self._count_embedded(sum(tokens))
        result: np.ndarray = vectors
        return result

    def _count_embedded(self, tokens: int) -> None:
        """Count the tokens embedded for the tenant the flow works for (:func:`strata.counting.on_behalf_of`)."""
        count_tokens("embedding", tokens)
        self._usage_book.start()

    async def idempotency_store(self) -> IdempotencyStore:
        """Where the answers to writes sent with an Idempotency-Key are kept (the middleware's)."""
        if self._answers is None:
            store, names = await asyncio.to_thread(open_store, self._settings)
            self._answers = IdempotencyStore(store, names.state, ttl_s=self._settings.serve.idempotency_ttl_s)
        return self._answers

    async def idempotency_parts(self) -> tuple[IdempotencyStore, ClaimBook]:
        """The kept answers and where keys are claimed (the Idempotent middleware's)."""
        return await self.idempotency_store(), self._claims

    @app.get("/healthz", response_model=Health, response_model_exclude_none=True, tags=["ops"])
    async def healthz(self, response: Response) -> Health:
        """``{"status": "ok"}`` (200) or ``"down"`` (503); no key needed. With an admin key, also
        Ray, Milvus and each layer, whose errors may name internal addresses.

        The check (a call to every shard and the store) runs at most once a second per replica,
        however many callers ask: anyone may call this route, so it must not be a way to make
        the layers work."""
        now = time.monotonic()
        if self._health is None or now - self._health[0] > 1.0:
            if self._health_check is None or self._health_check.done():
                self._health_check = asyncio.ensure_future(self._check_health())
            self._health = (time.monotonic(), await asyncio.shield(self._health_check))
        full = self._health[1]
        response.status_code = 200 if full.status == "ok" else 503
        return health_for_caller(full)

    async def _check_health(self) -> Health:
        try:
            report = await asyncio.wait_for(self._flow.health(), timeout=15)
        except (StrataError, TimeoutError) as exc:
            return Health(status="down", ray="ok", milvus=str(getattr(exc, "message", exc)), layers={})
        ok = report["milvus"] == "ok" and all(v == "ok" for v in report["layers"].values())
        return Health(status="ok" if ok else "down", ray="ok", milvus=report["milvus"], layers=report["layers"])
