"""The typed values that cross Strata's boundaries: HTTP bodies, client results.

The FastAPI app, the HTTP clients and the in-cluster client all speak these
models, so a result looks the same whichever way an agent calls. Scores are
"higher is more relevant"; cosine similarities lie in [-1, 1].
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "TurnIn",
    "TurnBatchIn",
    "TurnOut",
    "RecordTurnsResult",
    "TimeRangeIn",
    "TimeRangeOut",
    "ContextRequest",
    "ContextItem",
    "ContextSection",
    "ContextResult",
    "SearchRequest",
    "SearchHit",
    "SearchResult",
    "WorkingItemIn",
    "WorkingItemsIn",
    "WorkingItemOut",
    "WorkingState",
    "ForgetResult",
    "Health",
    "LAYERS",
    "Layer",
]

Layer = Literal["working", "episodic", "semantic", "procedural"]
LAYERS: tuple[Layer, ...] = ("working", "episodic", "semantic", "procedural")
_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


_METADATA_BYTES_MAX = 8192


def _small_json(value: dict[str, Any]) -> dict[str, Any]:
    import json

    if len(json.dumps(value, ensure_ascii=False).encode()) > _METADATA_BYTES_MAX:
        raise ValueError(f"metadata is limited to {_METADATA_BYTES_MAX} bytes of JSON")
    return value


def _aware(value: datetime | None) -> datetime | None:
    from datetime import timezone

    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


class TurnIn(_In):
    """One exchange: what the user said, what the agent answered (either may be absent)."""

    user: str | None = Field(default=None, max_length=16000)
    agent: str | None = Field(default=None, max_length=16000)
    timestamp: datetime | None = Field(default=None, description="When it was said; default now. Naive = UTC.")
    turn_id: str | None = Field(default=None, pattern=_ID, description="Caller-given id, unique in the session")
    speaker: str | None = Field(default=None, max_length=64, description="Label of the user side, e.g. a name")
    metadata: dict[str, Any] = Field(default_factory=dict)

    _tz = field_validator("timestamp")(classmethod(lambda cls, v: _aware(v)))
    _meta = field_validator("metadata")(classmethod(lambda cls, v: _small_json(v)))

    @model_validator(mode="after")
    def _not_empty(self) -> TurnIn:
        if not (self.user or "").strip() and not (self.agent or "").strip():
            raise ValueError("give user or agent text (both are empty)")
        return self


class TurnBatchIn(_In):
    turns: list[TurnIn] = Field(min_length=1, max_length=1000)


class TurnOut(_Out):
    session_id: str
    turn_id: str
    timestamp: datetime


class RecordTurnsResult(_Out):
    session_id: str
    turns: list[TurnOut]
    versions: dict[str, int]
    missing: dict[str, str] = Field(
        default_factory=dict, description="Layers the turns did not reach, and why; the turns are recorded"
    )


class TimeRangeIn(_In):
    start: datetime | None = None
    end: datetime | None = None

    _tz = field_validator("start", "end")(classmethod(lambda cls, v: _aware(v)))

    @model_validator(mode="after")
    def _ordered(self) -> TimeRangeIn:
        if self.start and self.end and self.start >= self.end:
            raise ValueError("time_range.start must be before time_range.end")
        return self


class TimeRangeOut(_Out):
    start: datetime | None
    end: datetime | None
    expression: str | None = None


class ContextRequest(_In):
    message: str = Field(min_length=1, max_length=16000)
    session_id: str = Field(pattern=_ID)
    task_type: str = Field(default="general", pattern=r"^[a-z][a-z0-9_\-]{0,31}$")
    max_tokens: int | None = Field(default=None, ge=64, le=200_000)
    reference_time: datetime | None = None
    top_k: int | None = Field(default=None, ge=1, le=100)

    _tz = field_validator("reference_time")(classmethod(lambda cls, v: _aware(v)))


class SearchHit(_Out):
    layer: str
    kind: str
    id: str
    text: str
    score: float
    timestamp: datetime | None = None
    session_id: str | None = None
    turn_ids: list[str] = Field(default_factory=list)
    ranks: dict[str, int] = Field(default_factory=dict, description="1-based rank on each path that found it")


class ContextItem(SearchHit):
    """A hit as placed in a context section (working items carry their role as ``kind``)."""


class ContextSection(_Out):
    layer: str
    items: list[ContextItem]
    tokens: int


class ContextResult(_Out):
    context: str
    messages: list[dict[str, str]] = Field(description="Working memory, OpenAI chat format")
    sections: list[ContextSection]
    token_count: int
    max_tokens: int
    task_type: str
    versions: dict[str, int]
    time_range: TimeRangeOut | None = None
    missing: dict[str, str] = Field(default_factory=dict, description="Layers left out, and why")


class SearchRequest(_In):
    query: str = Field(min_length=1, max_length=16000)
    layers: list[Layer] | None = None
    top_k: int = Field(default=10, ge=1, le=100)
    session_id: str | None = Field(default=None, pattern=_ID)
    time_range: TimeRangeIn | None = None
    reference_time: datetime | None = None

    _tz = field_validator("reference_time")(classmethod(lambda cls, v: _aware(v)))


class SearchResult(_Out):
    hits: list[SearchHit]
    time_range: TimeRangeOut | None = None
    versions: dict[str, int]
    missing: dict[str, str] = Field(default_factory=dict)


class WorkingItemIn(_In):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(min_length=1, max_length=16000)
    importance: float | None = Field(default=None, ge=0, le=1)
    created_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    _tz = field_validator("created_at")(classmethod(lambda cls, v: _aware(v)))
    _meta = field_validator("metadata")(classmethod(lambda cls, v: _small_json(v)))


class WorkingItemsIn(_In):
    items: list[WorkingItemIn] = Field(min_length=1, max_length=200)
    task: str | None = Field(default=None, max_length=2000, description="Active task; raises related items")


class WorkingItemOut(_Out):
    id: str
    role: str
    content: str
    importance: float
    tokens: int
    summarized: bool
    created_at: datetime
    reasons: list[str] = Field(default_factory=list)


class WorkingState(_Out):
    session_id: str
    version: int
    items: list[WorkingItemOut]
    messages: list[dict[str, str]]
    total_tokens: int
    max_tokens: int


class ForgetResult(_Out):
    session_id: str
    removed: dict[str, int]
    versions: dict[str, int]


class Health(_Out):
    status: Literal["ok", "degraded"]
    ray: str
    milvus: str
    layers: dict[str, str]
