"""The typed values that cross Strata's boundaries: HTTP bodies, client results.

The FastAPI app, the HTTP clients and the in-cluster client all speak these
models, so a result looks the same whichever way an agent calls. Scores are
"higher is more relevant"; cosine similarities lie in [-1, 1].
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from strata.config import TTL_MAX_S

__all__ = [
    "LAYERS",
    "AuditEntryOut",
    "AuditHistory",
    "ContextItem",
    "ContextRequest",
    "ContextResult",
    "ContextSection",
    "DocumentDeleted",
    "DocumentIn",
    "DocumentList",
    "DocumentOut",
    "EntityOut",
    "ForgetResult",
    "Health",
    "InteractionIn",
    "InteractionResult",
    "Layer",
    "MatchedSpan",
    "OutcomeIn",
    "RecordTurnsResult",
    "RetrievalPath",
    "SearchHit",
    "SearchRequest",
    "SearchResult",
    "SkillDeleted",
    "SkillExtractIn",
    "SkillHistory",
    "SkillJobOut",
    "SkillList",
    "SkillOut",
    "SkillPatch",
    "SkillVersionOut",
    "SourceRef",
    "TenantForgotten",
    "TimeRangeIn",
    "TimeRangeOut",
    "TraceStepIn",
    "TurnBatchIn",
    "TurnIn",
    "TurnOut",
    "WorkingItemIn",
    "WorkingItemOut",
    "WorkingItemsIn",
    "WorkingState",
]

Layer = Literal["working", "episodic", "semantic", "procedural"]
LAYERS: tuple[Layer, ...] = ("working", "episodic", "semantic", "procedural")
_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


_METADATA_BYTES_MAX = 8192


def _ttl() -> Any:
    return Field(
        default=None, gt=0, le=TTL_MAX_S,
        description="Seconds it lives; it may shorten the TTL configured for its layer and tenant, not lengthen it",
    )


def _expires() -> Any:
    return Field(default=None, description="When it expires and is purged; null: never")


_INT64 = 2**63


def _storable(value: Any, where: str = "metadata") -> None:
    """Raise unless ``value`` is JSON the stores keep as is: integers within 64 bits, finite floats."""
    import math

    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValueError(f"{where}: integers must fit in 64 bits (send a larger number as a string)")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: numbers must be finite")
    elif isinstance(value, dict):
        for item in value.values():
            _storable(item, where)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _storable(item, where)


def _small_json(value: dict[str, Any]) -> dict[str, Any]:
    import json

    _storable(value)
    if len(json.dumps(value, ensure_ascii=False).encode()) > _METADATA_BYTES_MAX:
        raise ValueError(f"metadata is limited to {_METADATA_BYTES_MAX} bytes of JSON")
    return value


def _aware(value: datetime | None) -> datetime | None:

    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


class TurnIn(_In):
    """One exchange: what the user said, what the agent answered (either may be absent)."""

    user: str | None = Field(default=None, max_length=16000)
    agent: str | None = Field(default=None, max_length=16000)
    timestamp: datetime | None = Field(default=None, description="When it was said; default now. Naive = UTC.")
    turn_id: str | None = Field(default=None, pattern=_ID, description="Caller-given id, unique in the session")
    speaker: str | None = Field(default=None, max_length=64, description="Label of the user side, e.g. a name")
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl_s: float | None = _ttl()

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
    expires_at: datetime | None = _expires()


class RecordTurnsResult(_Out):
    session_id: str
    turns: list[TurnOut]
    versions: dict[str, int]
    missing: dict[str, str] = Field(
        default_factory=dict, description="Layers the turns did not reach, and why; the turns are recorded"
    )
    redacted: dict[str, int] = Field(
        default_factory=dict, description="PII masked or hashed before anything was written, by type"
    )
    replayed: bool = Field(
        default=False,
        description="The turns were recorded already (a retry with the same turn ids and text): nothing new "
        "was written to episodic memory, and versions.episodic is its current version",
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
    layers: list[Layer] | None = Field(
        default=None, description="Read these layers instead of the task type's policy (working memory is always read)"
    )

    _tz = field_validator("reference_time")(classmethod(lambda cls, v: _aware(v)))


class SourceRef(_Out):
    doc_id: str
    title: str | None = None
    start: int = Field(description="Character offset of the passage in the document")
    end: int


class MatchedSpan(_Out):
    id: str
    start: int
    end: int
    score: float


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
    source: SourceRef | None = Field(default=None, description="Semantic passages: the document span it comes from")
    matched: list[MatchedSpan] = Field(
        default_factory=list, description="Semantic passages: the children that matched, best first"
    )


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
    budgets: dict[str, int] = Field(default_factory=dict, description="Tokens reserved for each layer's section")
    refined: bool = Field(default=False, description="The layers' items were condensed by the LLM to fit")
    refine_error: str | None = Field(default=None, description="Why LLM refinement was tried and not used")


RetrievalPath = Literal["dense", "lexical", "graph"]


class SearchRequest(_In):
    query: str = Field(min_length=1, max_length=16000)
    layers: list[Layer] | None = None
    top_k: int = Field(default=10, ge=1, le=100)
    session_id: str | None = Field(default=None, pattern=_ID)
    time_range: TimeRangeIn | None = None
    reference_time: datetime | None = None
    weights: dict[RetrievalPath, float] | None = Field(
        default=None,
        description="Semantic layer: fusion weight per path (dense = vector, lexical = BM25, graph); "
        'a path left out is not run, so {"dense": 1} is plain vector top-k',
    )
    min_cosine: float | None = Field(
        default=None, ge=-1, le=1, description="Semantic layer: children below this cosine are not ranked by the dense path"
    )
    doc_ids: list[str] | None = Field(default=None, max_length=100, description="Semantic layer: only these documents")

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is not None and (any(w < 0 for w in v.values()) or not any(w > 0 for w in v.values())):
            raise ValueError("weights must be >= 0 with at least one above 0")
        return v

    @field_validator("doc_ids")
    @classmethod
    def _doc_ids(cls, v: list[str] | None) -> list[str] | None:
        import re

        for doc_id in v or []:
            if not re.fullmatch(_ID, doc_id):
                raise ValueError(f"doc id {doc_id[:60]!r} is not a valid id")
        return v

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
    ttl_s: float | None = _ttl()

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
    expires_at: datetime | None = _expires()


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


_DOC_CHARS_MAX = 20_000_000


class DocumentIn(_In):
    """A document to index: plain text or Markdown."""

    text: str = Field(min_length=1, max_length=_DOC_CHARS_MAX)
    doc_id: str | None = Field(default=None, pattern=_ID, description="Default: a new id; an existing id re-indexes it")
    title: str | None = Field(default=None, max_length=500)
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl_s: float | None = _ttl()

    _meta = field_validator("metadata")(classmethod(lambda cls, v: _small_json(v)))

    @model_validator(mode="after")
    def _not_blank(self) -> DocumentIn:
        if not self.text.strip():
            raise ValueError("text is blank")
        return self


class DocumentProgress(_Out):
    stage: str
    children_done: int
    children_total: int


class DocumentOut(_Out):
    doc_id: str
    version: int
    status: Literal["indexing", "ready", "failed"]
    title: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    strategy: str | None = Field(default=None, description="The chunking strategy it was cut with")
    chars: int | None = None
    parents: int | None = None
    children: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    progress: DocumentProgress | None = Field(default=None, description="While indexing")
    error: str | None = Field(default=None, description="Why the last indexing failed")
    text: str | None = Field(default=None, description="With ?include_text=true")
    expires_at: datetime | None = _expires()


class DocumentList(_Out):
    documents: list[DocumentOut]
    total: int
    next_after: str | None = Field(description="Pass as ?after= for the next page; null on the last")


class DocumentDeleted(_Out):
    doc_id: str
    removed: int = Field(description="Durable rows removed (passages, chunks, the document row)")
    version: int


class EntityOut(_Out):
    key: str
    name: str
    type: str
    aliases: list[str] = Field(default_factory=list)
    relations: list[dict[str, Any]] = Field(default_factory=list)
    sources: int = Field(description="Passages that mention it")


class Health(_Out):
    status: Literal["ok", "degraded"]
    ray: str
    milvus: str
    layers: dict[str, str]


# -- procedural memory ---------------------------------------------------------

_TRACE_BYTES_MAX = 60_000
_ITEM = Field(min_length=1, max_length=500)


class TraceStepIn(_In):
    """One step of an execution trace; every field is optional."""

    tool: str | None = Field(default=None, max_length=200, description="A tool or function called")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments")
    command: str | None = Field(default=None, max_length=4000, description="A shell command run")
    action: str | None = Field(default=None, max_length=4000, description="What was done, in words")
    output: str | None = Field(default=None, max_length=4000)
    error: str | None = Field(default=None, max_length=4000, description="Non-empty: the step failed")
    status: Literal["ok", "error"] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


def _trace_size(trace: list[Any]) -> list[Any]:
    import json

    raw = [t.model_dump(exclude_defaults=True) if isinstance(t, BaseModel) else t for t in trace]
    _storable(raw, "trace")
    if len(json.dumps(raw, ensure_ascii=False).encode()) > _TRACE_BYTES_MAX:
        raise ValueError(f"the trace is limited to {_TRACE_BYTES_MAX} bytes of JSON; send its essential steps")
    return trace


class SkillExtractIn(_In):
    task: str = Field(min_length=1, max_length=2000, description="What the agent was asked to do")
    trace: list[TraceStepIn | str] = Field(min_length=1, max_length=200, description="The steps, in order")
    outcome: str | None = Field(default=None, max_length=2000, description="How it ended")
    ttl_s: float | None = _ttl()

    _size = field_validator("trace")(classmethod(lambda cls, v: _trace_size(v)))


class SkillOut(_Out):
    skill_id: str
    version: int
    skill_name: str
    description: str
    trigger_conditions: list[str]
    steps: list[str] = Field(description="With {placeholder} variables")
    common_pitfalls: list[str]
    success_criteria: list[str]
    variables: list[str] = Field(default_factory=list, description="The placeholders its steps use")
    uses: int
    successes: int
    success_rate: float | None = Field(description="successes / uses; null until used")
    confidence: float = Field(description="Wilson lower bound of the success rate (95 %)")
    last_used: datetime | None = None
    created_at: datetime
    updated_at: datetime
    updated_by: str = Field(description="Key id of the last change")
    tasks: list[str] = Field(default_factory=list, description="Tasks it was learned from")
    merged: bool | None = Field(default=None, description="Extraction: it updated a near-duplicate skill")
    similarity: float | None = Field(default=None, description="Search: cosine to the task")
    score: float | None = Field(default=None, description="Search: similarity x confidence factor")
    expires_at: datetime | None = _expires()


class SkillList(_Out):
    skills: list[SkillOut] = Field(description="By id; for a task, best match first")
    total: int = Field(description="Skills of the tenant")
    next_after: str | None = Field(default=None, description="Pass as ?after= for the next page; null on the last")


class OutcomeIn(_In):
    success: bool
    notes: str | None = Field(default=None, max_length=2000)


class SkillPatch(_In):
    """Fields to replace; the others stay."""

    skill_name: str | None = Field(default=None, min_length=1, max_length=80)
    description: str | None = Field(default=None, min_length=1, max_length=1000)
    trigger_conditions: list[str] | None = Field(default=None, max_length=30)
    steps: list[str] | None = Field(default=None, min_length=1, max_length=50)
    common_pitfalls: list[str] | None = Field(default=None, max_length=30)
    success_criteria: list[str] | None = Field(default=None, max_length=30)

    @field_validator("trigger_conditions", "steps", "common_pitfalls", "success_criteria")
    @classmethod
    def _items(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and any(not item.strip() or len(item) > 500 for item in v):
            raise ValueError("each item must be 1 to 500 characters")
        return v

    @model_validator(mode="after")
    def _something(self) -> SkillPatch:
        if not self.model_fields_set:
            raise ValueError("give at least one field to change")
        return self


class SkillDeleted(_Out):
    skill_id: str
    removed: int = Field(description="Durable rows removed (the skill and its history)")
    version: int


class SkillVersionOut(_Out):
    version: int
    at: datetime
    by: str
    change: Literal["created", "merged", "edited", "outcome"]
    uses: int
    successes: int
    snapshot: dict[str, Any] | None = Field(default=None, description="The content after a created/merged/edited change")
    outcome: dict[str, Any] | None = Field(default=None, description="An outcome change: success and notes")


class SkillHistory(_Out):
    skill_id: str
    versions: list[SkillVersionOut]


class SkillJobOut(_Out):
    job_id: str
    status: Literal["pending", "running", "done", "failed"]
    attempts: int
    error: str | None = None
    skill_id: str | None = None


class InteractionIn(_In):
    """One exchange of an agent with its user, and how the task went (the seed's post_interaction)."""

    session_id: str = Field(pattern=_ID)
    user: str | None = Field(default=None, max_length=16000)
    agent: str | None = Field(default=None, max_length=16000)
    task_type: str = Field(default="general", pattern=r"^[a-z][a-z0-9_\-]{0,31}$")
    success: bool | None = Field(default=None, description="Did the task succeed? A success of a learning task type teaches a skill")
    task: str | None = Field(default=None, max_length=2000, description="The task, if not the user's words")
    trace: list[TraceStepIn | str] | None = Field(default=None, max_length=200)
    outcome: str | None = Field(default=None, max_length=2000)
    timestamp: datetime | None = None
    speaker: str | None = Field(default=None, max_length=64)
    turn_id: str | None = Field(default=None, pattern=_ID)
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl_s: float | None = _ttl()

    _tz = field_validator("timestamp")(classmethod(lambda cls, v: _aware(v)))
    _meta = field_validator("metadata")(classmethod(lambda cls, v: _small_json(v)))
    _size = field_validator("trace")(classmethod(lambda cls, v: v if v is None else _trace_size(v)))

    @model_validator(mode="after")
    def _not_empty(self) -> InteractionIn:
        if not (self.user or "").strip() and not (self.agent or "").strip():
            raise ValueError("give user or agent text (both are empty)")
        return self

    def turn(self) -> TurnIn:
        return TurnIn(
            user=self.user, agent=self.agent, timestamp=self.timestamp, turn_id=self.turn_id,
            speaker=self.speaker, metadata=self.metadata, ttl_s=self.ttl_s,
        )


class InteractionResult(RecordTurnsResult):
    skill_job: SkillJobOut | None = Field(default=None, description="The background job learning a skill from it")
    learning: str = Field(description="Whether a skill is being learned from it, and why (not)")


# -- the audit history -----------------------------------------------------------


class AuditEntryOut(_Out):
    at: datetime
    key_id: str = Field(description="Id of the key that made the change (empty: the in-cluster client)")
    op: str
    layer: str
    record_id: str = Field(description="The session, document, skill or tenant it touched")
    version: int | None = None


class AuditHistory(_Out):
    entries: list[AuditEntryOut] = Field(description="Oldest first; never the content of what changed")


class TenantForgotten(_Out):
    tenant: str
    removed: dict[str, int] = Field(description="Durable rows removed, per layer")
    keys_revoked: list[str] = Field(description="Ids of the tenant's keys, revoked first")
