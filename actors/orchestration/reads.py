"""Reads of one record or state (a document, an entity, a session's working memory), pages of
records (documents, sessions, a session's turns), and the calls that operate the stack:
health, LLM usage, waiting for background summaries."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from strata.errors import InvalidInput
from strata.ids import validate_id
from strata.providers.llm import LLMUsage
from strata.schema import LAYERS, DocumentList, DocumentOut, WorkingState
from strata.schema.outputs import SessionList, SessionTurns
from strata_actors.errors import unwrap
from strata_actors.orchestration.base import FlowBase

__all__ = ["ReadFlow"]


def _check_page(after: str | None, limit: int) -> None:
    if after is not None:
        validate_id(after, field="after")
    if not 1 <= limit <= 1000:
        raise InvalidInput(f"limit must be between 1 and 1000, got {limit}", field="limit")


class ReadFlow(FlowBase):
    """Documents, entities and working memory read back; the stack's health and LLM usage."""

    async def get_document(self, tenant: str, doc_id: str, *, include_text: bool = False) -> DocumentOut:
        validate_id(doc_id, field="doc_id")
        return await self.router.semantic(tenant).get_document(tenant, doc_id, with_text=include_text)

    async def list_documents(self, tenant: str, *, after: str | None = None, limit: int = 50) -> DocumentList:
        _check_page(after, limit)
        return await self.router.semantic(tenant).list_documents(tenant, after=after, limit=limit)

    async def list_sessions(self, tenant: str, *, after: str | None = None, limit: int = 50) -> SessionList:
        """The tenant's sessions that have turns, by id (``after``: the last id of the previous page)."""
        _check_page(after, limit)
        return await self.router.episodic(tenant).list_sessions(tenant, after=after, limit=limit)

    async def list_turns(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 50, newest_first: bool = False
    ) -> SessionTurns:
        """The session's turns in time order, or newest first (``after``: the last turn_id of the
        previous page)."""
        validate_id(session_id, field="session_id")
        _check_page(after, limit)
        return await self.router.episodic(tenant).list_turns(
            tenant, session_id, after=after, limit=limit, newest_first=newest_first
        )

    async def entity(self, tenant: str, name: str) -> dict[str, Any]:
        """What the semantic layer's knowledge graph knows of an entity."""
        if not name.strip() or len(name) > 200:
            raise InvalidInput("give an entity name of 1 to 200 characters", field="name")
        return await self.router.semantic(tenant).entity(tenant, name)

    async def working(self, tenant: str, session_id: str) -> WorkingState:
        validate_id(session_id, field="session_id")
        return WorkingState.model_validate(await self.router.working(tenant).get(tenant, session_id))

    # -- operating the stack ------------------------------------------------------

    async def llm_usage(self) -> LLMUsage:
        """LLM calls and tokens of every layer shard since it started, summed (all tenants)."""
        await self.router.refresh()  # every shard of the layers as scaled now
        usages = await asyncio.gather(*(shard.llm_usage() for shard in self.router.layer_shards()))
        return LLMUsage(**{
            field.name: sum(getattr(usage, field.name) for usage in usages) for field in dataclasses.fields(LLMUsage)
        })

    async def wait_for_summaries(self, tenant: str) -> int:
        """Wait until the tenant's background summaries are made; returns chunks still pending."""
        return await self.router.episodic(tenant).wait_for_summaries(tenant)

    async def wait_for_passages(self, tenant: str) -> int:
        """Wait until the tenant's long turns' passages are embedded; returns the turns still waiting."""
        return await self.router.episodic(tenant).wait_for_passages(tenant)

    async def health(self) -> dict[str, Any]:
        """Ping every shard of every layer; the store's answer comes through them."""
        layers: dict[str, str] = {}
        milvus = "ok"
        try:
            await asyncio.wait_for(self.router.refresh(), timeout=10)  # every shard as scaled now
        except BaseException as exc:
            err = unwrap(exc)
            return {"layers": dict.fromkeys(LAYERS, getattr(err, "message", None) or type(err).__name__),
                    "milvus": "unknown"}
        for layer in LAYERS:
            shards = self.router.layer_shards(layer)
            try:
                await asyncio.wait_for(asyncio.gather(*(shard.ping() for shard in shards)), timeout=10)
                layers[layer] = "ok"
            except BaseException as exc:
                err = unwrap(exc)
                layers[layer] = getattr(err, "message", None) or f"{type(err).__name__}"
                milvus = layers[layer] if "Milvus" in layers[layer] else milvus
        return {"layers": layers, "milvus": milvus}
