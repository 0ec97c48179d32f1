"""Working memory of one agent session (plain, single-threaded object).

Items stay in chronological order and are measured in tokens.  Over budget,
each item is scored ``0.6 * importance + 0.4 / (1 + age_hours)``; the best are
kept up to ``keep_ratio`` of the budget minus the reserved system prompt, and
high-importance items that no longer fit whole survive as a summary.
"""

from __future__ import annotations

import bisect
import copy
import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, get_args

from strata.layers import Role
from strata.providers.tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter, count_message_tokens
from strata.retrieval.terms import extract_terms
from strata.working.importance import ImportanceRules

__all__ = [
    "IMPORTANCE_WEIGHT",
    "RECENCY_WEIGHT",
    "ROLES",
    "CompressionReport",
    "WorkingItem",
    "WorkingMemory",
    "extractive_summary",
    "retention_score",
]

ROLES: frozenset[str] = frozenset(get_args(Role))
IMPORTANCE_WEIGHT = 0.6
RECENCY_WEIGHT = 0.4
_STATE_VERSION = 1

# ASCII terminators need following whitespace so "3.14" or "v1.2" stay whole;
# CJK terminators end a sentence on their own.
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def _require_aware(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value!r}")


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {sorted(ROLES)}")


def retention_score(importance: float, created_at: datetime, now: datetime) -> float:
    """Return ``0.6 * importance + 0.4 / (1 + age_hours)``.

    Items dated after ``now`` count as age 0 rather than earning a bonus.
    """
    age_hours = max(0.0, (now - created_at).total_seconds() / 3600.0)
    return IMPORTANCE_WEIGHT * importance + RECENCY_WEIGHT / (1.0 + age_hours)


def extractive_summary(text: str, max_tokens: int, *, counter: TokenCounter) -> str:
    """Summarise ``text`` by as many leading sentences as fit in ``max_tokens``.

    Sentences split on ``. ! ? 。！？``; the first one is truncated with
    ``counter`` when even it is too long.

    Raises:
        ValueError: If ``max_tokens`` is negative.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    sentences = [s.strip() for s in _SENTENCE_SPLIT.split(text.strip()) if s.strip()]
    if not sentences:
        return ""
    summary = sentences[0]
    for sentence in sentences[1:]:
        candidate = summary + ("" if summary[-1] in "。！？" else " ") + sentence
        if counter.count(candidate) > max_tokens:
            break
        summary = candidate
    return counter.truncate(summary, max_tokens).strip()


@dataclass(frozen=True)
class WorkingItem:
    """One turn held in working memory.

    ``tokens`` counts ``content``; ``original_tokens`` is the size before
    summarisation.  Construction raises ``ValueError`` for an unknown role,
    naive ``created_at``, importance outside [0, 1] or non-JSON ``metadata``.
    """

    id: str
    role: str
    content: str
    created_at: datetime
    importance: float
    tokens: int
    summarized: bool = False
    original_tokens: int | None = None
    reasons: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_role(self.role)
        _require_aware(self.created_at, "created_at")
        if math.isnan(self.importance) or not 0.0 <= self.importance <= 1.0:
            raise ValueError(f"importance must be in [0, 1], got {self.importance}")
        if self.tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {self.tokens}")
        try:
            json.dumps(self.metadata)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be JSON-serialisable: {exc}") from exc
        # A private copy: a caller mutating its own dict must not edit history.
        object.__setattr__(self, "metadata", copy.deepcopy(self.metadata))
        object.__setattr__(self, "reasons", tuple(self.reasons))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict with ``created_at`` in ISO 8601."""
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        data["reasons"] = list(self.reasons)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkingItem:
        """Rebuild an item from :meth:`to_dict` output (unknown keys are ignored).

        Raises:
            KeyError: If a required field is missing.
            ValueError: If a field is invalid.
        """
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["created_at"] = datetime.fromisoformat(str(data["created_at"]))
        values["reasons"] = tuple(data.get("reasons") or ())
        values["metadata"] = dict(data.get("metadata") or {})
        return cls(**values)


@dataclass(frozen=True)
class CompressionReport:
    """Outcome of one compression; the id tuples are disjoint and chronological.

    ``tokens_before``/``tokens_after`` include the reserved system prompt, like
    :attr:`WorkingMemory.total_tokens`; ``target_tokens`` is the item budget.
    """

    kept_ids: tuple[str, ...]
    summarized_ids: tuple[str, ...]
    dropped_ids: tuple[str, ...]
    tokens_before: int
    tokens_after: int
    target_tokens: int = 0


