"""What every part of a request's work shares: the settings, the layer actors' handles, the
query embedder, PII redaction, and the layer actors' search calls (context, search and the
skill lookup ask them the same way)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel

from strata.access.audit import AuditWriter
from strata.config import StrataSettings
from strata.privacy.redaction import Redaction
from strata.providers.llm import LLM, make_llm
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.timeparse import TimeRange
from strata.schema import RetrievalPath, TimeRangeOut
from strata_actors.errors import unwrap
from strata_actors.router import LayerRouter

__all__ = ["Embed", "FlowBase", "call", "plain_trace", "range_out", "skill_hit"]

#: Embeds texts into one row per text: the Serve embedding deployment, or a local embedder.
Embed = Callable[[Sequence[str]], Awaitable[np.ndarray]]


async def call(ref: Any) -> Any:
    """Await an actor call; a failure comes back as Strata's error (see :func:`unwrap`)."""
    try:
        return await ref
    except Exception as exc:  # noqa: BLE001  (Ray wraps the layer's error; unwrap re-raises it typed)
        raise unwrap(exc) from None


class FlowBase:
    """The state a request's work reads: settings, router, embedder, PII policy, LLM, audit log."""

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
        self._audit: AuditWriter | None = None

    def _actor(self, layer: str, tenant: str) -> Any:
        return self.router.handle(layer, tenant)

    # -- the layers' searches, as context, search and the skill lookup call them -----

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
        found: dict[str, Any] = await call(
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
        weights: dict[RetrievalPath, float] | None = None,
        min_cosine: float | None = None,
        doc_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        found: dict[str, Any] = await call(
            self._actor("semantic", tenant).search.remote(
                tenant, query=text, vector=vector, top_k=top_k, weights=weights, min_cosine=min_cosine, doc_ids=doc_ids
            )
        )
        return found

    async def _procedural_search(
        self, tenant: str, vector: np.ndarray | None, text: str, *, top_k: int, min_success_rate: float | None = None
    ) -> dict[str, Any]:
        found: dict[str, Any] = await call(
            self._actor("procedural", tenant).search.remote(
                tenant, query=text, vector=vector, top_k=top_k, min_success_rate=min_success_rate
            )
        )
        return found


def plain_trace(trace: Sequence[Any]) -> list[Any]:
    """A skill trace as the procedural actor takes it: steps as dicts, strings as they are."""
    return [t.model_dump(exclude_defaults=True) if isinstance(t, BaseModel) else t for t in trace]


def skill_hit(skill: dict[str, Any]) -> dict[str, Any]:
    """A skill found by the procedural layer, in the fields of a search hit or context item."""
    return {
        "layer": "procedural",
        "kind": "skill",
        "id": skill["skill_id"],
        "text": skill["brief"],
        "score": skill["score"],
        "timestamp": skill.get("updated_at"),
    }


def range_out(time_range: TimeRange | None) -> TimeRangeOut | None:
    if time_range is None:
        return None
    return TimeRangeOut(start=time_range.start, end=time_range.end, expression=time_range.expression)
