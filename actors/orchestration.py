"""One request's work across the layers, shared by the Serve orchestrator and the
in-cluster client: embed once, fan out to the layer actors concurrently,
fit the result to the budget.

The caller supplies ``embed`` (the Serve embedding deployment, or a local
embedder), the router supplies actor handles; nothing here waits on one
layer before asking another.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Sequence

import numpy as np

from actors.episodic import turn_text
from actors.errors import unwrap
from actors.router import LayerRouter
from strata.config import StrataSettings
from strata.context import assemble_context
from strata.errors import InvalidInput, NotFound, StrataError
from strata.ids import validate_id
from strata.schema import (
    Layer,
    ContextItem,
    ContextRequest,
    ContextResult,
    DocumentDeleted,
    DocumentIn,
    DocumentList,
    DocumentOut,
    ForgetResult,
    RecordTurnsResult,
    SearchHit,
    SearchRequest,
    SearchResult,
    TimeRangeOut,
    TurnIn,
    TurnOut,
    WorkingItemsIn,
    WorkingState,
)
from strata.importance import extract_terms
from strata.timeparse import resolve_time_range
from strata.tokens import TiktokenCounter

__all__ = ["Orchestration", "Embed"]

Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]
AVAILABLE_LAYERS: tuple[Layer, ...] = ("working", "episodic", "semantic")
#: Layers that keep memory per session (forgetting a session reaches these).
SESSION_LAYERS: tuple[Layer, ...] = ("working", "episodic")


async def _call(ref: Any) -> Any:
    try:
        return await ref
    except BaseException as exc:
        raise unwrap(exc) from None


class Orchestration:
    def __init__(self, settings: StrataSettings, *, embed: Embed, router: LayerRouter | None = None) -> None:
        self.settings = settings
        self.router = router or LayerRouter(settings)
        self._embed = embed
        self._counter = TiktokenCounter(settings.working.encoding)

    def _actor(self, layer: str, tenant: str) -> Any:
        return self.router.handle(layer, tenant)

    # -- writes ---------------------------------------------------------------

    async def record_turns(
        self, tenant: str, session_id: str, turns: Sequence[TurnIn], *, expected_version: int | None = None
    ) -> RecordTurnsResult:
        """Write turns to episodic memory (durable, embedded) and to the session's working memory."""
        validate_id(session_id, field="session_id")
        dicts = [t.model_dump() for t in turns]
        vectors = await self._embed([turn_text(d) for d in dicts])
        episodic = await _call(
            self._actor("episodic", tenant).record_turns.remote(
                tenant, session_id, dicts, vectors=vectors, expected_version=expected_version
            )
        )
        # Working memory follows the episodic write: the turn is durable first.
        # If working memory fails now, the turn stays recorded (a retry would
        # record it twice); the result says what is missing instead.
        items = []
        for d, out in zip(dicts, episodic["turns"]):
            for role, text in (("user", d["user"]), ("assistant", d["agent"])):
                if text and text.strip():
                    items.append({"role": role, "content": text, "created_at": out["timestamp"]})
        versions = {"episodic": episodic["version"]}
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
        )

    async def add_working_items(
        self, tenant: str, session_id: str, body: WorkingItemsIn, *, expected_version: int | None = None
    ) -> WorkingState:
        validate_id(session_id, field="session_id")
        state = await _call(
            self._actor("working", tenant).add_items.remote(
                tenant,
                session_id,
                [i.model_dump() for i in body.items],
                task=body.task,
                expected_version=expected_version,
            )
        )
        return WorkingState(**state)

    async def forget_session(self, tenant: str, session_id: str) -> ForgetResult:
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
        return ForgetResult(session_id=session_id, removed=removed, versions=versions)

    async def index_document(
        self, tenant: str, body: DocumentIn, *, expected_version: int | None = None, wait: bool = True
    ) -> DocumentOut:
        """Index or re-index a document (atomically: searches see one version)."""
        out = await _call(
            self._actor("semantic", tenant).index_document.remote(
                tenant, body.model_dump(), expected_version=expected_version, wait=wait
            )
        )
        return DocumentOut(**out)

    async def delete_document(self, tenant: str, doc_id: str, *, expected_version: int | None = None) -> DocumentDeleted:
        validate_id(doc_id, field="doc_id")
        out = await _call(
            self._actor("semantic", tenant).delete_document.remote(tenant, doc_id, expected_version=expected_version)
        )
        return DocumentDeleted(**out)

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

    async def build_context(self, tenant: str, req: ContextRequest) -> ContextResult:
        """Working memory always; the task type's other layers concurrently; fitted to the budget."""
        policies = self.settings.context.policies
        if req.task_type not in policies:
            raise InvalidInput(
                f"unknown task_type {req.task_type!r}; configured: {', '.join(sorted(policies))}",
                field="task_type",
            )
        max_tokens = req.max_tokens or self.settings.context.default_max_tokens
        top_k = req.top_k or self.settings.context.default_top_k
        reference = req.reference_time or datetime.now(timezone.utc)
        # A time expression read off the message is a preference, not a filter,
        # and its words stay in the query: a date is often content.
        time_range = resolve_time_range(req.message, reference)
        query = req.message
        wanted = [layer for layer in policies[req.task_type] if layer != "working"]
        missing = {layer: "not available in this version of Strata" for layer in wanted if layer not in AVAILABLE_LAYERS}
        fetch = [layer for layer in wanted if layer in AVAILABLE_LAYERS]
        working_budget = int(max_tokens * (self.settings.context.working_share if fetch else 1.0))

        # The query is embedded once, and only if a layer needs it; every layer gets the vector.
        vector_task = asyncio.ensure_future(self._embed([query])) if fetch else None

        async def layer_hits(layer: str) -> tuple[list[ContextItem], int | None]:
            assert vector_task is not None
            vector = (await vector_task)[0]
            if layer == "semantic":
                found = await self._semantic_search(tenant, vector, query, top_k=top_k)
                return [ContextItem(**h) for h in found["hits"]], None
            found = await self._episodic_search(
                tenant, vector, query, top_k=top_k, session_id=None,
                prefer=(time_range.start, time_range.end) if time_range else None,
            )
            return [ContextItem(**h) for h in found["hits"]], found["version"]

        tasks = [_call(self._actor("working", tenant).get.remote(tenant, req.session_id, budget_tokens=working_budget))]
        tasks += [layer_hits(layer) for layer in fetch]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        versions: dict[str, int] = {}
        messages: list[dict[str, str]] = []
        working_result = results[0]
        if isinstance(working_result, StrataError):
            missing["working"] = working_result.message
        elif isinstance(working_result, BaseException):
            raise working_result
        else:
            messages, versions["working"] = working_result["messages"], working_result["version"]
        layer_items: dict[str, list[ContextItem]] = {}
        for layer, result in zip(fetch, results[1:]):
            if isinstance(result, StrataError):
                missing[layer] = result.message
            elif isinstance(result, BaseException):
                raise result
            else:
                layer_items[layer], version = result
                if version is not None:
                    versions[layer] = version
        assembled = assemble_context(
            working_messages=messages,
            layer_items=layer_items,
            max_tokens=max_tokens,
            counter=self._counter,
            min_relative_score=self.settings.context.min_relative_score,
        )
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
        )

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

    async def search(self, tenant: str, req: SearchRequest) -> SearchResult:
        layers: list[Layer] = req.layers or list(AVAILABLE_LAYERS)
        missing: dict[str, str] = {layer: "not available in this version of Strata" for layer in layers if layer not in AVAILABLE_LAYERS}
        reference = req.reference_time or datetime.now(timezone.utc)
        # An explicit time_range filters; one read off the query only prefers (see build_context).
        parsed = None if req.time_range else resolve_time_range(req.query, reference)
        start = req.time_range.start if req.time_range else None
        end = req.time_range.end if req.time_range else None
        prefer = (parsed.start, parsed.end) if parsed else None
        query = req.query
        hits: list[SearchHit] = []
        versions: dict[str, int] = {}

        vector_task = (
            asyncio.ensure_future(self._embed([query])) if {"episodic", "semantic"} & set(layers) else None
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

        jobs = {"episodic": episodic, "working": working, "semantic": semantic}
        await asyncio.gather(*(jobs[layer]() for layer in layers if layer in jobs))
        hits.sort(key=lambda h: -h.score)
        time_range = _range_out(parsed) if parsed else (
            TimeRangeOut(start=start, end=end) if req.time_range else None
        )
        return SearchResult(hits=hits[: req.top_k], time_range=time_range, versions=versions, missing=missing)

    async def llm_usage(self) -> dict[str, int]:
        """LLM calls and tokens of every layer shard since it started, summed (all tenants)."""
        handles = [h for layer in AVAILABLE_LAYERS for h in self.router.all_handles(layer)]
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


def _range_out(time_range: Any) -> TimeRangeOut | None:
    if time_range is None:
        return None
    return TimeRangeOut(start=time_range.start, end=time_range.end, expression=time_range.expression)
