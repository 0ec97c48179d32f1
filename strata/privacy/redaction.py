"""PII redaction of every request body before it reaches a store.

The orchestrator passes each write (turns, working items, documents, skill
traces, edits, outcome notes, interactions) through :class:`Redaction` first,
so nothing downstream (vectors, text, summaries, the graph, job rows, logs)
ever sees a raw value. Queries go through the same policy, so a hashed
pseudonym in a query matches the one stored.

What a detected value becomes is the tenant's policy (``pii.policy`` and
``pii.tenants``): ``[EMAIL]``, a stable pseudonym ``[EMAIL:3f9a1c2e]``, or
the value kept. The speaker label is redacted like the text (it is stored
and searched as ``speaker: text``), and so are the string values of metadata;
ids, session ids and dict keys are not: they are the caller's labels.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeVar

from pydantic import BaseModel

from strata.config import PIISettings
from strata.privacy.pii import Detector, Redactor, make_detector

__all__ = ["Redaction", "TenantRedaction"]

M = TypeVar("M", bound=BaseModel)

#: The content fields of each request model; everything else is an id, a label or a number.
_FIELDS: dict[str, tuple[str, ...]] = {
    "TurnIn": ("user", "agent", "speaker", "metadata"),
    "WorkingItemIn": ("content", "metadata"),
    "WorkingItemsIn": ("items", "task"),
    "DocumentIn": ("text", "title", "metadata"),
    "TraceStepIn": ("tool", "args", "command", "action", "output", "error", "metadata"),
    "SkillExtractIn": ("task", "trace", "outcome"),
    "SkillPatch": ("skill_name", "description", "trigger_conditions", "steps", "common_pitfalls", "success_criteria"),
    "OutcomeIn": ("notes",),
    "InteractionIn": ("user", "agent", "speaker", "task", "trace", "outcome", "metadata"),
}


class TenantRedaction:
    """One tenant's redactor; ``counts`` adds up what it masked or hashed."""

    def __init__(self, redactor: Redactor | None) -> None:
        self._redactor = redactor
        self.counts: Counter[str] = Counter()

    def text(self, value: str) -> str:
        if self._redactor is None:
            return value
        redacted = self._redactor.redact(value)
        self.counts.update(redacted.counts)
        return redacted.text

    def value(self, value: Any) -> Any:
        """Every string inside a JSON-like value (dict keys stay), or a request model's content fields."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, BaseModel):
            return self.model(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(v) for v in value)
        return value

    def model(self, body: M) -> M:
        """A copy of a request model with its content fields redacted."""
        if self._redactor is None:
            return body
        fields = _FIELDS.get(type(body).__name__)
        if fields is None:
            raise TypeError(f"no redaction rule for {type(body).__name__}: add its content fields to _FIELDS")
        # Only the fields the caller set: an unset PATCH field must stay unset.
        changes = {f: self.value(getattr(body, f)) for f in fields if f in body.model_fields_set}
        return body.model_copy(update=changes)

    def report(self) -> dict[str, int]:
        return dict(self.counts)


class Redaction:
    """The deployment's detector and each tenant's policy (built once per process)."""

    def __init__(self, settings: PIISettings) -> None:
        self._settings = settings
        self._detector: Detector | None = make_detector(settings) if settings.enabled else None
        self._redactors: dict[str, Redactor] = {}
        uses_hash = any(a == "hash" for a in settings.policy.values()) or any(
            a == "hash" for policy in settings.tenants.values() for a in policy.values()
        )
        if uses_hash and settings.enabled and not settings.hash_key:
            raise ValueError("pii.hash_key must be set when a PII policy hashes (strata up makes one)")

    def for_tenant(self, tenant: str) -> TenantRedaction:
        if self._detector is None:
            return TenantRedaction(None)
        redactor = self._redactors.get(tenant)
        if redactor is None:
            redactor = Redactor(
                self._detector,
                self._settings.policy_for(tenant),
                hash_key=(self._settings.hash_key or "").encode(),
            )
            self._redactors[tenant] = redactor
        return TenantRedaction(redactor)
