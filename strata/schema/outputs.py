"""What Strata returns: the HTTP response bodies, which the clients return as they are.

The FastAPI app, the HTTP clients and the in-cluster client all speak these
models, so a result looks the same whichever way an agent calls. Unknown keys
are ignored, so a newer server's answer still parses. Scores are "higher is
more relevant"; cosine similarities lie in [-1, 1].
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AuditEntryOut",
    "AuditHistory",
    "ContextItem",
    "ContextResult",
    "ContextSection",
    "DocumentDeleted",
    "DocumentList",
    "DocumentOut",
    "DocumentProgress",
    "EntityOut",
    "ForgetResult",
    "Health",
    "InteractionResult",
    "LayerPlacement",
    "MatchedSpan",
    "RecordTurnsResult",
    "SearchHit",
    "SearchResult",
    "SessionList",
    "SessionOut",
    "SessionTurn",
    "SessionTurns",
    "SkillDeleted",
    "SkillHistory",
    "SkillJobOut",
    "SkillList",
    "SkillOut",
    "SkillVersionOut",
    "SourceRef",
    "TenantForgotten",
    "TimeRangeOut",
    "TurnOut",
    "TurnSpan",
    "UsageHour",
    "UsageOut",
    "UsageReport",
    "UsageTokens",
    "WorkingItemOut",
    "WorkingState",
]


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")



def _expires() -> Any:
    return Field(default=None, description="When it expires and is purged; null: never")


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


class SessionOut(_Out):
    session_id: str
    turns: int = Field(description="Turns recorded in it")
    first_at: datetime | None = Field(default=None, description="When its earliest turn was said")
    last_at: datetime | None = Field(default=None, description="When its latest turn was said")


class SessionList(_Out):
    sessions: list[SessionOut] = Field(description="The sessions with turns, by id")
    total: int = Field(description="Sessions of the tenant with turns")
    next_after: str | None = Field(default=None, description="Pass as ?after= for the next page; null on the last")


class SessionTurn(_Out):
    """A recorded turn, read back."""

    turn_id: str
    timestamp: datetime
    text: str = Field(description="Both sides as they are searched: '<speaker>: ...' and 'assistant: ...' lines")
    user: str | None = None
    agent: str | None = None
    speaker: str | None = Field(default=None, description="The user side's label; null: 'user'")
    metadata: dict[str, Any] = Field(default_factory=dict)
    expires_at: datetime | None = _expires()


class SessionTurns(_Out):
    session_id: str
    turns: list[SessionTurn] = Field(description="In time order (the order a search's neighbours follow)")
    total: int = Field(description="Turns of the session")
    next_after: str | None = Field(
        default=None, description="A turn_id: pass as ?after= for the next page; null on the last"
    )


class TimeRangeOut(_Out):
    start: datetime | None
    end: datetime | None
    expression: str | None = None


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


class TurnSpan(_Out):
    side: Literal["user", "agent"]
    start: int = Field(description="Character offset of the quoted passage in that side's text")
    end: int


class SearchHit(_Out):
    layer: str
    kind: str
    id: str
    text: str
    score: float = Field(description="Orders one query's hits (fused ranks); not comparable across queries")
    relevance: float | None = Field(
        default=None,
        description="How well it matches the query, 0-1, comparable across queries: the cosine on the embedder's"
        " calibrated span and the share of the query's BM25 weight matched, either vouching (docs/evaluation.md)",
    )
    timestamp: datetime | None = None
    session_id: str | None = None
    turn_ids: list[str] = Field(default_factory=list)
    ranks: dict[str, int] = Field(default_factory=dict, description="1-based rank on each path that found it")
    source: SourceRef | None = Field(default=None, description="Semantic passages: the document span it comes from")
    matched: list[MatchedSpan] = Field(
        default_factory=list, description="Semantic passages: the children that matched, best first"
    )
    span: TurnSpan | None = Field(
        default=None, description="A long turn: the passage of it the text quotes (the one that matched best)"
    )
    superseded_by: str | None = Field(
        default=None,
        description="A turn: a later turn among these hits that states the same thing (ranked above it)",
    )
    speaks_of: TimeRangeOut | None = Field(
        default=None,
        description="A turn: the time it speaks of, read off its words against when it was said"
        " (\"next Wednesday\" said on a Monday: that Wednesday), [start, end)",
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


class SearchResult(_Out):
    hits: list[SearchHit]
    time_range: TimeRangeOut | None = None
    versions: dict[str, int]
    missing: dict[str, str] = Field(default_factory=dict)


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
    turn_id: str | None = Field(default=None, description="The turn it is a copy of; null for an item added alone")


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
    """``/healthz``: up or down for anyone; what is down, in the store's own words, for an admin key
    only (they may name internal addresses)."""

    status: Literal["ok", "down"]
    ray: str | None = None
    milvus: str | None = None
    layers: dict[str, str] | None = None


# -- procedural memory -------------------------------------------------------------


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
    relevance: float | None = Field(
        default=None, description="Search: the similarity on the embedder's calibrated span, 0-1"
    )
    expires_at: datetime | None = _expires()


class SkillList(_Out):
    skills: list[SkillOut] = Field(description="By id; for a task, best match first")
    total: int = Field(description="Skills of the tenant")
    next_after: str | None = Field(default=None, description="Pass as ?after= for the next page; null on the last")


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
    snapshot: dict[str, Any] | None = Field(
        default=None, description="The content after a created/merged/edited change"
    )
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


class InteractionResult(RecordTurnsResult):
    skill_job: SkillJobOut | None = Field(default=None, description="The background job learning a skill from it")
    learning: str = Field(description="Whether a skill is being learned from it, and why (not)")


# -- the audit history -------------------------------------------------------------


class AuditEntryOut(_Out):
    at: datetime
    key_id: str = Field(description="Id of the key that made the change (empty: the in-cluster client)")
    op: str
    layer: str
    record_id: str = Field(description="The session, document, skill or tenant it touched")
    version: int | None = None


class AuditHistory(_Out):
    entries: list[AuditEntryOut] = Field(description="Oldest first; never the content of what changed")
    next_after: str | None = Field(default=None, description="Pass as ?after= for the next page; null on the last")


class LayerPlacement(_Out):
    """A layer's shards as the placement directory publishes them (``strata scale``)."""

    layer: str
    shards: int = Field(description="The layer's shard count")
    epoch: int = Field(description="Increments on each change of the count")