class WorkingMemory:
    """Token-budgeted, importance-aware memory of one session."""

    def __init__(
        self,
        *,
        counter: TokenCounter,
        max_tokens: int = 4000,
        keep_ratio: float = 0.85,
        summarize_above: float = 0.8,
        summary_tokens: int = 64,
        rules: ImportanceRules | None = None,
        system_prompt: str | None = None,
        summarizer: Callable[[str, int], str] | None = None,
    ) -> None:
        """Create an empty working memory.

        Args:
            counter: Token counter behind every budget decision.
            max_tokens: Budget incl. system prompt; :meth:`add` compresses above it.
            keep_ratio: Share of the item budget kept by a compression.
            summarize_above: More important items are summarised, not dropped.
            summary_tokens: Maximum tokens of one summary.
            rules: Importance rules; ``ImportanceRules()`` by default.
            system_prompt: Prompt whose tokens are reserved, never dropped.
            summarizer: ``summarizer(text, max_tokens) -> str``; by default
                :func:`extractive_summary` with ``counter``.

        Raises:
            ValueError: For an out-of-range option or a system prompt that
                leaves no room for items.
        """
        checks = (
            ("max_tokens", max_tokens, max_tokens > 0),
            ("keep_ratio", keep_ratio, 0.0 < keep_ratio <= 1.0),
            ("summarize_above", summarize_above, 0.0 <= summarize_above <= 1.0),
            ("summary_tokens", summary_tokens, summary_tokens > 0),
        )
        for name, value, ok in checks:
            if not ok:
                raise ValueError(f"{name} out of range: {value!r}")
        self._counter = counter
        self._max_tokens = max_tokens
        self._keep_ratio = keep_ratio
        self._summarize_above = summarize_above
        self._summary_tokens = summary_tokens
        self._rules = rules if rules is not None else ImportanceRules()
        self._summarizer = summarizer
        self._system_prompt = system_prompt or None
        self._system_tokens = counter.count(system_prompt) if system_prompt else 0
        if self._system_tokens >= max_tokens:
            raise ValueError(
                f"system prompt uses {self._system_tokens} tokens; max_tokens={max_tokens}"
            )
        self._items: list[WorkingItem] = []
        # Insertion sequence per id: the tie-breaker after created_at.
        self._seq_of: dict[str, int] = {}
        self._next_seq = 0
        # What is worked out of an item's text, by id, with the content it is of (a summary
        # keeps its item's id): its terms for the back-reference rule, once and not once per
        # later item (that made adding an item O(items x text)); its summary, once and not at
        # every read that fits the session to a budget (most of a context call's working CPU).
        self._terms: dict[str, tuple[str, frozenset[str]]] = {}
        self._summaries: dict[str, tuple[str, str]] = {}

    @property
    def items(self) -> tuple[WorkingItem, ...]:
        """Items in chronological order."""
        return tuple(self._items)

    @property
    def total_tokens(self) -> int:
        """Tokens of all item contents plus the reserved system prompt."""
        return sum(item.tokens for item in self._items) + self._system_tokens

    @property
    def system_tokens(self) -> int:
        """Tokens reserved for the system prompt (0 without one)."""
        return self._system_tokens

    @property
    def system_prompt(self) -> str | None:
        """The system prompt, if any."""
        return self._system_prompt

    def get(self, item_id: str) -> WorkingItem | None:
        """Return the item with ``item_id``, or ``None``."""
        return next((item for item in self._items if item.id == item_id), None)

    def add(
        self,
        role: str,
        content: str,
        *,
        now: datetime,
        item_id: str | None = None,
        created_at: datetime | None = None,
        importance: float | None = None,
        task: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WorkingItem:
        """Append a turn, boost earlier turns it refers back to, compress if needed.

        Args:
            role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
            content: Non-empty text.
            now: Current time (aware); the default ``created_at``.
            item_id: Unique id; a uuid4 hex by default.
            created_at: When the turn happened (aware).
            importance: Overrides the rules; clamped to [0, 1].
            task: Active task, for the task-relevance rule.
            metadata: JSON-serialisable extra data.

        Returns:
            The stored item (its summary if compression summarised it), or the
            item as added if compression dropped it.

        Raises:
            ValueError: For an unknown role, empty content, a duplicate id, a
                naive datetime, NaN importance or non-JSON metadata.
        """
        _check_role(role)
        if not isinstance(content, str) or not content.strip():
            raise ValueError("content must be a non-empty string")
        _require_aware(now, "now")
        new_id = item_id if item_id is not None else uuid.uuid4().hex
        if new_id in self._seq_of:
            raise ValueError(f"duplicate item id {new_id!r}")
        if importance is None:
            signal = self._rules.score(content, role=role, task=task)
            value, reasons = signal.importance, signal.reasons
        elif math.isnan(importance):
            raise ValueError("importance must not be NaN")
        else:
            value, reasons = max(0.0, min(1.0, float(importance))), ("given",)
        item = WorkingItem(
            id=new_id,
            role=role,
            content=content,
            created_at=created_at if created_at is not None else now,
            importance=value,
            tokens=self._counter.count(content),
            reasons=reasons,
            metadata=metadata or {},
        )
        self._boost_referenced(content)
        self._insert(item)
        if self.total_tokens > self._max_tokens:
            self.compress(now=now)
        return self.get(new_id) or item

    def _insert(self, item: WorkingItem) -> None:
        if item.id in self._seq_of:
            raise ValueError(f"duplicate item id {item.id!r}")
        self._seq_of[item.id] = self._next_seq
        self._next_seq += 1
        bisect.insort(self._items, item, key=lambda it: (it.created_at, self._seq_of[it.id]))

    def _boost_referenced(self, later_text: str) -> None:
        later = self._rules.back_reference(later_text)
        for index, earlier in enumerate(self._items):
            if earlier.importance >= 1.0:
                continue
            boost = self._rules.boost_from(self._terms_of(earlier), later)
            if boost <= 0:
                continue
            reasons = earlier.reasons
            if "back_reference" not in reasons:
                reasons = (*reasons, "back_reference")
            new_importance = min(1.0, earlier.importance + boost)
            self._items[index] = replace(earlier, importance=new_importance, reasons=reasons)

    def _terms_of(self, item: WorkingItem) -> frozenset[str]:
        cached = self._terms.get(item.id)
        if cached is None or cached[0] != item.content:
            cached = self._terms[item.id] = (item.content, extract_terms(item.content))
        return cached[1]

    def _forget_derived(self, item_ids: Iterable[str]) -> None:
        for item_id in item_ids:
            self._terms.pop(item_id, None)
            self._summaries.pop(item_id, None)

    def remove(self, item_id: str) -> bool:
        """Remove the item with ``item_id``; return whether it existed."""
        if self._seq_of.pop(item_id, None) is None:
            return False
        self._forget_derived([item_id])
        self._items = [item for item in self._items if item.id != item_id]
        return True

    def clear(self) -> None:
        """Remove every item; the system prompt stays."""
        self._items.clear()
        self._seq_of.clear()
        self._terms.clear()
        self._summaries.clear()

    def compress(self, *, now: datetime, budget_tokens: int | None = None) -> CompressionReport:
        """Shrink the items to ``keep_ratio * (budget - system prompt tokens)``.

        Args:
            now: Reference time for the recency term (aware).
            budget_tokens: Budget including the system prompt; ``max_tokens``
                by default.

        Raises:
            ValueError: If ``now`` is naive or the budget is not positive.
        """
        _require_aware(now, "now")
        budget = self._max_tokens if budget_tokens is None else budget_tokens
        if budget <= 0:
            raise ValueError(f"budget_tokens must be > 0, got {budget}")
        before = self.total_tokens
        target = max(0, math.floor(self._keep_ratio * (budget - self._system_tokens)))
        chosen, summarized = self._select(now=now, target=target, overhead=lambda _: 0)
        dropped = tuple(it.id for it in self._items if it.id not in chosen)
        for item_id in dropped:
            del self._seq_of[item_id]
        self._forget_derived(dropped)
        self._items = [chosen[it.id] for it in self._items if it.id in chosen]
        return CompressionReport(
            kept_ids=tuple(it.id for it in self._items if it.id not in summarized),
            summarized_ids=tuple(it.id for it in self._items if it.id in summarized),
            dropped_ids=dropped,
            tokens_before=before,
            tokens_after=self.total_tokens,
            target_tokens=target,
        )

    def messages(
        self, *, budget_tokens: int | None = None, now: datetime | None = None
    ) -> list[dict[str, str]]:
        """Return OpenAI-format messages: system prompt first, then items.

        With ``budget_tokens``, items are selected as :meth:`compress` would
        (same scores, ``keep_ratio`` target, summaries) but counting the chat
        overhead, so ``count_message_tokens(counter, result) <= budget_tokens``.
        State is never modified.

        Args:
            budget_tokens: Upper bound on the chat prompt tokens.
            now: Reference time for recency; the current UTC time by default.

        Raises:
            ValueError: If the budget cannot hold the system prompt and reply
                priming, or ``now`` is naive.
        """
        head = [{"role": "system", "content": self._system_prompt}] if self._system_prompt else []
        full = head + [_as_message(item) for item in self._items]
        if budget_tokens is None:
            return full
        reserved = count_message_tokens(self._counter, head)
        if budget_tokens < reserved:
            raise ValueError(f"budget_tokens={budget_tokens} < {reserved} reserved tokens")
        if count_message_tokens(self._counter, full) <= budget_tokens:
            return full
        when = now if now is not None else datetime.now(UTC)
        _require_aware(when, "now")
        target = math.floor(self._keep_ratio * (budget_tokens - reserved))
        role_cost = {role: MESSAGE_OVERHEAD_TOKENS + self._counter.count(role) for role in ROLES}
        chosen, _ = self._select(now=when, target=target, overhead=lambda it: role_cost[it.role])
        return head + [_as_message(chosen[it.id]) for it in self._items if it.id in chosen]

    def _summarize(self, item: WorkingItem) -> WorkingItem | None:
        cached = self._summaries.get(item.id)
        if cached is not None and cached[0] == item.content:
            text = cached[1]
        else:
            text = self._summary_text(item.content)
            self._summaries[item.id] = (item.content, text)
        tokens = self._counter.count(text)
        if not text or tokens >= item.tokens:
            return None
        original = item.original_tokens if item.summarized else item.tokens
        return replace(item, content=text, tokens=tokens, summarized=True, original_tokens=original)

    def _summary_text(self, content: str) -> str:
        if self._summarizer is not None:
            # A custom summarizer may overshoot; the budget is ours to keep.
            raw = self._summarizer(content, self._summary_tokens) or ""
            return self._counter.truncate(raw, self._summary_tokens).strip()
        return extractive_summary(content, self._summary_tokens, counter=self._counter)

    def _select(
        self, *, now: datetime, target: int, overhead: Callable[[WorkingItem], int]
    ) -> tuple[dict[str, WorkingItem], set[str]]:
        """Greedy selection: ``({id: item or its summary}, summarised ids)``."""
        # Ties go to the newer item, then the later insertion: deterministic,
        # and on equal merit recent context is the more useful.
        order = sorted(
            self._items,
            key=lambda it: (
                -retention_score(it.importance, it.created_at, now),
                -it.created_at.timestamp(),
                -self._seq_of[it.id],
            ),
        )
        chosen: dict[str, WorkingItem] = {}
        summarized: set[str] = set()
        used = 0
        for item in order:
            candidate = item
            if item.tokens + overhead(item) + used > target:
                summary = self._summarize(item) if item.importance > self._summarize_above else None
                if summary is None or summary.tokens + overhead(item) + used > target:
                    continue
                candidate = summary
                summarized.add(item.id)
            chosen[item.id] = candidate
            used += candidate.tokens + overhead(item)
        return chosen, summarized

    def to_dict(self) -> dict[str, Any]:
        """Return the session state as a JSON-serialisable dict.

        The counter and summarizer are code, not state, and are left out.
        """
        names = ("max_tokens", "keep_ratio", "summarize_above", "summary_tokens", "system_prompt")
        config: dict[str, Any] = {name: getattr(self, "_" + name) for name in names}
        config["rules"] = asdict(self._rules)
        items = [item.to_dict() for item in self._items]
        return {"version": _STATE_VERSION, "config": config, "items": items}

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, counter: TokenCounter, **options: Any
    ) -> WorkingMemory:
        """Restore a session saved by :meth:`to_dict`, recounting tokens with ``counter``.

        Args:
            data: Output of :meth:`to_dict`.
            counter: Token counter of the restored memory.
            **options: Constructor keywords overriding the saved config
                (``summarizer``, ``max_tokens``, ``rules``, ...).

        Raises:
            ValueError: For an unsupported version or an invalid item.
            KeyError: If a required field is missing.
        """
        if data.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported working-memory state version {data.get('version')!r}")
        config = dict(data.get("config") or {})
        rules_data = config.pop("rules", None)
        if rules_data is not None:
            config["rules"] = ImportanceRules(**rules_data)
        memory = cls(counter=counter, **{**config, **options})
        for raw in data.get("items", ()):
            item = WorkingItem.from_dict(raw)
            memory._insert(replace(item, tokens=counter.count(item.content)))
        return memory


def _as_message(item: WorkingItem) -> dict[str, str]:
    return {"role": item.role, "content": item.content}
