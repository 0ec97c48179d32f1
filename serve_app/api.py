"""The HTTP API: FastAPI under a Serve ingress deployment, one method per route.

Every ``/v1`` call authenticates with ``Authorization: Bearer <key>``; the
key decides the tenant, which never appears in a URL, and its scope (read-only,
one session) decides which routes it may call (403 otherwise; the table is in
``strata/access/keys.py``, the checks in :mod:`strata_serve.auth`). ``/v1/admin/keys``
manages keys and takes an admin key only. The ingress authenticates, validates, and does the
request's work itself with :class:`strata_actors.orchestration.Orchestration` over the layer
actors: no deployment in between only forwards. A request body over ``serve.max_body_bytes``
gets 413 before any of that (:class:`strata_serve.errors.BodyLimit`), and a request without a
good key 401 before its body is read (:class:`strata_serve.auth.Authenticate`).

One module, near 500 lines, on purpose: it is the route table of one ingress class.
``@serve.ingress`` freezes ``app`` with every route of :class:`Api` when the class is
made, so the routes, the app they register on and its middleware read best together.
"""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

import asyncio
import pathlib
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from fastapi import FastAPI, Header, Path, Query, Response
from pydantic import BaseModel
from ray import serve
from starlette.routing import Route
from starlette.staticfiles import StaticFiles

from strata.access.idempotency import ClaimBook, Claims, IdempotencyStore
from strata.access.keys import KEY_ID_PATTERN, KeyCreated, KeyCreateIn, KeyInfo, KeyList
from strata.access.scopes import Need, may
from strata.config import StrataSettings
from strata.errors import InvalidInput, StrataError
from strata.ids import ID_PATTERN, SYSTEM_TENANT
from strata.layers import LAYERS
from strata.providers.batching import EmbedBatcher
from strata.providers.embedder import make_embedder
from strata.schema import (
    AuditHistory,
    ContextRequest,
    ContextResult,
    DocumentDeleted,
    DocumentIn,
    DocumentList,
    DocumentOut,
    EntityOut,
    ForgetResult,
    Health,
    InteractionIn,
    InteractionResult,
    OutcomeIn,
    RecordTurnsResult,
    SearchRequest,
    SearchResult,
    SkillDeleted,
    SkillExtractIn,
    SkillHistory,
    SkillJobOut,
    SkillList,
    SkillOut,
    SkillPatch,
    TenantForgotten,
    TurnBatchIn,
    TurnIn,
    WorkingItemsIn,
    WorkingState,
)
from strata.schema.outputs import SessionList, SessionTurns
from strata.store.layout import open_store
from strata_actors.limits import SharedLimits
from strata_actors.orchestration import Orchestration
from strata_mcp import McpHttp
from strata_serve.auth import ROUTES, UI_PATH, Authenticate, KeyGate, health_for_caller
from strata_serve.docs_page import install_docs
from strata_serve.errors import BodyLimit, Deadline, Internal, install_handlers
from strata_serve.headers import SecurityHeaders
from strata_serve.idempotent import Idempotent, Replica, replica_parts

__all__ = ["Api", "app"]


def _id_path(description: str) -> Any:
    return Path(pattern=ID_PATTERN.pattern.join("^$"), description=description)


_DOC_ID = _id_path("Document id")
_SKILL_ID = _id_path("Skill id")
_JOB_ID = _id_path("Skill job id")
_TENANT_ID = _id_path("Tenant id")
_SESSION = _id_path("Session id")
_TURN_ID = _id_path("Turn id")
_KEY_ID = Path(pattern=KEY_ID_PATTERN.pattern.join("^$"), description="Key id (12 hex characters)")

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


def _replica_timeout_s() -> float:
    """``serve.request_timeout_s`` of the Api replica serving the request (as above)."""
    replica: Any = serve.get_replica_context().servable_object
    return float(replica.request_timeout_s)


