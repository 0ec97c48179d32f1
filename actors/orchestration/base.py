"""What every part of a request's work shares: the settings, the router to the layers' typed
handles, the query embedder, PII redaction, the LLM and the audit writer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from strata.access.audit import AuditWriter
from strata.config import StrataSettings
from strata.privacy.redaction import Redaction
from strata.providers.llm import LLM, make_llm
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.timeparse import TimeRange
from strata.schema import TimeRangeOut
from strata_actors.handles import FoundSkill, Hit
from strata_actors.router import LayerRouter

__all__ = ["INLINE_CHARS", "Embed", "FlowBase", "over_text", "plain_trace", "range_out", "skill_hit"]

_R = TypeVar("_R")

#: A query up to this long is redacted and read for time expressions on the event loop: that
#: costs at most ~0.45 ms there for text built to make the patterns work hard (0.9 ms at 512
#: characters; both linear), and about 0.1 ms for a usual question, less than the hop to a
#: worker thread and back that a longer one takes (~0.12 ms each, two per query).
INLINE_CHARS = 256

#: Embeds texts into one row per text: the Serve embedding deployment, or a local embedder.
#: A flow takes two: one for stored text (``Embedder.embed``), one for queries (``Embedder.embed_query``).
Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]


async def over_text(fn: Callable[[str], _R], text: str) -> _R:
    """``fn(text)``, on the event loop for a short text, in a worker thread for a long one
    (:data:`INLINE_CHARS`): what a query may cost the loop stays bounded."""
    if len(text) <= INLINE_CHARS:
        return fn(text)
    return await asyncio.to_thread(fn, text)


class FlowBase:
    """The state a request's work reads: settings, router, embedder, PII policy, LLM, audit log."""

    def __init__(
        self,
        settings: StrataSettings,
        *,
        embed: Embed,
        embed_query: Embed,
        router: LayerRouter | None = None,
        llm: LLM | None = None,
    ) -> None:
        self.settings = settings
        self.router = router or LayerRouter(settings)
        self._embed = embed
        self._embed_query = embed_query
        self._counter = TiktokenCounter(settings.working.encoding)
        #: Refines a context that does not fit (``context.refine_with_llm``).
        self._llm = llm if llm is not None else make_llm(settings.llm)
        #: PII goes before anything is written, and queries use the same policy.
        self._pii = Redaction(settings.pii)
        self._audit: AuditWriter | None = None


def plain_trace(trace: Sequence[Any]) -> list[Any]:
    """A skill trace as the procedural actor takes it: steps as dicts, strings as they are."""
    return [t.model_dump(exclude_defaults=True) if isinstance(t, BaseModel) else t for t in trace]


def skill_hit(skill: FoundSkill) -> Hit:
    """A skill found by the procedural layer, in the fields of a search hit or context item."""
    return {
        "layer": "procedural",
        "kind": "skill",
        "id": skill["skill_id"],
        "text": skill["brief"],
        "score": skill["score"],
        "relevance": skill["relevance"],
        "timestamp": skill.get("updated_at"),
    }


def range_out(time_range: TimeRange | None) -> TimeRangeOut | None:
    if time_range is None:
        return None
    return TimeRangeOut(start=time_range.start, end=time_range.end, expression=time_range.expression)
