"""What every part of a request's work shares: the settings, the router to the layers' typed
handles, the query embedder, PII redaction, the LLM and the audit writer."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import ray
from pydantic import BaseModel

from strata.access.audit import AuditWriter
from strata.config import StrataSettings
from strata.episodic.ranking import dense_text
from strata.privacy.redaction import Redaction
from strata.providers.llm import LLM, make_llm
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.timeparse import TimeRange
from strata.schema import TimeRangeOut
from strata_actors.handles import EpisodicHits, FoundSkill, Hit
from strata_actors.meter import send_to_collector
from strata_actors.router import LayerRouter

__all__ = [
    "INLINE_CHARS",
    "SPEAKERS_IDLE_S",
    "SPEAKER_TENANTS_MAX",
    "Embed",
    "FlowBase",
    "over_text",
    "plain_trace",
    "range_out",
    "skill_hit",
]

_R = TypeVar("_R")

#: A query up to this long is redacted and read for time expressions on the event loop: that
#: costs at most ~0.45 ms there for text built to make the patterns work hard (0.9 ms at 512
#: characters; both linear), and about 0.1 ms for a usual question, less than the hop to a
#: worker thread and back that a longer one takes (~0.12 ms each, two per query).
INLINE_CHARS = 256

#: Tenants whose speaker labels a flow keeps, the least recently used dropped first.
SPEAKER_TENANTS_MAX = 4096
#: Labels no episodic search has confirmed for this long are dropped (at the next search of any
#: tenant): a tenant forgotten through another ingress leaves no name here for longer. A tenant
#: searched again after that embeds its query once more in the shard, as on its first search.
SPEAKERS_IDLE_S = 60.0

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
        if self._llm is not None and ray.is_initialized():
            send_to_collector(settings)
        #: PII goes before anything is written, and queries use the same policy.
        self._pii = Redaction(settings.pii)
        self._audit: AuditWriter | None = None
        #: Per tenant, the token and labels of its speakers, as episodic searches last told them,
        #: and when one last confirmed them (``time.monotonic``); the least recent first.
        self._speakers: OrderedDict[str, tuple[int, tuple[str, ...], float]] = OrderedDict()

    async def _query_texts(self, tenant: str, query: str) -> tuple[list[str], int]:
        """What to embed for a query that episodic memory will search: the query, then the text
        episodic memory's dense path embeds when it differs (the query without the tenant's
        speakers it names; ``EpisodicMemory.dense_query``); and the token of the speakers that
        text was made with (-1: none known yet). Both go into one model call: a query naming a
        speaker was embedded a second time in the episodic shard, after the first, ~3.5 ms on
        every such context. Speakers the shard has and this flow does not know yet only cost
        that as before: the shard checks the text and embeds the right one itself."""
        known = self._speakers.get(tenant)
        if known is None or known[2] < time.monotonic() - SPEAKERS_IDLE_S:
            return [query], -1
        token, names, _ = known
        dense = await over_text(lambda text: dense_text(text, names), query)
        return ([query] if dense == query else [query, dense]), token

    def _learn_speakers(self, tenant: str, found: EpisodicHits) -> None:
        """Keep the speakers an episodic search answered with (``speakers_seen``)."""
        speakers = found.get("speakers")
        if speakers is None:
            return
        now = time.monotonic()
        known = self._speakers.get(tenant)
        if speakers["names"] is not None:
            self._speakers[tenant] = (speakers["token"], tuple(speakers["names"]), now)
        elif known is None or known[0] != speakers["token"]:  # too many to send: the shard takes them out
            self._speakers[tenant] = (speakers["token"], (), now)
        else:  # the labels this flow sent the token of: confirmed
            self._speakers[tenant] = (*known[:2], now)
        self._speakers.move_to_end(tenant)
        while self._speakers and (
            len(self._speakers) > SPEAKER_TENANTS_MAX or next(iter(self._speakers.values()))[2] < now - SPEAKERS_IDLE_S
        ):
            self._speakers.popitem(last=False)


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
