"""What callers send: the HTTP request bodies, and the in-cluster client's arguments.

Every model forbids unknown keys and checks its sizes here, at the edge, so a
layer never sees an over-long text, a naive timestamp or metadata a store could
not keep. The sizes several boundaries share are in :mod:`strata.limits`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from strata.config.stack import MAX_SHARDS
from strata.ids import ID_FIELD_PATTERN
from strata.layers import Layer, RetrievalPath, Role
from strata.limits import (
    DOCUMENT_CHARS_MAX,
    MESSAGE_CHARS_MAX,
    SKILL_ITEM_CHARS_MAX,
    TASK_CHARS_MAX,
    TTL_MAX_S,
    TURN_CHARS_MAX,
)

__all__ = [
    "ContextRequest",
    "DocumentIn",
    "InteractionIn",
    "OutcomeIn",
    "ScaleIn",
    "SearchRequest",
    "SkillExtractIn",
    "SkillPatch",
    "TimeRangeIn",
    "TraceStepIn",
    "TurnBatchIn",
    "TurnIn",
    "WorkingItemIn",
    "WorkingItemsIn",
]

# Pydantic matches ``pattern`` anywhere in the value: anchor it.
_TASK_TYPE = r"^[a-z][a-z0-9_\-]{0,31}$"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _utf8(cls, data: Any) -> Any:
        # JSON may spell a lone surrogate ("\\ud800"), which Python's parser keeps; no store,
        # tokenizer or log can encode it, so it is refused here, at the edge.
        _encodable(data)
        return data


_METADATA_BYTES_MAX = 8192


def _ttl() -> Any:
    return Field(
        default=None,
        gt=0,
        le=TTL_MAX_S,
        description="Seconds it lives; it may shorten the TTL configured for its layer and tenant, not lengthen it",
    )


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


def _encodable(value: Any, where: str = "") -> None:
    """Raise unless every string in ``value`` (keys too) is valid Unicode: no lone surrogate."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            at = f"{where}: " if where else ""
            raise ValueError(
                f"{at}text holds a lone surrogate ({value[exc.start]!r} at character {exc.start}); send valid UTF-8"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _encodable(key, where)
            _encodable(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _encodable(item, where)


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


class ScaleIn(_In):
    """``POST /v1/admin/layers/{layer}:scale``: the layer's shard count from now on."""

    shards: int = Field(ge=1, le=MAX_SHARDS, description=f"The layer's shard count, 1 to {MAX_SHARDS}")


_TURN_SIDE = (
    "Kept whole; a text longer than about 1,000 characters is also searched by passages, and a hit"
    " quotes the one that matched"
)


class TurnIn(_In):
    """One exchange: what the user said, what the agent answered (either may be absent)."""

    user: str | None = Field(default=None, max_length=TURN_CHARS_MAX, description=_TURN_SIDE)
    agent: str | None = Field(default=None, max_length=TURN_CHARS_MAX, description=_TURN_SIDE)
    timestamp: datetime | None = Field(default=None, description="When it was said; default now. Naive = UTC.")
    turn_id: str | None = Field(
        default=None, pattern=ID_FIELD_PATTERN, description="Caller-given id, unique in the session"
    )
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


class TimeRangeIn(_In):
    start: datetime | None = None
    end: datetime | None = None

    _tz = field_validator("start", "end")(classmethod(lambda cls, v: _aware(v)))

    @model_validator(mode="after")
    def _ordered(self) -> TimeRangeIn:
        if self.start and self.end and self.start >= self.end:
            raise ValueError("time_range.start must be before time_range.end")
        return self


class ContextRequest(_In):
    message: str = Field(min_length=1, max_length=MESSAGE_CHARS_MAX)
    session_id: str = Field(pattern=ID_FIELD_PATTERN)
    task_type: str = Field(default="general", pattern=_TASK_TYPE)
    max_tokens: int | None = Field(default=None, ge=64, le=200_000)
    reference_time: datetime | None = None
    top_k: int | None = Field(default=None, ge=1, le=100)
    layers: list[Layer] | None = Field(
        default=None, description="Read these layers instead of the task type's policy (working memory is always read)"
    )

    _tz = field_validator("reference_time")(classmethod(lambda cls, v: _aware(v)))


class SearchRequest(_In):
    query: str = Field(min_length=1, max_length=MESSAGE_CHARS_MAX)
    layers: list[Layer] | None = Field(
        default=None,
        min_length=1,
        description="Search only these layers; leave it out (or null) to search every layer the key may read. "
        "An empty list is refused: it would search nothing",
    )
    top_k: int = Field(default=10, ge=1, le=100)
    session_id: str | None = Field(default=None, pattern=ID_FIELD_PATTERN)
    time_range: TimeRangeIn | None = None
    reference_time: datetime | None = None
    weights: dict[RetrievalPath, float] | None = Field(
        default=None,
        description="Semantic layer: fusion weight per path (dense = vector, lexical = BM25, graph); "
        'a path left out is not run, so {"dense": 1} is plain vector top-k',
    )
    min_cosine: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        description="Semantic layer: children below this cosine are not ranked by the dense path",
    )
    doc_ids: list[str] | None = Field(default=None, max_length=100, description="Semantic layer: only these documents")

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        import math

        if v is not None and not all(math.isfinite(w) for w in v.values()):
            raise ValueError("weights must be finite numbers (not NaN or infinity)")
        if v is not None and (any(w < 0 for w in v.values()) or not any(w > 0 for w in v.values())):
            raise ValueError("weights must be >= 0 with at least one above 0")
        return v

    @field_validator("doc_ids")
    @classmethod
    def _doc_ids(cls, v: list[str] | None) -> list[str] | None:
        import re

        for doc_id in v or []:
            if not re.fullmatch(ID_FIELD_PATTERN, doc_id):
                raise ValueError(f"doc id {doc_id[:60]!r} is not a valid id")
        return v

    _tz = field_validator("reference_time")(classmethod(lambda cls, v: _aware(v)))


class WorkingItemIn(_In):
    role: Role
    content: str = Field(min_length=1, max_length=MESSAGE_CHARS_MAX)
    importance: float | None = Field(default=None, ge=0, le=1)
    created_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl_s: float | None = _ttl()

    _tz = field_validator("created_at")(classmethod(lambda cls, v: _aware(v)))
    _meta = field_validator("metadata")(classmethod(lambda cls, v: _small_json(v)))


class WorkingItemsIn(_In):
    items: list[WorkingItemIn] = Field(min_length=1, max_length=200)
    task: str | None = Field(default=None, max_length=TASK_CHARS_MAX, description="Active task; raises related items")


class DocumentIn(_In):
    """A document to index: plain text or Markdown."""

    text: str = Field(min_length=1, max_length=DOCUMENT_CHARS_MAX)
    doc_id: str | None = Field(
        default=None, pattern=ID_FIELD_PATTERN, description="Default: a new id; an existing id re-indexes it"
    )
    title: str | None = Field(default=None, max_length=500)
    metadata: dict[str, Any] = Field(default_factory=dict)
    ttl_s: float | None = _ttl()

    _meta = field_validator("metadata")(classmethod(lambda cls, v: _small_json(v)))

    @model_validator(mode="after")
    def _not_blank(self) -> DocumentIn:
        if not self.text.strip():
            raise ValueError("text is blank")
        return self


# -- procedural memory -------------------------------------------------------------

_TRACE_BYTES_MAX = 60_000


#: A step's metadata (its own ``metadata`` and the fields no step field takes), at most: keys,
#: characters of a key, bytes of JSON, levels of nesting. What does not fit is dropped and
#: named in ``metadata["_dropped"]``; the trace is still taken.
STEP_METADATA_KEYS_MAX = 32
STEP_METADATA_KEY_CHARS_MAX = 64
STEP_METADATA_BYTES_MAX = 4096
STEP_METADATA_DEPTH_MAX = 6
_STEP_TEXT_MAX = 4000
_OK = frozenset({"ok", "success", "succeeded", "completed", "done"})
_FAILED = frozenset({"error", "failed", "failure", "incomplete", "cancelled", "canceled", "fatal"})
_LOG_TEXT = ("message", "msg", "log", "text", "content")


class TraceStepIn(_In):
    """One step of an execution trace; every field is optional.

    Steps come in many shapes and all are taken: the fields below; an OpenAI tool call
    (``name``, ``arguments`` as a dict or JSON text, ``output``; or nested in ``function``);
    a LangChain intermediate step (``{"action": {"tool", "tool_input", "log"},
    "observation"}``, or the ``[action, observation]`` pair); a log record (``message``,
    ``level``). ``result`` and ``observation`` are the output. Any other field is kept in
    ``metadata`` (see ``STEP_METADATA_*`` for its bounds); a long output or error is cut to
    4,000 characters rather than refused.
    """

    model_config = ConfigDict(extra="allow")  # unknown fields are accepted: _shape moves them to metadata

    tool: str | None = Field(default=None, max_length=200, description="A tool or function called")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments")
    command: str | None = Field(default=None, max_length=4000, description="A shell command run")
    action: str | None = Field(default=None, max_length=4000, description="What was done, in words")
    output: str | None = Field(default=None, max_length=_STEP_TEXT_MAX)
    error: str | None = Field(default=None, max_length=_STEP_TEXT_MAX, description="Non-empty: the step failed")
    status: Literal["ok", "error"] | None = None
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description=f"Yours, plus the step's unknown fields; at most {STEP_METADATA_KEYS_MAX} keys and "
        f"{STEP_METADATA_BYTES_MAX} bytes of JSON (the rest is dropped and named in _dropped)",
    )

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        return _step_fields(data)