class TenantForgotten(_Out):
    tenant: str
    removed: dict[str, int] = Field(description="Durable rows removed, per layer")
    keys_revoked: list[str] = Field(description="Ids of the tenant's keys, revoked first")


class UsageTokens(_Out):
    """Tokens a tenant's work used: counted where its texts were embedded or sent to the LLM."""

    embedding: int = Field(default=0, description="Word pieces the embedding model read: each stored text cut to "
                           "embedding.max_tokens and each query to embedding.query_max_tokens, special tokens included")
    llm_in: int = Field(default=0, description="Prompt tokens of the LLM calls made for the tenant, as the endpoint "
                        "counted them (summaries, entities, skills, context refinement)")
    llm_out: int = Field(default=0, description="Reply tokens of those LLM calls, as the endpoint counted them")


class UsageHour(_Out):
    hour: datetime = Field(description="The hour's start (UTC)")
    calls: dict[str, int] = Field(description="Calls per route (its name in the OpenAPI document) in that hour")
    tokens: UsageTokens = Field(default_factory=UsageTokens, description="Tokens used in that hour")


class UsageOut(_Out):
    """A tenant's usage: what it holds now, and the calls it made in the window."""

    tenant: str
    since: datetime = Field(description="The window's start: the asked ``since`` rounded down to its hour")
    until: datetime = Field(description="The window's end (exclusive): the asked ``until`` rounded up to an hour")
    items: dict[str, dict[str, int]] | None = Field(
        default=None,
        description="Items held now, per layer: working items; turns, summaries, sessions; documents, passages; "
        "skills; and each layer's bytes (UTF-8 of its rows' text and metadata, vectors not counted). "
        "Null in an admin report over every tenant",
    )
    calls: dict[str, int] = Field(description="Calls per route in the window, every API replica's summed")
    tokens: UsageTokens = Field(
        default_factory=UsageTokens,
        description="Tokens used in the window, every process's counts summed (API replicas and layer shards)",
    )
    hours: list[UsageHour] = Field(
        description="The same calls and tokens per hour, oldest first; hours without either left out"
    )


class UsageReport(_Out):
    """Every tenant's usage in a window (the admin's)."""

    since: datetime
    until: datetime
    tenants: list[UsageOut] = Field(
        description="Each tenant that made calls or used tokens in the window (or the one asked for)"
    )

