"""One request's work across the layers, shared by the Serve orchestrator and the
in-cluster client: embed once, fan out to the layer actors concurrently,
fit the result to the budget.

The caller supplies ``embed`` (the Serve embedding deployment, or a local
embedder), the router supplies actor handles; nothing here waits on one
layer before asking another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import numpy as np
from pydantic import BaseModel
from strata_actors.episodic import turn_text
from strata_actors.errors import unwrap
from strata_actors.router import LayerRouter

from strata.access.audit import AuditLog
from strata.access.audit import entry as audit_entry
from strata.config import LayerPolicy, StrataSettings
from strata.context.assemble import LAYER_TITLES, AssembledContext, assemble_context, render_refined
from strata.context.refine import refine_items
from strata.errors import InvalidInput, LLMError, NotFound, PreconditionRequired, StrataError
from strata.ids import SYSTEM_TENANT, validate_id
from strata.privacy.redaction import Redaction
from strata.providers.llm import LLM, make_llm
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.terms import extract_terms
from strata.retrieval.timeparse import resolve_time_range
from strata.schema import (
    AuditEntryOut,
    AuditHistory,
    ContextItem,
    ContextRequest,
    ContextResult,
    DocumentDeleted,
    DocumentIn,
    DocumentList,
    DocumentOut,
    ForgetResult,
    InteractionIn,
    InteractionResult,
    Layer,
    OutcomeIn,
    RecordTurnsResult,
    SearchHit,
    SearchRequest,
    SearchResult,
    SkillDeleted,
    SkillExtractIn,
    SkillHistory,
    SkillJobOut,
    SkillList,
    SkillOut,
    SkillPatch,
    TimeRangeOut,
    TurnIn,
    TurnOut,
    WorkingItemsIn,
    WorkingState,
)
from strata.store.layout import open_store
from strata.working.sessions import TURN_ID

__all__ = ["Embed", "Orchestration"]

log = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]
T = TypeVar("T")
AVAILABLE_LAYERS: tuple[Layer, ...] = ("working", "episodic", "semantic", "procedural")
#: Layers that keep memory per session (forgetting a session reaches these).
SESSION_LAYERS: tuple[Layer, ...] = ("working", "episodic")


async def _call(ref: Any) -> Any:
    try:
        return await ref
    except BaseException as exc:
        raise unwrap(exc) from None


class Orchestration:
    def __init__(
        self, settings: StrataSettings, *, embed: Embed, router: LayerRouter | None = None, llm: LLM | None = None
    ) -> None:
        self.settings = settings
        self.router = router or LayerRouter(settings)
        self._embed = embed
        self._counter = TiktokenCounter(settings.working.encoding)
        #: Refines a context that does not fit (``context.refine_with_llm``).
        self._llm = llm if llm is not None else make_llm(settings.llm)
        #: PII goes before anything is written, and queries use the same policy.
        self._pii = Redaction(settings.pii)
        self._audit: AuditLog | None = None

    def _actor(self, layer: str, tenant: str) -> Any:
        return self.router.handle(layer, tenant)

    # -- writes ---------------------------------------------------------------

    async def record_turns(
        self,
        tenant: str,
        session_id: str,
        turns: Sequence[TurnIn],
        *,
        expected_version: int | None = None,
        by: str = "",
    ) -> RecordTurnsResult:
        """Write turns to episodic memory (durable, embedded) and to the session's working memory."""
        validate_id(session_id, field="session_id")
        pii = self._pii.for_tenant(tenant)
        dicts = [pii.model(t).model_dump() for t in turns]
        vectors = await self._embed([turn_text(d) for d in dicts])
        episodic = await _call(
            self._actor("episodic", tenant).record_turns.remote(
                tenant, session_id, dicts, vectors=vectors, expected_version=expected_version
            )
        )
        # Working memory follows the episodic write: the turn is durable first.
        # If working memory fails now, the turn stays recorded (a retry would
        # record it twice); the result says what is missing instead.
        # A turn's copies in working memory expire no later than the turn.
        items = []
        for d, out in zip(dicts, episodic["turns"]):
            left = (out["expires_at"] - datetime.now(UTC)).total_seconds() if out["expires_at"] else None
            for role, text in (("user", d["user"]), ("assistant", d["agent"])):
                if text and text.strip():
                    items.append({"role": role, "content": text, "created_at": out["timestamp"],
                                  "ttl_s": max(left, 0.001) if left is not None else None,
                                  "metadata": {TURN_ID: out["turn_id"]}})
        versions = {"episodic": episodic["version"]}
        # A retry of recorded turns changed nothing in episodic memory; it still
        # completes working memory, which the first attempt may not have reached.
        if not episodic.get("replayed"):
            await self._record(tenant, by, "record_turns", "episodic", session_id, episodic["version"])
        missing: dict[str, str] = {}
        try:
            working = await _call(self._actor("working", tenant).add_items.remote(tenant, session_id, items))
            versions["working"] = working["version"]
        except StrataError as exc:
            missing["working"] = exc.message
        return RecordTurnsResult(
            session_id=session_id,
            turns=[TurnOut(**t) for t in episodic["turns"]],
            versions=versions,
            missing=missing,
            redacted=pii.report(),
            replayed=bool(episodic.get("replayed")),
        )

    async def add_working_items(
        self,
        tenant: str,
        session_id: str,
        body: WorkingItemsIn,
        *,
        expected_version: int | None = None,
        by: str = "",
    ) -> WorkingState:
        validate_id(session_id, field="session_id")
        body = self._pii.for_tenant(tenant).model(body)
        state = await _call(
            self._actor("working", tenant).add_items.remote(
                tenant,
                session_id,
                [i.model_dump() for i in body.items],
                task=body.task,
                expected_version=expected_version,
            )
        )
        await self._record(tenant, by, "add_working_items", "working", session_id, state["version"])
        return WorkingState(**state)

    async def forget_session(self, tenant: str, session_id: str, *, by: str = "") -> ForgetResult:
        """Forget a session in every layer; 404 only if no layer knew it."""
        validate_id(session_id, field="session_id")
        results = await asyncio.gather(
            *(_call(self._actor(layer, tenant).forget_session.remote(tenant, session_id)) for layer in SESSION_LAYERS),
            return_exceptions=True,
        )
        removed: dict[str, int] = {}
        versions: dict[str, int] = {}
        for layer, result in zip(SESSION_LAYERS, results):
            if isinstance(result, NotFound):
                continue
            if isinstance(result, BaseException):
                raise result
            removed[layer], versions[layer] = result["removed"], result["version"]
        if not removed:
            raise NotFound(f"session {session_id!r} has no memory to forget")
        for name, version in versions.items():
            await self._record(tenant, by, "forget_session", name, session_id, version)
        return ForgetResult(session_id=session_id, removed=removed, versions=versions)

    async def forget_tenant(self, tenant: str, *, by: str = "") -> dict[str, int]:
        """Delete everything every layer holds for ``tenant`` (rows, vectors, indexes, jobs);
        returns the rows removed per layer. Its keys are the caller's to revoke."""
        validate_id(tenant, field="tenant")
        if tenant == SYSTEM_TENANT:
            raise InvalidInput("the system tenant cannot be forgotten", field="tenant")
        layers = list(AVAILABLE_LAYERS)
        results = await asyncio.gather(
            *(_call(self._actor(layer, tenant).forget_tenant.remote(tenant)) for layer in layers)
        )
        await self._record(tenant, by, "forget_tenant", "all", tenant, None)
        return {layer: int(r["removed"]) for layer, r in zip(layers, results)}

    async def index_document(
        self, tenant: str, body: DocumentIn, *, expected_version: int | None = None, wait: bool = True, by: str = ""
    ) -> DocumentOut:
        """Index or re-index a document (atomically: searches see one version)."""
        # A document may be megabytes: its redaction runs off the event loop.
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        out = await _call(
            self._actor("semantic", tenant).index_document.remote(
                tenant, body.model_dump(), expected_version=expected_version, wait=wait
            )
        )
        doc = DocumentOut(**out)
        # A background job's version is the one it will make; the audit records the request.
        await self._record(tenant, by, "index_document", "semantic", doc.doc_id, doc.version)
        return doc

    async def delete_document(
        self, tenant: str, doc_id: str, *, expected_version: int | None = None, by: str = ""
    ) -> DocumentDeleted:
        validate_id(doc_id, field="doc_id")
        out = await _call(
            self._actor("semantic", tenant).delete_document.remote(tenant, doc_id, expected_version=expected_version)
        )
        await self._record(tenant, by, "delete_document", "semantic", doc_id, out["version"])
        return DocumentDeleted(**out)

    # -- procedural memory ------------------------------------------------------

    async def extract_skill(self, tenant: str, body: SkillExtractIn, *, by: str = "") -> SkillOut:
        """Learn a skill from a trace now (merging into a near-duplicate)."""
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        out = await _call(
            self._actor("procedural", tenant).extract_skill.remote(
                tenant, body.task, _trace(body.trace), body.outcome, by=by, ttl_s=body.ttl_s
            )
        )
        await self._record(tenant, by, "extract_skill", "procedural", out["skill_id"], out["version"])
        return SkillOut(**out)

    async def find_skills(
        self,
        tenant: str,
        *,
        task: str | None = None,
        top_k: int = 5,
        min_success_rate: float | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> SkillList:
        """Skills for a task, best first; without a task, all skills by id, a page at a time."""
        actor = self._actor("procedural", tenant)
        if task is None:
            if after is not None:
                validate_id(after, field="after")
            return SkillList(**await _call(actor.list_skills.remote(tenant, after=after, limit=limit)))
        if not task.strip():
            raise InvalidInput("task is blank", field="task")
        task = self._pii.for_tenant(tenant).text(task)
        vector = (await self._embed([task]))[0]
        found = await self._procedural_search(tenant, vector, task, top_k=top_k, min_success_rate=min_success_rate)
        return SkillList(skills=[SkillOut(**s) for s in found["skills"]], total=len(found["skills"]))

    async def get_skill(self, tenant: str, skill_id: str) -> SkillOut:
        validate_id(skill_id, field="skill_id")
        return SkillOut(**await _call(self._actor("procedural", tenant).get_skill.remote(tenant, skill_id)))

    async def record_outcome(
        self, tenant: str, skill_id: str, body: OutcomeIn, *, expected_version: int | None = None, by: str = ""
    ) -> SkillOut:
        """Count a use; without ``expected_version`` an atomic increment, with it a 409 when stale."""
        validate_id(skill_id, field="skill_id")
        body = self._pii.for_tenant(tenant).model(body)
        out = await _call(
            self._actor("procedural", tenant).record_outcome.remote(
                tenant, skill_id, body.success, body.notes, expected_version=expected_version, by=by
            )
        )
        await self._record(tenant, by, "record_outcome", "procedural", skill_id, out["version"])
        return SkillOut(**out)

    async def update_skill(
        self, tenant: str, skill_id: str, body: SkillPatch, *, expected_version: int | None, by: str = ""
    ) -> SkillOut:
        validate_id(skill_id, field="skill_id")
        if expected_version is None:
            raise PreconditionRequired(
                "editing a skill needs If-Match with the version you edited (GET the skill for its ETag)",
                field="If-Match",
            )
        changes = self._pii.for_tenant(tenant).model(body).model_dump(exclude_unset=True)
        out = await _call(
            self._actor("procedural", tenant).update_skill.remote(
                tenant, skill_id, changes, expected_version=expected_version, by=by
            )
        )
        await self._record(tenant, by, "update_skill", "procedural", skill_id, out["version"])
        return SkillOut(**out)

    async def delete_skill(
        self, tenant: str, skill_id: str, *, expected_version: int | None = None, by: str = ""
    ) -> SkillDeleted:
        validate_id(skill_id, field="skill_id")
        out = await _call(
            self._actor("procedural", tenant).delete_skill.remote(tenant, skill_id, expected_version=expected_version)
        )
        await self._record(tenant, by, "delete_skill", "procedural", skill_id, out["version"])
        return SkillDeleted(**out)

    async def skill_history(self, tenant: str, skill_id: str) -> SkillHistory:
        validate_id(skill_id, field="skill_id")
        return SkillHistory(**await _call(self._actor("procedural", tenant).history.remote(tenant, skill_id)))

    async def skill_job(self, tenant: str, job_id: str) -> SkillJobOut:
        validate_id(job_id, field="job_id")
        return SkillJobOut(**await _call(self._actor("procedural", tenant).skill_job.remote(tenant, job_id)))

    async def post_interaction(self, tenant: str, body: InteractionIn, *, by: str = "") -> InteractionResult:
        """Record the exchange in working and episodic memory; a success of a learning
        task type queues a skill extraction (durable, in the background)."""
        # Redacted here once (the turn, and the trace the job keeps); record_turns
        # redacts again, which changes nothing: redaction is idempotent.
        pii = self._pii.for_tenant(tenant)
        body = await asyncio.to_thread(pii.model, body)
        recorded = await self.record_turns(tenant, body.session_id, [body.turn()], by=by)
        learn_from = self.settings.procedural.learn_from
        job: SkillJobOut | None = None
        missing = dict(recorded.missing)
        if not body.success:
            learning = "not learned: only successful tasks teach a skill"
        elif body.task_type not in learn_from:
            learning = f"not learned: task type {body.task_type!r} is not in procedural.learn_from ({', '.join(learn_from)})"
        elif not body.trace and not self.settings.llm.enabled:
            learning = "not learned: give a trace (without an LLM, skills are built from structured traces)"
        else:
            trace = _trace(body.trace) if body.trace else [
                f"user: {body.user or ''}".strip(), f"agent: {body.agent or ''}".strip()
            ]
            task = body.task or body.user or body.agent or ""
            try:
                out = await _call(
                    self._actor("procedural", tenant).learn_later.remote(
                        tenant, task, trace, body.outcome, by=by,
                        extra={"session_id": body.session_id, "turn_id": recorded.turns[0].turn_id},
                    )
                )
                job = SkillJobOut(**out)
                learning = "learning a skill in the background: see skill_job"
            except StrataError as exc:
                missing["procedural"] = exc.message
                learning = "not learned: the trace could not be kept (see missing); the turn is recorded"
        return InteractionResult(
            **{**recorded.model_dump(), "missing": missing, "redacted": pii.report()}, skill_job=job, learning=learning
        )

    # -- the audit history --------------------------------------------------------

    async def _audit_log(self) -> AuditLog:
        if self._audit is None:
            store, names = await asyncio.to_thread(open_store, self.settings)
            self._audit = AuditLog(store, names.state)
        return self._audit

    async def _record(
        self, tenant: str, by: str, op: str, layer: str, record_id: str, version: int | None
    ) -> None:
        """Append to the tenant's audit history. Best effort: the change is durable already,
        and failing the call now would make the caller retry a write that happened."""
        try:
            log_ = await self._audit_log()
            await asyncio.to_thread(log_.append, tenant, [audit_entry(op, layer, record_id, key_id=by, version=version)])
        except StrataError as exc:
            log.warning("audit of %s %s for tenant %s not written: %s", op, record_id, tenant, exc.message)

    async def audit(self, tenant: str, *, since: datetime | None = None, limit: int = 100) -> AuditHistory:
        """The tenant's changes, oldest first: time, key id, operation, layer, record, version."""
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}", field="limit")
        log_ = await self._audit_log()
        entries = await asyncio.to_thread(log_.read, tenant, since=since, limit=limit)
        return AuditHistory(entries=[AuditEntryOut(**e.to_payload()) for e in entries])

    # -- reads ----------------------------------------------------------------

    async def get_document(self, tenant: str, doc_id: str, *, include_text: bool = False) -> DocumentOut:
        validate_id(doc_id, field="doc_id")
        out = await _call(self._actor("semantic", tenant).get_document.remote(tenant, doc_id, with_text=include_text))
        return DocumentOut(**out)

    async def list_documents(self, tenant: str, *, after: str | None = None, limit: int = 50) -> DocumentList:
        if after is not None:
            validate_id(after, field="after")
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}", field="limit")
        out = await _call(self._actor("semantic", tenant).list_documents.remote(tenant, after=after, limit=limit))
        return DocumentList(**out)

    async def entity(self, tenant: str, name: str) -> dict[str, Any]:
        """What the semantic layer's knowledge graph knows of an entity."""
        if not name.strip() or len(name) > 200:
            raise InvalidInput("give an entity name of 1 to 200 characters", field="name")
        found: dict[str, Any] = await _call(self._actor("semantic", tenant).entity.remote(tenant, name))
        return found

    async def working(self, tenant: str, session_id: str) -> WorkingState:
        validate_id(session_id, field="session_id")
        return WorkingState(**await _call(self._actor("working", tenant).get.remote(tenant, session_id)))

    async def build_context(self, tenant: str, req: ContextRequest, *, session_only: bool = False) -> ContextResult:
        """Working memory always; the task type's other layers concurrently; fitted to the budget.

        A layer that fails or misses its deadline (``context.layer_timeouts``)
        is left out and named in ``missing``; the others still make the context.
        ``session_only``: episodic memory of this session only (a session-bound key).
        """
        ctx = self.settings.context
        if req.task_type not in ctx.policies and req.layers is None:
            raise InvalidInput(
                f"unknown task_type {req.task_type!r}; configured: {', '.join(sorted(ctx.policies))}",
                field="task_type",
            )
        policy: dict[str, LayerPolicy] = (
            {layer: LayerPolicy() for layer in req.layers} if req.layers is not None else ctx.policies[req.task_type]
        )
        max_tokens = req.max_tokens or ctx.default_max_tokens
        reference = req.reference_time or datetime.now(UTC)
        # A time expression read off the message is a preference, not a filter,
        # and its words stay in the query: a date is often content.
        time_range = resolve_time_range(req.message, reference)
        query = self._pii.for_tenant(tenant).text(req.message)
        wanted = [layer for layer in policy if layer != "working"]
        missing: dict[str, str] = {
            layer: "not available in this version of Strata" for layer in wanted if layer not in AVAILABLE_LAYERS
        }
        fetch = [layer for layer in wanted if layer in AVAILABLE_LAYERS]
        working_budget = int(max_tokens * (ctx.working_share if fetch else 1.0))

        # The query is embedded once, and only if a layer needs it; every layer gets the vector.
        vector_task = asyncio.ensure_future(self._embed([query])) if fetch else None

        async def layer_hits(layer: str) -> tuple[list[ContextItem], int | None]:
            assert vector_task is not None
            # Shielded: a layer cancelled at its deadline must not cancel the shared embedding.
            vector = (await asyncio.shield(vector_task))[0]
            top_k = req.top_k or policy[layer].top_k or ctx.default_top_k
            if layer == "semantic":
                found = await self._semantic_search(tenant, vector, query, top_k=top_k)
                return [ContextItem(**h) for h in found["hits"]], None
            if layer == "procedural":
                found = await self._procedural_search(tenant, vector, query, top_k=top_k)
                return [ContextItem(**_skill_hit(s)) for s in found["skills"]], None
            found = await self._episodic_search(
                tenant, vector, query, top_k=top_k, session_id=req.session_id if session_only else None,
                prefer=(time_range.start, time_range.end) if time_range else None,
            )
            return [ContextItem(**h) for h in found["hits"]], found["version"]

        async def working() -> dict[str, Any]:
            got: dict[str, Any] = await _call(
                self._actor("working", tenant).get.remote(tenant, req.session_id, budget_tokens=working_budget)
            )
            return got

        names = ["working", *fetch]
        tasks = [working(), *(layer_hits(layer) for layer in fetch)]
        results = await asyncio.gather(
            *(_deadline(task, ctx.timeout_for(name)) for name, task in zip(names, tasks)), return_exceptions=True
        )
        versions: dict[str, int] = {}
        messages: list[dict[str, str]] = []
        layer_items: dict[str, list[ContextItem]] = {}
        for layer, result in zip(names, results):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancellation, interpreter exit
                missing[layer] = _failure(result)
            elif layer == "working":
                state = cast(dict[str, Any], result)
                messages, versions["working"] = state["messages"], state["version"]
            else:
                layer_items[layer], version = cast(tuple[list[ContextItem], int | None], result)
                if version is not None:
                    versions[layer] = version
        weights = {layer: policy[layer].weight for layer in layer_items}
        assembled = assemble_context(
            working_messages=messages,
            layer_items=layer_items,
            max_tokens=max_tokens,
            counter=self._counter,
            min_relative_score=ctx.min_relative_score,
            layer_weights=weights,
        )
        refined, refine_error = False, None
        if assembled.cut and self._llm is not None and ctx.refine_with_llm:
            candidate, refine_error = await self._refine(req.message, assembled, max_tokens)
            if candidate is not None:
                assembled, refined = candidate, True
        return ContextResult(
            context=assembled.text,
            messages=assembled.messages,
            sections=assembled.sections,
            token_count=assembled.tokens,
            max_tokens=max_tokens,
            task_type=req.task_type,
            versions=versions,
            time_range=_range_out(time_range),
            missing=missing,
            budgets=assembled.budgets,
            refined=refined,
            refine_error=refine_error,
        )

    async def _refine(
        self, message: str, assembled: AssembledContext, max_tokens: int
    ) -> tuple[AssembledContext | None, str | None]:
        """Condense every candidate item with the LLM into what the budget holds; on any
        failure the context trimmed by score stands (and the reason is returned)."""
        assert self._llm is not None
        narrowed = {(i.layer, i.id) for i in assembled.narrowed}
        items = [
            i for sec in assembled.sections if sec.layer != "working" for i in sec.items if (i.layer, i.id) not in narrowed
        ]
        items += assembled.narrowed + assembled.dropped  # whole, as the layers returned them
        working_tokens = sum(sec.tokens for sec in assembled.sections if sec.layer == "working")
        budget = max_tokens - working_tokens - self._counter.count(LAYER_TITLES["refined"]) - 8
        if budget < 32:
            return None, "the budget left after working memory is too small to condense into"
        try:
            text = await asyncio.wait_for(
                asyncio.to_thread(
                    refine_items, self._llm, message=message, items=items, budget_tokens=budget, counter=self._counter
                ),
                timeout=self.settings.llm.timeout_s * 2 + 1,
            )
        except (LLMError, TimeoutError) as exc:
            return None, f"LLM refinement failed ({_failure(exc)}): trimmed by score instead"
        refined = render_refined(
            working_messages=assembled.messages, refined_text=text, max_tokens=max_tokens, counter=self._counter
        )
        if refined is None:
            return None, "the condensed text did not fit: trimmed by score instead"
        return refined, None

    async def _episodic_search(
        self,
        tenant: str,
        vector: np.ndarray,
        text: str,
        *,
        top_k: int,
        session_id: str | None,
        start: datetime | None = None,
        end: datetime | None = None,
        prefer: tuple[datetime, datetime] | None = None,
    ) -> dict[str, Any]:
        found: dict[str, Any] = await _call(
            self._actor("episodic", tenant).search.remote(
                tenant, query=text, vector=vector, top_k=top_k, session_id=session_id,
                start=start, end=end, prefer=prefer,
            )
        )
        return found

    async def _semantic_search(
        self,
        tenant: str,
        vector: np.ndarray,
        text: str,
        *,
        top_k: int,
        weights: dict[str, float] | None = None,
        min_cosine: float | None = None,
        doc_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        found: dict[str, Any] = await _call(
            self._actor("semantic", tenant).search.remote(
                tenant, query=text, vector=vector, top_k=top_k, weights=weights, min_cosine=min_cosine, doc_ids=doc_ids
            )
        )
        return found

    async def _procedural_search(
        self, tenant: str, vector: np.ndarray | None, text: str, *, top_k: int, min_success_rate: float | None = None
    ) -> dict[str, Any]:
        found: dict[str, Any] = await _call(
            self._actor("procedural", tenant).search.remote(
                tenant, query=text, vector=vector, top_k=top_k, min_success_rate=min_success_rate
            )
        )
        return found

    async def search(self, tenant: str, req: SearchRequest) -> SearchResult:
        layers: list[Layer] = req.layers or list(AVAILABLE_LAYERS)
        missing: dict[str, str] = {layer: "not available in this version of Strata" for layer in layers if layer not in AVAILABLE_LAYERS}
        reference = req.reference_time or datetime.now(UTC)
        # An explicit time_range filters; one read off the query only prefers (see build_context).
        parsed = None if req.time_range else resolve_time_range(req.query, reference)
        start = req.time_range.start if req.time_range else None
        end = req.time_range.end if req.time_range else None
        prefer = (parsed.start, parsed.end) if parsed else None
        query = self._pii.for_tenant(tenant).text(req.query)
        hits: list[SearchHit] = []
        versions: dict[str, int] = {}

        vector_task = (
            asyncio.ensure_future(self._embed([query]))
            if {"episodic", "semantic", "procedural"} & set(layers)
            else None
        )

        async def episodic() -> None:
            assert vector_task is not None
            vector = (await vector_task)[0]
            found = await self._episodic_search(
                tenant, vector, query, top_k=req.top_k, session_id=req.session_id, start=start, end=end, prefer=prefer
            )
            hits.extend(SearchHit(**h) for h in found["hits"])
            versions["episodic"] = found["version"]

        async def working() -> None:
            if req.session_id is None:
                missing["working"] = "working memory is per session: give session_id to search it"
                return
            state = await self.working(tenant, req.session_id)
            wanted = extract_terms(query)
            for item in state.items:
                overlap = len(wanted & extract_terms(item.content))
                if overlap and (start is None or item.created_at >= start) and (end is None or item.created_at < end):
                    score = overlap / max(len(wanted), 1)
                    hits.append(SearchHit(layer="working", kind=item.role, id=item.id, text=item.content, score=score, timestamp=item.created_at, session_id=req.session_id))
            versions["working"] = state.version

        async def semantic() -> None:
            assert vector_task is not None
            vector = (await vector_task)[0]
            found = await self._semantic_search(
                tenant, vector, query, top_k=req.top_k, weights=req.weights, min_cosine=req.min_cosine, doc_ids=req.doc_ids
            )
            hits.extend(SearchHit(**h) for h in found["hits"])

        async def procedural() -> None:
            assert vector_task is not None
            vector = (await vector_task)[0]
            found = await self._procedural_search(tenant, vector, query, top_k=req.top_k)
            hits.extend(SearchHit(**_skill_hit(s)) for s in found["skills"])

        jobs = {"episodic": episodic, "working": working, "semantic": semantic, "procedural": procedural}
        await asyncio.gather(*(jobs[layer]() for layer in layers if layer in jobs))
        hits.sort(key=lambda h: -h.score)
        time_range = _range_out(parsed) if parsed else (
            TimeRangeOut(start=start, end=end) if req.time_range else None
        )
        return SearchResult(hits=hits[: req.top_k], time_range=time_range, versions=versions, missing=missing)

    async def llm_usage(self) -> dict[str, int]:
        """LLM calls and tokens of every layer shard since it started, summed (all tenants)."""
        handles = self.router.every_handle()
        totals: dict[str, int] = {}
        for usage in await asyncio.gather(*(_call(h.llm_usage.remote()) for h in handles)):
            for key, value in usage.items():
                totals[key] = totals.get(key, 0) + int(value)
        return totals

    async def wait_for_summaries(self, tenant: str) -> int:
        """Wait until the tenant's background summaries are made; returns chunks still pending."""
        pending: int = await _call(self._actor("episodic", tenant).wait_for_summaries.remote(tenant))
        return pending

    async def health(self) -> dict[str, Any]:
        """Ping every shard of every layer; the store's answer comes through them."""
        layers: dict[str, str] = {}
        milvus = "ok"
        for layer in AVAILABLE_LAYERS:
            refs = [h.ping.remote() for h in self.router.all_handles(layer)]
            try:
                await asyncio.wait_for(asyncio.gather(*(_call(r) for r in refs)), timeout=10)
                layers[layer] = "ok"
            except BaseException as exc:
                err = unwrap(exc)
                layers[layer] = getattr(err, "message", None) or f"{type(err).__name__}"
                milvus = layers[layer] if "Milvus" in layers[layer] else milvus
        return {"layers": layers, "milvus": milvus}


async def _deadline(task: Awaitable[T], timeout_s: float) -> T:
    try:
        return await asyncio.wait_for(task, timeout=timeout_s)
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout_s:g} s") from None


def _failure(exc: BaseException) -> str:
    """Why a layer is missing, in words safe to show (no traceback, no other tenant's data)."""
    if isinstance(exc, TimeoutError):  # our deadline (unwrap would call it a store timeout)
        return f"timed out: {exc}" if str(exc) else "timed out"
    err = unwrap(exc)
    if isinstance(err, StrataError):
        return err.message
    return f"the layer failed ({type(err).__name__}); it is left out of this context"


def _trace(trace: Sequence[Any]) -> list[Any]:
    return [t.model_dump(exclude_defaults=True) if isinstance(t, BaseModel) else t for t in trace]


def _skill_hit(skill: dict[str, Any]) -> dict[str, Any]:
    return {
        "layer": "procedural",
        "kind": "skill",
        "id": skill["skill_id"],
        "text": skill["brief"],
        "score": skill["score"],
        "timestamp": skill.get("updated_at"),
    }


def _range_out(time_range: Any) -> TimeRangeOut | None:
    if time_range is None:
        return None
    return TimeRangeOut(start=time_range.start, end=time_range.end, expression=time_range.expression)