# The last added runs first: SecurityHeaders, Deadline, Internal, Authenticate, BodyLimit, Idempotent, the route.
# Idempotent runs inside BodyLimit, so the body it reads is bounded already, and inside
# Authenticate, so a replay is rate-limited and authorised as a first attempt is;
# Authenticate answers a wrong key before anything reads the body. Internal answers 500 to
# anything unexpected below it and logs no word of the request. Deadline is outermost: a
# write it answers 504 to runs on through Idempotent, which keeps its answer.
app.add_middleware(Idempotent, replica=_replica_parts)
app.add_middleware(BodyLimit, max_bytes=_replica_max_body_bytes)
app.add_middleware(Authenticate, gate=_replica_gate)
app.add_middleware(Internal)
app.add_middleware(Deadline, timeout_s=_replica_timeout_s)
# Outermost of all: every answer, also one a middleware above made, carries the security headers.
app.add_middleware(SecurityHeaders)

# MCP over streamable HTTP, behind the same middleware: a request without a good key gets 401,
# and each tool call calls these routes in process with the caller's key (strata_mcp.http).
app.router.routes.append(
    Route("/mcp", McpHttp(max_body_bytes=_replica_max_body_bytes, allowed_origins=_replica_mcp_origins),
          include_in_schema=False)
)

# The memory inspector: static files, no build step. The page needs no key (Authenticate lets
# a GET of UI_PATH through); each call it makes to /v1 sends the key pasted into it.
app.mount(UI_PATH, StaticFiles(directory=pathlib.Path(__file__).with_name("ui"), html=True), name="ui")


def _json(model: BaseModel) -> Response:
    """``model`` as JSON in one pass of pydantic's serializer. Returned as a model, FastAPI would
    dump it, validate the dump against the route's response model and serialize that again: the
    hot routes (context, search) return this; the response model still documents them."""
    return Response(content=model.model_dump_json(), media_type="application/json")


#: A version in If-Match: ASCII digits only (``str.isdigit`` also takes "²"), within 64 bits.
_VERSION = re.compile(r"[0-9]{1,18}", re.ASCII)


def _if_match(value: str | None) -> int | None:
    if value is None:
        return None
    raw = value.strip().removeprefix("W/").strip('"')
    if not _VERSION.fullmatch(raw):
        raise InvalidInput(f'If-Match must be a version such as "3", got {value[:40]!r}', field="If-Match")
    return int(raw)


