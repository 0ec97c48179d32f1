"""The in-cluster client: an agent inside the Ray cluster talks to the layer
actors directly, with the same method names and results as the HTTP clients.

It is bound to one tenant at construction and has no way to name another.
Queries are embedded in this process (the packaged model, ~10 ms each) so a
call costs no HTTP hop and no Serve hop. A read that meets a 503 (a layer actor
restarting) or a 429 is tried again as :class:`~strata.retry.Retry` says; a write
is not: nothing here tells a retry from a second write, as an Idempotency-Key does
over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, Self, TypeVar

import numpy as np

from strata.config import StrataSettings
from strata.counting import count_tokens, process_counter
from strata.errors import StrataError
from strata.ids import validate_id
from strata.layers import LAYERS
from strata.providers.batching import EmbedBatcher
from strata.providers.embedder import embed_counted, make_embedder
from strata.providers.llm import LLMUsage
from strata.retry import Attempts, Retry
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
    InteractionIn,
    InteractionResult,
    Layer,
    OutcomeIn,
    RecordTurnsResult,
    RetrievalPath,
    SearchRequest,
    SearchResult,
    SessionList,
    SessionTurns,
    SkillDeleted,
    SkillExtractIn,
    SkillHistory,
    SkillJobOut,
    SkillList,
    SkillOut,
    SkillPatch,
    SkillVersionOut,
    TimeRangeIn,
    TraceStepIn,
    TurnIn,
    WorkingItemIn,
    WorkingItemsIn,
    WorkingState,
)
from strata.schema.export import ExportEnd, ExportItem, export_lines
from strata.store.layout import open_store
from strata_actors.orchestration import Orchestration

__all__ = ["InClusterClient"]

_T = TypeVar("_T")
#: Who changed a skill, in its history, when the change came through this client.
_BY = "in-cluster"


class InClusterClient:
    """Async methods (``await client.build_context(...)``); ``client.sync.<method>`` blocks.

    Args:
        retry: when a read that met a 429 or a 503 is tried again.
    """

    def __init__(
        self,
        tenant: str,
        settings: StrataSettings,
        *,
        retry: Retry = Retry(),  # noqa: B008 (frozen: one shared default is safe)
    ) -> None:
        self._tenant = validate_id(tenant, field="tenant")
        self._retry = retry
        self._embedder = make_embedder(settings.embedding)
        self._queries = EmbedBatcher(functools.partial(embed_counted, self._embedder, query=True))
        self._flow = Orchestration(settings, embed=self._embed, embed_query=self._embed_query)
        self.sync = _Sync(self)

    @classmethod
    def for_running_stack(
        cls,
        tenant: str,
        *,
        data_dir: str = ".strata",
        retry: Retry = Retry(),  # noqa: B008 (frozen: one shared default is safe)
    ) -> InClusterClient:
        """Attach to the stack ``strata up`` started with ``data_dir`` (same settings, same actors)."""
        import json
        from pathlib import Path

        import ray

        recorded = json.loads((Path(data_dir) / "stack.json").read_text())
        settings = StrataSettings.from_dict(recorded["settings"])
        if not ray.is_initialized():
            from strata_actors.ray_auth import use_ray_auth

            use_ray_auth(recorded.get("ray_auth", {}))
            ray.init(address=recorded["ray_address"], namespace=settings.ray.namespace, logging_level=logging.ERROR)
        return cls(tenant, settings, retry=retry)

    async def aclose(self) -> None:
        """Write the audit entries of this client's changes still queued (an exiting interpreter
        does it too, while the store is up), and the tokens it embedded (the process's usage
        counts). ``async with`` the client calls it on leaving."""
        await self._flow.aclose()
        counter = process_counter()
        if counter.pending():
            with contextlib.suppress(StrataError):  # counts are not worth failing a close for
                store, names = await asyncio.to_thread(open_store, self._flow.settings)
                await asyncio.to_thread(counter.flush, store, names.state)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def close(self) -> None:
        """:meth:`aclose`, blocking, for code without an event loop (``with`` the client calls it)."""
        _run(self.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def _read(self, read: Callable[[], Awaitable[_T]]) -> _T:
        """``read()``, and again after a 429 or a 503 as the retry policy says."""
        attempts = Attempts(self._retry, retriable=True)
        while True:
            try:
                return await read()
            except StrataError as exc:
                delay_s = attempts.wait_s(exc)
                if delay_s is None:
                    raise
            await asyncio.sleep(delay_s)

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors, tokens = await asyncio.to_thread(embed_counted, self._embedder, list(texts))
        count_tokens("embedding", sum(tokens), tenant=self._tenant)
        return vectors

    async def _embed_query(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return await asyncio.to_thread(self._embedder.embed_query, [])
        # Concurrent queries share model calls (a query and its speakerless twin among them).
        rows = await asyncio.gather(*(self._queries.embed_counted(text) for text in texts))
        count_tokens("embedding", sum(n for _, n in rows), tenant=self._tenant)
        return np.stack([vector for vector, _ in rows])

    async def record_turn(
        self, session_id: str, user: str | None = None, agent: str | None = None, *,
        timestamp: datetime | None = None, turn_id: str | None = None, speaker: str | None = None,
        metadata: dict[str, Any] | None = None, expected_version: int | None = None,
    ) -> RecordTurnsResult:
        turn = TurnIn(
            user=user, agent=agent, timestamp=timestamp, turn_id=turn_id, speaker=speaker, metadata=metadata or {}
        )
        return await self._flow.record_turns(
            self._tenant, session_id, [turn], expected_version=expected_version, by=_BY
        )

    async def record_turns(self, session_id: str, turns: Sequence[TurnIn | dict[str, Any]], *,
                           expected_version: int | None = None) -> RecordTurnsResult:
        parsed = [t if isinstance(t, TurnIn) else TurnIn(**t) for t in turns]
        return await self._flow.record_turns(
            self._tenant, session_id, parsed, expected_version=expected_version, by=_BY
        )

    async def build_context(self, message: str, session_id: str, *, task_type: str = "general",
                            max_tokens: int | None = None, reference_time: datetime | None = None,
                            top_k: int | None = None, layers: list[Layer] | None = None) -> ContextResult:
        req = ContextRequest(message=message, session_id=session_id, task_type=task_type, max_tokens=max_tokens,
                             reference_time=reference_time, top_k=top_k, layers=layers)
        return await self._read(lambda: self._flow.build_context(self._tenant, req))

    async def search(self, query: str, *, layers: list[Layer] | None = None, top_k: int = 10,
                     session_id: str | None = None, start: datetime | None = None, end: datetime | None = None,
                     reference_time: datetime | None = None, weights: dict[RetrievalPath, float] | None = None,
                     min_cosine: float | None = None, doc_ids: list[str] | None = None) -> SearchResult:
        time_range = TimeRangeIn(start=start, end=end) if (start or end) else None
        req = SearchRequest(query=query, layers=layers, top_k=top_k, session_id=session_id,
                            time_range=time_range, reference_time=reference_time, weights=weights,
                            min_cosine=min_cosine, doc_ids=doc_ids)
        return await self._read(lambda: self._flow.search(self._tenant, req))

    async def get_working(self, session_id: str) -> WorkingState:
        return await self._read(lambda: self._flow.working(self._tenant, session_id))

    async def list_sessions(self, *, after: str | None = None, limit: int = 50) -> SessionList:
        return await self._read(lambda: self._flow.list_sessions(self._tenant, after=after, limit=limit))

    async def list_turns(
        self, session_id: str, *, after: str | None = None, limit: int = 50, newest_first: bool = False
    ) -> SessionTurns:
        return await self._read(lambda: self._flow.list_turns(
            self._tenant, session_id, after=after, limit=limit, newest_first=newest_first
        ))

    async def add_working_items(self, session_id: str, items: Sequence[WorkingItemIn | dict[str, Any]], *,
                                task: str | None = None, expected_version: int | None = None) -> WorkingState:
        parsed = [i if isinstance(i, WorkingItemIn) else WorkingItemIn(**i) for i in items]
        body = WorkingItemsIn(items=parsed, task=task)
        return await self._flow.add_working_items(self._tenant, session_id, body, expected_version=expected_version,
                                                 by=_BY)

    async def forget_session(self, session_id: str) -> ForgetResult:
        return await self._flow.forget_session(self._tenant, session_id, by=_BY)

    async def forget_turn(self, session_id: str, turn_id: str) -> ForgetResult:
        return await self._flow.forget_turn(self._tenant, session_id, turn_id, by=_BY)

    async def index_document(self, text: str, *, doc_id: str | None = None, title: str | None = None,
                             metadata: dict[str, Any] | None = None, expected_version: int | None = None,
                             wait: bool = True, ttl_s: float | None = None) -> DocumentOut:
        body = DocumentIn(text=text, doc_id=doc_id, title=title, metadata=metadata or {}, ttl_s=ttl_s)
        return await self._flow.index_document(self._tenant, body, expected_version=expected_version, wait=wait, by=_BY)

    async def get_document(self, doc_id: str, *, include_text: bool = False) -> DocumentOut:
        return await self._read(lambda: self._flow.get_document(self._tenant, doc_id, include_text=include_text))

    async def list_documents(self, *, after: str | None = None, limit: int = 50) -> DocumentList:
        return await self._read(lambda: self._flow.list_documents(self._tenant, after=after, limit=limit))

    async def delete_document(self, doc_id: str, *, expected_version: int | None = None) -> DocumentDeleted:
        return await self._flow.delete_document(self._tenant, doc_id, expected_version=expected_version, by=_BY)

    async def entity(self, name: str) -> EntityOut:
        return EntityOut(**await self._read(lambda: self._flow.entity(self._tenant, name)))

    async def extract_skill(self, task: str, trace: Sequence[TraceStepIn | dict[str, Any] | str], *,
                            outcome: str | None = None, ttl_s: float | None = None) -> SkillOut:
        body = SkillExtractIn(task=task, trace=list(trace), outcome=outcome, ttl_s=ttl_s)  # type: ignore[arg-type]
        return await self._flow.extract_skill(self._tenant, body, by=_BY)

    async def find_skills(self, task: str | None = None, *, top_k: int = 5, min_success_rate: float | None = None,
                          after: str | None = None, limit: int = 50) -> SkillList:
        return await self._read(lambda: self._flow.find_skills(
            self._tenant, task=task, top_k=top_k, min_success_rate=min_success_rate, after=after, limit=limit
        ))

    async def get_skill(self, skill_id: str) -> SkillOut:
        return await self._read(lambda: self._flow.get_skill(self._tenant, skill_id))

    async def record_outcome(self, skill_id: str, success: bool, *, notes: str | None = None,
                             expected_version: int | None = None) -> SkillOut:
        return await self._flow.record_outcome(self._tenant, skill_id, OutcomeIn(success=success, notes=notes),
                                               expected_version=expected_version, by=_BY)

    async def update_skill(self, skill_id: str, changes: SkillPatch | dict[str, Any], *,
                           expected_version: int) -> SkillOut:
        body = changes if isinstance(changes, SkillPatch) else SkillPatch(**changes)
        return await self._flow.update_skill(self._tenant, skill_id, body, expected_version=expected_version, by=_BY)

    async def delete_skill(self, skill_id: str, *, expected_version: int | None = None) -> SkillDeleted:
        return await self._flow.delete_skill(self._tenant, skill_id, expected_version=expected_version, by=_BY)

    async def skill_history(self, skill_id: str) -> SkillHistory:
        return await self._read(lambda: self._flow.skill_history(self._tenant, skill_id))

    async def import_skill(self, skill: SkillOut, history: Sequence[SkillVersionOut]) -> tuple[SkillOut, bool]:
        """Write a skill as ``strata export`` read it, keeping its id, counts, times and history
        (``strata restore``; in-cluster only); and whether it was written (False: already here)."""
        return await self._flow.import_skill(self._tenant, skill, list(history), by=_BY)

    async def skill_job(self, job_id: str) -> SkillJobOut:
        return await self._read(lambda: self._flow.skill_job(self._tenant, job_id))

    async def post_interaction(self, interaction: InteractionIn | dict[str, Any]) -> InteractionResult:
        body = interaction if isinstance(interaction, InteractionIn) else InteractionIn(**interaction)
        return await self._flow.post_interaction(self._tenant, body, by=_BY)

    async def audit(self, *, since: datetime | None = None, after: str | None = None, limit: int = 100) -> AuditHistory:
        return await self._read(lambda: self._flow.audit(self._tenant, since=since, after=after, limit=limit))

    async def export(self, *, layers: Sequence[Layer] | None = None) -> AsyncIterator[ExportItem]:
        """The tenant's export, one parsed line at a time (the header, each record, the end line),
        read a page at a time from the layers: the HTTP clients' ``export()`` without a key's
        limits (every layer by default)."""
        header = self._flow.export_header(self._tenant, layers or LAYERS)
        yield header
        count = 0
        async for record in self._flow.export_records(self._tenant, header.layers):
            count += 1
            yield record
        yield ExportEnd(records=count)

    def export_lines(self, layers: Sequence[Layer] = LAYERS) -> AsyncIterator[str]:
        """The tenant's export (:mod:`strata.schema.export`), a line at a time, read a page at a
        time from the layers: ``GET /v1/export`` without a key's limits (every layer by default)."""
        header = self._flow.export_header(self._tenant, layers)
        return export_lines(header, self._flow.export_records(self._tenant, header.layers))

    # -- in-cluster only: operating and evaluating -----------------------------

    async def llm_usage(self) -> LLMUsage:
        """LLM calls and tokens of all layer actors since they started (every tenant's)."""
        return await self._flow.llm_usage()

    async def wait_for_summaries(self) -> int:
        """Wait until this tenant's background summaries are made; returns chunks still pending."""
        return await self._flow.wait_for_summaries(self._tenant)

    async def wait_for_passages(self) -> int:
        """Wait until this tenant's long turns' passages are embedded (they are found by their
        words until then); returns the long turns still waiting."""
        return await self._flow.wait_for_passages(self._tenant)


class _Sync:
    """Blocking versions of the client's methods, for code without an event loop."""

    def __init__(self, client: InClusterClient) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return _run(method(*args, **kwargs))

        return call


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(coro)