def _step_fields(data: Any) -> Any:
    """A step of any known shape as the fields of :class:`TraceStepIn`; other fields to metadata."""
    if isinstance(data, (list, tuple)) and len(data) == 2 and isinstance(data[0], dict):
        data = {"action": data[0], "observation": data[1]}  # LangChain's (AgentAction, observation)
    if not isinstance(data, dict):
        return data  # a string is the union's other member; anything else is refused by pydantic
    rest = dict(data)
    if rest.get("lc") == 1 and isinstance(rest.get("kwargs"), dict):
        rest = {**rest.pop("kwargs"), **{k: v for k, v in rest.items() if k != "kwargs"}}
    step: dict[str, Any] = {}
    function, action = rest.get("function"), rest.get("action")
    if isinstance(function, dict):  # chat completions: {"id", "type": "function", "function": {...}}
        rest.pop("function")
        rest = {**function, **rest}
    if isinstance(action, dict):  # LangChain: the AgentAction, as a dict
        rest.pop("action")
        rest = {**{k: v for k, v in action.items() if k != "log"}, **rest}
        if "log" in action:
            rest.setdefault("log", action["log"])
    for key in ("tool", "name", "tool_name"):
        if isinstance(rest.get(key), str) and "tool" not in step:
            step["tool"] = rest.pop(key)
    for key in ("args", "arguments", "tool_input", "input"):
        if key in rest and "args" not in step and (key != "input" or "tool" in step):
            step["args"] = _arguments(rest.pop(key))
    command = rest.get("command", rest.get("cmd"))
    if isinstance(command, list) and command and all(isinstance(word, str) for word in command):
        command = " ".join(command)  # an argv
    if isinstance(command, str):
        rest.pop("command" if "command" in rest else "cmd")
        step["command"] = command
    if isinstance(rest.get("action"), str):
        step["action"] = rest.pop("action")
    for key in ("output", "result", "observation", "error"):
        if key in rest and rest[key] is not None and not (key == "error" and rest[key] is False):
            target = "error" if key == "error" else "output"
            if target not in step:
                step[target] = _clipped_text(rest.pop(key))
    status = rest.get("status")
    if isinstance(status, str) and status.strip().lower() in _OK | _FAILED:
        rest.pop("status")
        step["status"] = "ok" if status.strip().lower() in _OK else "error"
    level = rest.get("level")
    if isinstance(level, str) and level.lower() in ("error", "fatal", "critical") and "status" not in step:
        step["status"] = "error"
    if not {"tool", "command", "action", "error"} & step.keys():
        text_key = next((k for k in _LOG_TEXT if isinstance(rest.get(k), str) and rest[k].strip()), None)
        if text_key is not None:
            target = "error" if step.get("status") == "error" else "action"
            step[target] = _clipped_text(rest.pop(text_key))
    explicit = rest.pop("metadata", None)
    extras = {**rest, **(explicit if isinstance(explicit, dict) else {})}
    if explicit is not None and not isinstance(explicit, dict):
        extras["metadata"] = explicit
    step["metadata"] = _bounded_metadata(extras)
    return step


