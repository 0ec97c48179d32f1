"""The Serve deployments behind the HTTP API: embedding (batched) and orchestrator.

The orchestrator embeds each query once, in its own process by default
(``serve.query_embedding``), and batches of turns through the embedding
deployment, whose replicas batch concurrent requests with ``@serve.batch``;
it fans out to the layer actors with :class:`strata_actors.orchestration.Orchestration`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from ray import serve

from strata.config import StrataSettings
from strata.errors import StrataError
from strata.providers.embedder import Embedder, make_embedder
from strata.schema import (
    ContextRequest,
    DocumentIn,
    InteractionIn,
    OutcomeIn,
    SearchRequest,
    SkillExtractIn,
    SkillPatch,
    TurnIn,
    WorkingItemsIn,
)
from strata_actors.orchestration import Orchestration

__all__ = ["Embedding", "Orchestrator", "Refused"]


@serve.deployment(name="embedding", ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=256)
class Embedding:
    def __init__(self, settings: dict[str, Any]) -> None:
        config = StrataSettings.from_dict(settings)
        self._embedder: Embedder = make_embedder(config.embedding)
        # @serve.batch adds these setters at run time; its annotations type the plain coroutine.
        self._embed_batch.set_max_batch_size(config.serve.embedding_max_batch_size)  # type: ignore[attr-defined]
        self._embed_batch.set_batch_wait_timeout_s(  # type: ignore[attr-defined]
            config.serve.embedding_batch_wait_timeout_s
        )

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _embed_batch(self, texts: list[str]) -> list[np.ndarray]:
        vectors = await asyncio.to_thread(self._embedder.embed, texts)
        return list(vectors)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts: a single text (a query) joins a batch with other callers' texts;
        several (a batch of turns) are embedded together, sorted by length, so each
        batch pads to texts of like length instead of to whichever came in with them."""
        if len(texts) > 1:
            return await asyncio.to_thread(self._embedder.embed, list(texts))
        rows = await asyncio.gather(*(self._embed_batch(t) for t in texts))
        return np.stack(rows) if rows else np.zeros((0, self._embedder.dim), np.float32)


@dataclass(frozen=True)
class Refused:
    """A domain error (404, 409, 422 ...) sent back as a value: raised across Serve, each
    one would be logged as a failed request with its traceback, which under contention
    (many 409s) cost more than the requests themselves."""

    error: StrataError


_C = TypeVar("_C", bound=type)


def _refusals_as_values(cls: _C) -> _C:
    """Wrap every public coroutine method so a :class:`StrataError` is returned as :class:`Refused`."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.iscoroutinefunction(fn):
            continue

        def wrap(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            @functools.wraps(fn)
            async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(self, *args, **kwargs)
                except StrataError as exc:
                    return Refused(exc)

            return method

        setattr(cls, name, wrap(fn))
    return cls


@serve.deployment(name="orchestrator", ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=256)
@_refusals_as_values
class Orchestrator:
    def __init__(self, settings: dict[str, Any], embedding: Any) -> None:
        config = StrataSettings.from_dict(settings)
        self._embedding = embedding
        self._flow = Orchestration(config, embed=self._embed)
        # A query embedded here skips a hop whose Serve overhead costs more than the embedding.
        self._local: Embedder | None = None
        if config.serve.query_embedding == "orchestrator":
            self._local = make_embedder(config.embedding)

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._local is not None and len(texts) == 1:
            return await asyncio.to_thread(self._local.embed, list(texts))
        result: np.ndarray = await self._embedding.embed.remote(list(texts))
        return result

    async def record_turns(
        self, tenant: str, session_id: str, turns: list[TurnIn], expected_version: int | None = None, by: str = ""
    ) -> Any:
        return await self._flow.record_turns(tenant, session_id, turns, expected_version=expected_version, by=by)

    async def build_context(self, tenant: str, req: ContextRequest, session_only: bool = False) -> Any:
        return await self._flow.build_context(tenant, req, session_only=session_only)

    async def search(self, tenant: str, req: SearchRequest) -> Any:
        return await self._flow.search(tenant, req)

    async def working(self, tenant: str, session_id: str) -> Any:
        return await self._flow.working(tenant, session_id)

    async def add_working_items(
        self, tenant: str, session_id: str, body: WorkingItemsIn, expected_version: int | None = None, by: str = ""
    ) -> Any:
        return await self._flow.add_working_items(tenant, session_id, body, expected_version=expected_version, by=by)

    async def forget_session(self, tenant: str, session_id: str, by: str = "") -> Any:
        return await self._flow.forget_session(tenant, session_id, by=by)

    async def index_document(
        self, tenant: str, body: DocumentIn, expected_version: int | None = None, wait: bool = True, by: str = ""
    ) -> Any:
        return await self._flow.index_document(tenant, body, expected_version=expected_version, wait=wait, by=by)

    async def get_document(self, tenant: str, doc_id: str, include_text: bool = False) -> Any:
        return await self._flow.get_document(tenant, doc_id, include_text=include_text)

    async def list_documents(self, tenant: str, after: str | None = None, limit: int = 50) -> Any:
        return await self._flow.list_documents(tenant, after=after, limit=limit)

    async def delete_document(
        self, tenant: str, doc_id: str, expected_version: int | None = None, by: str = ""
    ) -> Any:
        return await self._flow.delete_document(tenant, doc_id, expected_version=expected_version, by=by)

    async def entity(self, tenant: str, name: str) -> Any:
        return await self._flow.entity(tenant, name)

    async def extract_skill(self, tenant: str, body: SkillExtractIn, by: str = "") -> Any:
        return await self._flow.extract_skill(tenant, body, by=by)

    async def find_skills(self, tenant: str, **query: Any) -> Any:
        return await self._flow.find_skills(tenant, **query)

    async def get_skill(self, tenant: str, skill_id: str) -> Any:
        return await self._flow.get_skill(tenant, skill_id)

    async def record_outcome(
        self, tenant: str, skill_id: str, body: OutcomeIn, expected_version: int | None = None, by: str = ""
    ) -> Any:
        return await self._flow.record_outcome(tenant, skill_id, body, expected_version=expected_version, by=by)

    async def update_skill(
        self, tenant: str, skill_id: str, body: SkillPatch, expected_version: int | None, by: str = ""
    ) -> Any:
        return await self._flow.update_skill(tenant, skill_id, body, expected_version=expected_version, by=by)

    async def delete_skill(
        self, tenant: str, skill_id: str, expected_version: int | None = None, by: str = ""
    ) -> Any:
        return await self._flow.delete_skill(tenant, skill_id, expected_version=expected_version, by=by)

    async def forget_tenant(self, tenant: str, by: str = "") -> Any:
        return await self._flow.forget_tenant(tenant, by=by)

    async def audit(self, tenant: str, since: Any = None, limit: int = 100) -> Any:
        return await self._flow.audit(tenant, since=since, limit=limit)

    async def skill_history(self, tenant: str, skill_id: str) -> Any:
        return await self._flow.skill_history(tenant, skill_id)

    async def skill_job(self, tenant: str, job_id: str) -> Any:
        return await self._flow.skill_job(tenant, job_id)

    async def post_interaction(self, tenant: str, body: InteractionIn, by: str = "") -> Any:
        return await self._flow.post_interaction(tenant, body, by=by)

    async def health(self) -> dict[str, Any]:
        return await self._flow.health()
