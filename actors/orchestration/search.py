"""Search: scored hits across the layers a request names, best first.

Episodic, semantic and procedural memory answer with their own retrieval (one
query embedding shared by all three); working memory, which holds one session's
recent items and no index, is scored here by term overlap with the query.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from strata.counting import on_behalf_of
from strata.retrieval.terms import extract_terms
from strata.retrieval.timeparse import question_time
from strata.schema import LAYERS, Layer, SearchHit, SearchRequest, SearchResult, TimeRangeOut, WorkingItemOut
from strata_actors.orchestration.base import over_text, range_out, skill_hit
from strata_actors.orchestration.reads import ReadFlow

__all__ = ["SearchFlow", "working_hits"]


class SearchFlow(ReadFlow):
    """``search``: each named layer asked concurrently, the hits merged by score."""

    async def search(self, tenant: str, req: SearchRequest) -> SearchResult:
        # None is every layer (an in-process caller, no key); the API passes the layers it
        # authorized, and an empty list searches nothing: never read as "all".
        layers: list[Layer] = list(LAYERS) if req.layers is None else list(req.layers)
        missing: dict[str, str] = {}
        reference = req.reference_time or datetime.now(UTC)
        # An explicit time_range filters; one read off the query only prefers (see build_context).
        parsed = (
            None if req.time_range else await over_text(lambda text: question_time(text, reference), req.query)
        )
        start = req.time_range.start if req.time_range else None
        end = req.time_range.end if req.time_range else None
        prefer = (parsed.start, parsed.end) if parsed else None
        query = await over_text(self._pii.for_tenant(tenant).text, req.query)  # off the event loop unless short
        hits: list[SearchHit] = []
        versions: dict[str, int] = {}

        # Embedded once; episodic memory gets the vector of its own text (FlowBase._query_texts).
        texts, speakers_seen = await self._query_texts(tenant, query) if "episodic" in layers else ([query], None)
        with on_behalf_of(tenant):  # the task started here counts its tokens for the tenant
            vector_task = (
                asyncio.ensure_future(self._embed_query(texts))
                if {"episodic", "semantic", "procedural"} & set(layers)
                else None
            )

        async def query_vector(index: int) -> np.ndarray:
            if vector_task is None:  # started whenever one of these layers is asked for
                raise RuntimeError("the query was not embedded")
            vector: np.ndarray = (await vector_task)[index]
            return vector

        async def episodic() -> None:
            vector = await query_vector(-1)
            found = await self.router.episodic(tenant).search(
                tenant, query=query, vector=vector, top_k=req.top_k, session_id=req.session_id, start=start, end=end,
                prefer=prefer, dense_text=texts[-1], speakers_seen=speakers_seen,
            )
            self._learn_speakers(tenant, found)
            hits.extend(SearchHit.model_validate(h) for h in found["hits"])
            versions["episodic"] = found["version"]

        async def working() -> None:
            if req.session_id is None:
                missing["working"] = "working memory is per session: give session_id to search it"
                return
            state = await self.working(tenant, req.session_id)
            hits.extend(working_hits(state.items, query, start=start, end=end, session_id=req.session_id))
            versions["working"] = state.version

        async def semantic() -> None:
            vector = await query_vector(0)
            passages = await self.router.semantic(tenant).search(
                tenant, query=query, vector=vector, top_k=req.top_k, weights=req.weights, min_cosine=req.min_cosine,
                doc_ids=req.doc_ids,
            )
            hits.extend(SearchHit.model_validate(h) for h in passages)

        async def procedural() -> None:
            vector = await query_vector(0)
            skills = await self.router.procedural(tenant).search(tenant, query=query, vector=vector, top_k=req.top_k)
            hits.extend(SearchHit.model_validate(skill_hit(s)) for s in skills)

        jobs = {"episodic": episodic, "working": working, "semantic": semantic, "procedural": procedural}
        await asyncio.gather(*(jobs[layer]() for layer in layers))
        hits.sort(key=lambda h: -h.score)
        time_range = range_out(parsed) if parsed else (
            TimeRangeOut(start=start, end=end) if req.time_range else None
        )
        return SearchResult(hits=hits[: req.top_k], time_range=time_range, versions=versions, missing=missing)


def working_hits(
    items: Sequence[WorkingItemOut], query: str, *, start: datetime | None, end: datetime | None, session_id: str
) -> list[SearchHit]:
    """Working-memory items that share a term with ``query`` and fall in ``[start, end)``, scored
    by the share of the query's terms they contain."""
    wanted = extract_terms(query)
    hits: list[SearchHit] = []
    for item in items:
        overlap = len(wanted & extract_terms(item.content))
        if overlap and (start is None or item.created_at >= start) and (end is None or item.created_at < end):
            score = overlap / max(len(wanted), 1)
            hits.append(SearchHit(layer="working", kind=item.role, id=item.id, text=item.content, score=score,
                                  timestamp=item.created_at, session_id=session_id))
    return hits