def _arguments(value: Any) -> Any:
    """Tool arguments as a dict: JSON text parsed, a bare value as ``{"input": value}``."""
    import json

    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"input": value}
        value = parsed
    return value if isinstance(value, dict) else {"input": value}


def _clipped_text(value: Any) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _STEP_TEXT_MAX else text[: _STEP_TEXT_MAX - 1] + "…"


def _bounded_metadata(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that fit :data:`STEP_METADATA_KEYS_MAX` / ``BYTES_MAX``, in order, each made
    storable; the names of the others under ``_dropped``."""
    import json

    kept: dict[str, Any] = {}
    dropped: list[str] = []
    size = 2
    for key, value in fields.items():
        item = _storable_value(value, STEP_METADATA_DEPTH_MAX)
        cost = len(json.dumps({str(key): item}, ensure_ascii=False).encode())
        too_many = len(kept) >= STEP_METADATA_KEYS_MAX or len(str(key)) > STEP_METADATA_KEY_CHARS_MAX
        if too_many or size + cost > STEP_METADATA_BYTES_MAX - 256:  # 256: room left for _dropped
            dropped.append(str(key)[:STEP_METADATA_KEY_CHARS_MAX])
        else:
            kept[str(key)] = item
            size += cost
    if dropped:  # three names of 64 characters and a count fit in the room kept for them
        kept["_dropped"] = dropped[:3] + ([f"+{len(dropped) - 3} more"] if len(dropped) > 3 else [])
    return kept


def _storable_value(value: Any, depth: int) -> Any:
    """``value`` as JSON a store keeps: huge integers and non-finite numbers as text, deeper
    levels than ``depth`` as a short JSON text."""
    import math

    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth <= 0:
        return _clipped_text(value)[:200]
    if isinstance(value, dict):
        return {str(k): _storable_value(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_storable_value(v, depth - 1) for v in value]
    return str(value)[:200]


def _trace_size(trace: list[Any]) -> list[Any]:
    import json

    raw = [t.model_dump(exclude_defaults=True) if isinstance(t, BaseModel) else t for t in trace]
    _storable(raw, "trace")
    if len(json.dumps(raw, ensure_ascii=False).encode()) > _TRACE_BYTES_MAX:
        raise ValueError(f"the trace is limited to {_TRACE_BYTES_MAX} bytes of JSON; send its essential steps")
    return trace


class SkillExtractIn(_In):
    task: str = Field(min_length=1, max_length=TASK_CHARS_MAX, description="What the agent was asked to do")
    trace: list[TraceStepIn | str] = Field(min_length=1, max_length=200, description="The steps, in order")
    outcome: str | None = Field(default=None, max_length=2000, description="How it ended")
    ttl_s: float | None = _ttl()

    _size = field_validator("trace")(classmethod(lambda cls, v: _trace_size(v)))


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
        if v is not None and any(not item.strip() or len(item) > SKILL_ITEM_CHARS_MAX for item in v):
            raise ValueError(f"each item must be 1 to {SKILL_ITEM_CHARS_MAX} characters")
        return v

    @model_validator(mode="after")
    def _something(self) -> SkillPatch:
        if not self.model_fields_set:
            raise ValueError("give at least one field to change")
        return self


class InteractionIn(_In):
    """One exchange of an agent with its user, and how the task went (the seed's post_interaction)."""

    session_id: str = Field(pattern=ID_FIELD_PATTERN)
    #: A turn's sides, as long as a turn's (``TurnIn``): kept whole, searched by passages.
    user: str | None = Field(default=None, max_length=TURN_CHARS_MAX)
    agent: str | None = Field(default=None, max_length=TURN_CHARS_MAX)
    task_type: str = Field(default="general", pattern=_TASK_TYPE)
    success: bool | None = Field(
        default=None, description="Did the task succeed? A success of a learning task type teaches a skill"
    )
    task: str | None = Field(default=None, max_length=TASK_CHARS_MAX, description="The task, if not the user's words")
    trace: list[TraceStepIn | str] | None = Field(default=None, max_length=200)
    outcome: str | None = Field(default=None, max_length=2000)
    timestamp: datetime | None = None
    speaker: str | None = Field(default=None, max_length=64)
    turn_id: str | None = Field(default=None, pattern=ID_FIELD_PATTERN)
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
            user=self.user,
            agent=self.agent,
            timestamp=self.timestamp,
            turn_id=self.turn_id,
            speaker=self.speaker,
            metadata=self.metadata,
            ttl_s=self.ttl_s,
        )