@serve.deployment(name="api", ray_actor_options={"num_cpus": 0.25}, max_ongoing_requests=256)
@serve.ingress(app)
class Api:
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
            self._local = EmbedBatcher(make_embedder(self._settings.embedding).embed_query)
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

    async def __del__(self) -> None:
        """Serve calls this when the replica stops gracefully: the queued audit entries are written."""
        await self._flow.aclose()

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        result: np.ndarray = await self._embedding.embed.remote(list(texts))
        return result

    async def _embed_query(self, texts: Sequence[str]) -> np.ndarray:
        if self._local is not None and texts:  # together: a query and its speakerless twin share a call
            return np.stack(await asyncio.gather(*(self._local.embed(text) for text in texts)))
        result: np.ndarray = await self._embedding.embed_query.remote(list(texts))
        return result

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

    @app.post("/v1/sessions/{session_id}/turns", status_code=201, response_model=RecordTurnsResult, tags=["turns"])
    async def record_turn(
        self,
        body: TurnIn,
        session_id: str = _SESSION,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> RecordTurnsResult:
        """Record one turn in episodic and working memory. ``If-Match``: expected episodic version."""
        key = await self._gate.caller(authorization, "record_turn", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        recorded: RecordTurnsResult = await self._flow.record_turns(
            tenant, session_id, [body], expected_version=_if_match(if_match), by=key_id
        )
        return recorded

    @app.post(
        "/v1/sessions/{session_id}/turns/batch", status_code=201, response_model=RecordTurnsResult, tags=["turns"]
    )
    async def record_turns(
        self,
        body: TurnBatchIn,
        session_id: str = _SESSION,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> RecordTurnsResult:
        """Record up to 1,000 turns at once (importing history): one write, one embedding batch."""
        key = await self._gate.caller(authorization, "record_turns", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        recorded: RecordTurnsResult = await self._flow.record_turns(
            tenant, session_id, body.turns, expected_version=_if_match(if_match), by=key_id
        )
        return recorded

    @app.get("/v1/sessions", response_model=SessionList, tags=["turns"])
    async def list_sessions(
        self,
        after: str | None = Query(default=None, description="The last session_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> SessionList:
        """The sessions with turns in episodic memory, by id, a page at a time: how many turns,
        the first and last turn's time. Every session's: not for a session key."""
        tenant = (await self._gate.caller(authorization, "list_sessions")).tenant
        page: SessionList = await self._flow.list_sessions(tenant, after=after, limit=limit)
        return page

    @app.get("/v1/sessions/{session_id}/turns", response_model=SessionTurns, tags=["turns"])
    async def list_turns(
        self,
        session_id: str = _SESSION,
        after: str | None = Query(default=None, description="The last turn_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        newest_first: bool = Query(default=False, description="The latest turn first; after then pages back in time"),
        authorization: str | None = Header(default=None),
    ) -> SessionTurns:
        """The session's turns in time order (or newest first), a page at a time; 404 for a
        session without turns."""
        tenant = (await self._gate.caller(authorization, "list_turns", session=session_id)).tenant
        page: SessionTurns = await self._flow.list_turns(
            tenant, session_id, after=after, limit=limit, newest_first=newest_first
        )
        return page

    @app.post("/v1/context", response_model=ContextResult, tags=["context"])
    async def build_context(
        self, body: ContextRequest, authorization: str | None = Header(default=None)
    ) -> Response:
        """The context to put in front of the LLM: working memory plus the task type's layers
        (or ``layers``), of those the key sees. With a session-bound key, episodic memory is
        read from that session only."""
        policy = self._settings.context.policies.get(body.task_type)
        info, layers = await self._gate.reader(
            authorization,
            "build_context",
            session=body.session_id,
            asked=body.layers,
            default=[layer for layer in LAYERS if policy is None or layer in policy],
            always=["working"],
        )
        context = await self._flow.build_context(info.tenant, body, session_only=info.session_id is not None, layers=layers)
        return _json(context)

    @app.post("/v1/search", response_model=SearchResult, tags=["search"])
    async def search(self, body: SearchRequest, authorization: str | None = Header(default=None)) -> Response:
        """Scored hits across ``layers`` (by default every layer the key sees); a time expression in
        the query narrows the time range."""
        info, layers = await self._gate.reader(authorization, "search", session=body.session_id, asked=body.layers)
        return _json(await self._flow.search(info.tenant, body.model_copy(update={"layers": layers})))

    @app.get("/v1/sessions/{session_id}/working", response_model=WorkingState, tags=["working"])
    async def get_working(
        self, response: Response, session_id: str = _SESSION, authorization: str | None = Header(default=None)
    ) -> WorkingState:
        """The session's working memory; the ETag is its version."""
        tenant = (await self._gate.caller(authorization, "get_working", session=session_id)).tenant
        state: WorkingState = await self._flow.working(tenant, session_id)
        response.headers["ETag"] = f'"{state.version}"'
        return state

    @app.post("/v1/sessions/{session_id}/working/items", response_model=WorkingState, tags=["working"])
    async def add_working_items(
        self,
        body: WorkingItemsIn,
        response: Response,
        session_id: str = _SESSION,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> WorkingState:
        """Add items; with ``If-Match`` the write applies only at that version (else 409)."""
        key = await self._gate.caller(authorization, "add_working_items", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        state: WorkingState = await self._flow.add_working_items(
            tenant, session_id, body, expected_version=_if_match(if_match), by=key_id
        )
        response.headers["ETag"] = f'"{state.version}"'
        return state

    @app.delete("/v1/sessions/{session_id}", response_model=ForgetResult, tags=["forget"])
    async def forget_session(
        self, session_id: str = _SESSION, authorization: str | None = Header(default=None)
    ) -> ForgetResult:
        """Forget the session in every layer: turns, vectors, summaries, working memory."""
        key = await self._gate.caller(authorization, "forget_session", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        forgotten: ForgetResult = await self._flow.forget_session(tenant, session_id, by=key_id)
        return forgotten

    @app.delete("/v1/sessions/{session_id}/turns/{turn_id}", response_model=ForgetResult, tags=["forget"])
    async def forget_turn(
        self, session_id: str = _SESSION, turn_id: str = _TURN_ID, authorization: str | None = Header(default=None)
    ) -> ForgetResult:
        """Forget one turn: its episodic row and vector, the summaries that cover it (the rest of
        their turns are summarised again), and its copies in working memory."""
        key = await self._gate.caller(authorization, "forget_turn", session=session_id)
        forgotten: ForgetResult = await self._flow.forget_turn(key.tenant, session_id, turn_id, by=key.key_id)
        return forgotten

    @app.post("/v1/documents", status_code=201, response_model=DocumentOut, tags=["documents"])
    async def index_document(
        self,
        body: DocumentIn,
        response: Response,
        wait: bool = Query(default=True, description="false: return at once (202) and index in the background"),
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> DocumentOut:
        """Index a document, or re-index it by its ``doc_id`` (atomically: a search sees
        the old version or the new one). ``If-Match``: the document's expected version.
        A large document is better sent with ``wait=false``; poll ``GET /v1/documents/{id}``."""
        key = await self._gate.caller(authorization, "index_document")
        tenant, key_id = key.tenant, key.key_id
        doc: DocumentOut = await self._flow.index_document(
            tenant, body, expected_version=_if_match(if_match), wait=wait, by=key_id
        )
        response.status_code = 201 if doc.status == "ready" else 202
        response.headers["ETag"] = f'"{doc.version}"'
        return doc

    @app.get("/v1/documents", response_model=DocumentList, tags=["documents"])
    async def list_documents(
        self,
        after: str | None = Query(default=None, description="The last doc_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> DocumentList:
        """Documents by id, a page at a time."""
        tenant = (await self._gate.caller(authorization, "list_documents")).tenant
        page: DocumentList = await self._flow.list_documents(tenant, after=after, limit=limit)
        return page

    @app.get("/v1/documents/{doc_id}", response_model=DocumentOut, tags=["documents"])
    async def get_document(
        self,
        response: Response,
        doc_id: str = _DOC_ID,
        include_text: bool = Query(default=False),
        authorization: str | None = Header(default=None),
    ) -> DocumentOut:
        """The document's metadata, version (ETag) and status; its text with ``include_text=true``."""
        tenant = (await self._gate.caller(authorization, "get_document")).tenant
        doc: DocumentOut = await self._flow.get_document(tenant, doc_id, include_text=include_text)
        response.headers["ETag"] = f'"{doc.version}"'
        return doc

    @app.delete("/v1/documents/{doc_id}", response_model=DocumentDeleted, tags=["documents"])
    async def delete_document(
        self,
        doc_id: str = _DOC_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> DocumentDeleted:
        """Remove the document: its passages, vectors, BM25 entries and graph edges."""
        key = await self._gate.caller(authorization, "delete_document")
        tenant, key_id = key.tenant, key.key_id
        deleted: DocumentDeleted = await self._flow.delete_document(
            tenant, doc_id, expected_version=_if_match(if_match), by=key_id
        )
        return deleted

    @app.get("/v1/entities", response_model=EntityOut, tags=["documents"])
    async def entity(
        self,
        name: str = Query(min_length=1, max_length=200, description="An entity name or alias, any case"),
        authorization: str | None = Header(default=None),
    ) -> EntityOut:
        """What the knowledge graph of your documents knows of an entity."""
        tenant = (await self._gate.caller(authorization, "entity")).tenant
        return EntityOut(**await self._flow.entity(tenant, name))

    # -- procedural memory ----------------------------------------------------------

    @app.post("/v1/skills:extract", status_code=201, response_model=SkillOut, tags=["skills"])
    async def extract_skill(
        self, body: SkillExtractIn, response: Response, authorization: str | None = Header(default=None)
    ) -> SkillOut:
        """Learn a skill from a successful trace (201), or update the near-duplicate skill it
        belongs to (200, ``merged: true``). With an LLM the LLM drafts it; a 502 keeps the
        trace and learns it in the background (``job_id`` in the body)."""
        key = await self._gate.caller(authorization, "extract_skill")
        tenant, key_id = key.tenant, key.key_id
        skill: SkillOut = await self._flow.extract_skill(tenant, body, by=key_id)
        response.status_code = 200 if skill.merged else 201
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @app.get("/v1/skills", response_model=SkillList, tags=["skills"])
    async def find_skills(
        self,
        task: str | None = Query(default=None, min_length=1, max_length=2000, description="Find skills for this task"),
        top_k: int = Query(default=5, ge=1, le=100),
        min_success_rate: float | None = Query(
            default=None,
            ge=0,
            le=1,
            description="Default procedural.min_success_rate; applies once a skill has min_uses uses",
        ),
        after: str | None = Query(default=None, description="Without task: the last skill_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> SkillList:
        """Skills for a task, best first (similarity x confidence in the success rate);
        without ``task``, every skill by id."""
        tenant = (await self._gate.caller(authorization, "find_skills")).tenant
        skills: SkillList = await self._flow.find_skills(
            tenant, task=task, top_k=top_k, min_success_rate=min_success_rate, after=after, limit=limit
        )
        return skills

    @app.get("/v1/skills/{skill_id}", response_model=SkillOut, tags=["skills"])
    async def get_skill(
        self, response: Response, skill_id: str = _SKILL_ID, authorization: str | None = Header(default=None)
    ) -> SkillOut:
        """The skill; the ETag is its version."""
        tenant = (await self._gate.caller(authorization, "get_skill")).tenant
        skill: SkillOut = await self._flow.get_skill(tenant, skill_id)
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @app.post("/v1/skills/{skill_id}/outcomes", response_model=SkillOut, tags=["skills"])
    async def record_outcome(
        self,
        body: OutcomeIn,
        response: Response,
        skill_id: str = _SKILL_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> SkillOut:
        """Count one use. Without ``If-Match`` an atomic increment; with it, applied only at
        that version (else 409 with the current one)."""
        key = await self._gate.caller(authorization, "record_outcome")
        tenant, key_id = key.tenant, key.key_id
        skill: SkillOut = await self._flow.record_outcome(
            tenant, skill_id, body, expected_version=_if_match(if_match), by=key_id
        )
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @app.patch("/v1/skills/{skill_id}", response_model=SkillOut, tags=["skills"])
    async def update_skill(
        self,
        body: SkillPatch,
        response: Response,
        skill_id: str = _SKILL_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> SkillOut:
        """Edit the skill's content; ``If-Match`` is required (428 without, 409 when stale)."""
        key = await self._gate.caller(authorization, "update_skill")
        tenant, key_id = key.tenant, key.key_id
        skill: SkillOut = await self._flow.update_skill(
            tenant, skill_id, body, expected_version=_if_match(if_match), by=key_id
        )
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @app.delete("/v1/skills/{skill_id}", response_model=SkillDeleted, tags=["skills"])
    async def delete_skill(
        self,
        skill_id: str = _SKILL_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> SkillDeleted:
        """Remove the skill, its vector and its history."""
        key = await self._gate.caller(authorization, "delete_skill")
        tenant, key_id = key.tenant, key.key_id
        deleted: SkillDeleted = await self._flow.delete_skill(
            tenant, skill_id, expected_version=_if_match(if_match), by=key_id
        )
        return deleted

    @app.get("/v1/skills/{skill_id}/history", response_model=SkillHistory, tags=["skills"])
    async def skill_history(
        self, skill_id: str = _SKILL_ID, authorization: str | None = Header(default=None)
    ) -> SkillHistory:
        """Every version of the skill: when, by which key, what changed."""
        tenant = (await self._gate.caller(authorization, "skill_history")).tenant
        history: SkillHistory = await self._flow.skill_history(tenant, skill_id)
        return history

    @app.get("/v1/skill-jobs/{job_id}", response_model=SkillJobOut, tags=["skills"])
    async def skill_job(self, job_id: str = _JOB_ID, authorization: str | None = Header(default=None)) -> SkillJobOut:
        """A background skill extraction: pending, running, done (with the skill) or failed."""
        tenant = (await self._gate.caller(authorization, "skill_job")).tenant
        job: SkillJobOut = await self._flow.skill_job(tenant, job_id)
        return job

    @app.post("/v1/interactions", status_code=201, response_model=InteractionResult, tags=["turns"])
    async def post_interaction(
        self, body: InteractionIn, authorization: str | None = Header(default=None)
    ) -> InteractionResult:
        """Record an exchange in working and episodic memory; a successful coding /
        debugging / deployment task with a trace teaches a skill in the background, if the
        key may write skills (a session key may not)."""
        key = await self._gate.caller(authorization, "post_interaction", session=body.session_id)
        learns = may(key, Need(writes=ROUTES["post_interaction"].learns), session=body.session_id)
        recorded: InteractionResult = await self._flow.post_interaction(key.tenant, body, by=key.key_id, learn=learns)
        return recorded

    # -- admin: API keys ----------------------------------------------------------------

    @app.post("/v1/admin/keys", status_code=201, response_model=KeyCreated, tags=["admin"])
    async def admin_create_key(self, body: KeyCreateIn, authorization: str | None = Header(default=None)) -> KeyCreated:
        """A new key for a tenant (not ``system``), optionally read-only, limited to one session,
        or kept from documents and skills (``shared``: by default only a session key is). The
        secret is in this response only; Strata stores its hash."""
        await self._gate.admin(authorization)
        keys = await self._gate.key_store()
        return await asyncio.to_thread(
            keys.issue,
            body.tenant,
            read_only=body.read_only,
            session_id=body.session_id,
            shared=body.shared,
            name=body.name,
        )

    @app.get("/v1/admin/keys", response_model=KeyList, tags=["admin"])
    async def admin_list_keys(
        self,
        tenant: str | None = Query(
            default=None, pattern=ID_PATTERN.pattern.join("^$"), description="Only this tenant's keys"
        ),
        authorization: str | None = Header(default=None),
    ) -> KeyList:
        """Every key by id, with its tenant, scopes and dates, revoked ones too; never a secret."""
        await self._gate.admin(authorization)
        keys = await self._gate.key_store()
        return KeyList(keys=await asyncio.to_thread(keys.list, tenant))

    @app.post("/v1/admin/keys/{key_id}:rotate", status_code=201, response_model=KeyCreated, tags=["admin"])
    async def admin_rotate_key(
        self, key_id: str = _KEY_ID, authorization: str | None = Header(default=None)
    ) -> KeyCreated:
        """A new key with the same tenant, scopes and name; the old one stops working at once on
        this replica, within ``auth.key_cache_ttl_s`` (1 s) on the others."""
        await self._gate.admin(authorization)
        return await self._gate.rotate(key_id)

    @app.delete("/v1/admin/keys/{key_id}", response_model=KeyInfo, tags=["admin"])
    async def admin_revoke_key(
        self, key_id: str = _KEY_ID, authorization: str | None = Header(default=None)
    ) -> KeyInfo:
        """Revoke the key: its next request to this replica is a 401, on any replica within
        ``auth.key_cache_ttl_s`` (1 s)."""
        await self._gate.admin(authorization)
        return await self._gate.revoke(key_id)

    @app.delete("/v1/admin/tenants/{tenant}", response_model=TenantForgotten, tags=["admin"])
    async def admin_forget_tenant(
        self, tenant: str = _TENANT_ID, authorization: str | None = Header(default=None)
    ) -> TenantForgotten:
        """Forget a whole tenant: every row, vector, index entry, summary, skill and pending
        job in every layer, and revoke its keys. The audit trail (no content) stays."""
        await self._gate.admin(authorization)
        if tenant == SYSTEM_TENANT:  # before any key is revoked: those are the admin keys
            raise InvalidInput("the system tenant cannot be forgotten", field="tenant")
        keys = await self._gate.key_store()
        # Keys first: nothing may write to the tenant while it is being forgotten.
        revoked = [k.key_id for k in await asyncio.to_thread(keys.list, tenant) if k.revoked_at is None]
        for key_id in revoked:
            await self._gate.revoke(key_id)
        removed: dict[str, int] = await self._flow.forget_tenant(tenant, by="admin")
        return TenantForgotten(tenant=tenant, removed=removed, keys_revoked=revoked)

    @app.get("/v1/audit", response_model=AuditHistory, tags=["audit"])
    async def audit(
        self,
        # FastAPI reads the Query marker once, at import; nothing is called per request.
        since: datetime | None = Query(
            default=None, description="Only changes after this time; without a zone, UTC"
        ),
        after: str | None = Query(default=None, max_length=64, description="next_after of the previous page"),
        limit: int = Query(default=100, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> AuditHistory:
        """Every write, update and delete of your tenant: when, which key, which layer and
        record, which version. Never the content. A page at a time, oldest first."""
        tenant = (await self._gate.caller(authorization, "audit")).tenant
        history: AuditHistory = await self._flow.audit(tenant, since=since, after=after, limit=limit)
        return history
