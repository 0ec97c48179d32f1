"""Building the context for the LLM: working memory always, the task type's other layers
concurrently (each under its deadline), fitted to the token budget; when it does not fit
and an LLM is configured, the layers' items are condensed by it instead."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Collection
from datetime import UTC, datetime
from typing import TypeVar, cast

from strata.config import LayerPolicy
from strata.context.assemble import LAYER_TITLES, AssembledContext, assemble_context, render_refined
from strata.context.refine import refine_items
from strata.counting import on_behalf_of
from strata.errors import InvalidInput, LLMError, StrataError
from strata.providers.llm import LLM, METER
from strata.retrieval.timeparse import question_time
from strata.schema import ContextItem, ContextRequest, ContextResult
from strata_actors.errors import unwrap
from strata_actors.handles import WorkingMessages
from strata_actors.orchestration.base import FlowBase, over_text, range_out, skill_hit

__all__ = ["ContextFlow"]

_T = TypeVar("_T")

#: Seconds kept before the request's deadline to answer with what the layers gave.
_ANSWER_MARGIN_S = 2.0


class ContextFlow(FlowBase):
    """``build_context``: the layers read at once and fitted to the budget, refined if need be."""

    async def build_context(
        self, tenant: str, req: ContextRequest, *, session_only: bool = False, layers: Collection[str] | None = None
    ) -> ContextResult:
        """Working memory always; the task type's other layers concurrently; fitted to the budget.

        A layer that fails or misses its deadline (``context.layer_timeouts``)
        is left out and named in ``missing``; the others still make the context.
        ``session_only``: episodic memory of this session only (a session-bound key).
        ``layers``: read no layer but these (and working memory): the ones the caller's key sees.
        """
        started = time.monotonic()
        ctx = self.settings.context
        if req.task_type not in ctx.policies and req.layers is None:
            raise InvalidInput(
                f"unknown task_type {req.task_type!r}; configured: {', '.join(sorted(ctx.policies))}",
                field="task_type",
            )
        policy: dict[str, LayerPolicy] = (
            {layer: LayerPolicy() for layer in req.layers} if req.layers is not None else ctx.policies[req.task_type]
        )
        if layers is not None:
            policy = {layer: p for layer, p in policy.items() if layer in layers or layer == "working"}
        max_tokens = req.max_tokens or ctx.default_max_tokens
        reference = req.reference_time or datetime.now(UTC)
        # A time expression read off the message is a preference, not a filter,
        # and its words stay in the query: a date is often content.
        # Off the event loop unless short: a query may be 16,000 characters of text built to make
        # a pattern work hard (~30 ms of time expressions).
        time_range = await over_text(lambda text: question_time(text, reference), req.message)
        query = await over_text(self._pii.for_tenant(tenant).text, req.message)
        missing: dict[str, str] = {}
        fetch = [layer for layer in policy if layer != "working"]
        working_budget = int(max_tokens * (ctx.working_share if fetch else 1.0))

        # The query is embedded once, and only if a layer needs it; every layer gets the vector,
        # episodic memory the one of its own text, embedded with it (FlowBase._query_texts).
        texts, speakers_seen = await self._query_texts(tenant, query) if "episodic" in fetch else ([query], None)
        with on_behalf_of(tenant):  # the task started here counts its tokens for the tenant
            vector_task = asyncio.ensure_future(self._embed_query(texts)) if fetch else None

        async def layer_hits(layer: str) -> tuple[list[ContextItem], int | None]:
            if vector_task is None:  # started whenever a layer is fetched
                raise RuntimeError("the query was not embedded")
            # Shielded: a layer cancelled at its deadline must not cancel the shared embedding.
            vectors = await asyncio.shield(vector_task)
            vector = vectors[0]
            top_k = req.top_k or policy[layer].top_k or ctx.default_top_k
            if layer == "semantic":
                passages = await self.router.semantic(tenant).search(tenant, query=query, vector=vector, top_k=top_k)
                return [ContextItem.model_validate(h) for h in passages], None
            if layer == "procedural":
                skills = await self.router.procedural(tenant).search(tenant, query=query, vector=vector, top_k=top_k)
                return [ContextItem.model_validate(skill_hit(s)) for s in skills], None
            found = await self.router.episodic(tenant).search(
                tenant,
                query=query,
                vector=vectors[-1],
                top_k=top_k,
                session_id=req.session_id if session_only else None,
                prefer=(time_range.start, time_range.end) if time_range else None,
                dense_text=texts[-1],
                speakers_seen=speakers_seen,
            )
            self._learn_speakers(tenant, found)
            return [ContextItem.model_validate(h) for h in found["hits"]], found["version"]

        async def working() -> WorkingMessages:
            return await self.router.working(tenant).messages(tenant, req.session_id, budget_tokens=working_budget)

        names = ["working", *fetch]
        tasks = [working(), *(layer_hits(layer) for layer in fetch)]
        results = await asyncio.gather(
            *(_deadline(task, ctx.timeout_for(name)) for name, task in zip(names, tasks, strict=True)),
            return_exceptions=True,
        )
        versions: dict[str, int] = {}
        messages: list[dict[str, str]] = []
        layer_items: dict[str, list[ContextItem]] = {}
        for layer, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # cancellation, interpreter exit
                missing[layer] = _failure(result)
            elif layer == "working":
                state = cast(WorkingMessages, result)
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
            min_relevance=ctx.min_relevance,
            layer_weights=weights,
        )
        refined, refine_error = False, None
        if assembled.cut and self._llm is not None and ctx.refine_with_llm:
            with on_behalf_of(tenant):
                candidate, refine_error = await self._refine(self._llm, req.message, assembled, max_tokens, started)
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
            time_range=range_out(time_range),
            missing=missing,
            budgets=assembled.budgets,
            refined=refined,
            refine_error=refine_error,
        )

    async def _refine(
        self, llm: LLM, message: str, assembled: AssembledContext, max_tokens: int, started: float
    ) -> tuple[AssembledContext | None, str | None]:
        """Condense every candidate item with ``llm`` into what the budget holds; on any
        failure the context trimmed by score stands (and the reason is returned).

        The LLM has ``llm.request_timeout_s`` at most, and never more than the request has
        left before its deadline (``serve.request_timeout_s`` from ``started``, less a margin
        to answer): a slow model costs the caller that long, not a 504."""
        narrowed = {(i.layer, i.id) for i in assembled.narrowed}
        items = [
            i
            for sec in assembled.sections
            if sec.layer != "working"
            for i in sec.items
            if (i.layer, i.id) not in narrowed
        ]
        items += assembled.narrowed + assembled.dropped  # whole, as the layers returned them
        working_tokens = sum(sec.tokens for sec in assembled.sections if sec.layer == "working")
        budget = max_tokens - working_tokens - self._counter.count(LAYER_TITLES["refined"]) - 8
        if budget < 32:
            return None, "the budget left after working memory is too small to condense into"
        now = time.monotonic()
        deadline = min(
            now + self.settings.llm.request_timeout_s,
            started + self.settings.serve.request_timeout_s - _ANSWER_MARGIN_S,
        )
        if deadline - now < 1.0:
            METER.result("refine", "no_time")
            return None, "no time was left before the request's deadline to condense: trimmed by score instead"
        try:
            text = await asyncio.wait_for(
                asyncio.to_thread(
                    refine_items, llm, message=message, items=items, budget_tokens=budget, counter=self._counter,
                    deadline=deadline,
                ),
                # The call is bounded by its own timeout; this is the backstop for a thread that is not.
                timeout=deadline - now + 1.0,
            )
        except TimeoutError:  # the thread goes on to its own bound and counts its result itself
            return None, "LLM refinement failed (timed out): trimmed by score instead"
        except LLMError as exc:
            return None, f"LLM refinement failed ({_failure(exc)}): trimmed by score instead"
        refined = render_refined(
            working_messages=assembled.messages, refined_text=text, max_tokens=max_tokens, counter=self._counter
        )
        if refined is None:
            return None, "the condensed text did not fit: trimmed by score instead"
        return refined, None


async def _deadline(task: Awaitable[_T], timeout_s: float) -> _T:
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
