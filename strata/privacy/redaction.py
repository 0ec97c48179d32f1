"""PII redaction: a text by a policy (:class:`Redactor`), and every request body before it reaches
a store (:class:`Redaction`).

A :class:`Redactor` applies a policy to what a detector (:mod:`strata.privacy.pii`) finds:
``mask`` -> ``[EMAIL]``, ``hash`` -> ``[EMAIL:3f9a1c2e]`` (a keyed pseudonym, so the memory still
links what was the same value), ``keep``.

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

import hashlib
import hmac
import ipaddress
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, get_args

from pydantic import BaseModel

from strata.config import PIIAction, PIISettings
from strata.privacy.normalize import normal_view
from strata.privacy.pii import Detector, make_detector, spelled_email

__all__ = ["ACTIONS", "Redacted", "Redaction", "Redactor", "TenantRedaction", "normalize"]

M = TypeVar("M", bound=BaseModel)

#: What a detected value may become (the settings' ``PIIAction``).
ACTIONS: tuple[str, ...] = get_args(PIIAction)

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


@dataclass(frozen=True)
class Redacted:
    """A redacted text and how many findings per type were masked or hashed (kept ones are not counted)."""

    text: str
    counts: dict[str, int]


def normalize(type_: str, value: str) -> str:
    """The form of a value that the ``hash`` pseudonym is computed from: equal values, equal forms."""
    value = normal_view(value).text
    if type_ == "email" and "@" not in value:  # spelled out: the same pseudonym as the address
        value = spelled_email(value)
    if type_ in ("phone", "card", "cn_id", "iban", "ssn", "passport"):
        return re.sub(r"[^0-9A-Za-z]", "", value).upper()
    if type_ == "ip":
        try:
            return ipaddress.ip_address(value).compressed
        except ValueError:
            return value.lower()
    if type_ == "secret":
        return value
    return " ".join(value.split()).casefold()


class Redactor:
    """Applies a policy (type -> ``mask`` | ``hash`` | ``keep``) to what a detector finds.

    Args:
        detector: finds the values.
        policy: action per type; a type missing from it is masked.
        hash_key: the HMAC key of the ``hash`` pseudonyms; the same key gives the same pseudonym
            in every process.

    Raises:
        ValueError: an action is not ``mask``, ``hash`` or ``keep``, or ``hash`` is used with an empty key.
    """

    def __init__(self, detector: Detector, policy: Mapping[str, str], *, hash_key: bytes) -> None:
        bad = {t: a for t, a in policy.items() if a not in ACTIONS}
        if bad:
            raise ValueError(f"unknown PII action(s) {bad}; known: {', '.join(ACTIONS)}")
        if "hash" in policy.values() and not hash_key:
            raise ValueError("the PII 'hash' action needs a non-empty hash_key")
        self.detector = detector
        self.policy = dict(policy)
        self._key = hash_key

    def pseudonym(self, type_: str, value: str) -> str:
        """``[TYPE:8 hex]`` for a value: HMAC-SHA256 of ``type:normalized value``."""
        digest = hmac.new(self._key, f"{type_}:{normalize(type_, value)}".encode(), hashlib.sha256).hexdigest()
        return f"[{type_.upper()}:{digest[:8]}]"

    def redact(self, text: str) -> Redacted:
        """``text`` with each finding masked, hashed or kept, and the counts of the first two.

        Args:
            text: the text to redact; placeholders of an earlier redaction stay as they are.
        """
        pieces: list[str] = []
        counts: dict[str, int] = {}
        last = 0
        for f in self.detector.find(text):
            action = self.policy.get(f.type, "mask")
            if action == "keep":
                continue
            pieces.append(text[last : f.start])
            value = text[f.start : f.end]
            pieces.append(f"[{f.type.upper()}]" if action == "mask" else self.pseudonym(f.type, value))
            counts[f.type] = counts.get(f.type, 0) + 1
            last = f.end
        pieces.append(text[last:])
        return Redacted("".join(pieces), counts)

    def redact_value(self, value: Any) -> Any:
        """Redacts every string inside dicts, lists and tuples (dict keys stay as they are).

        Args:
            value: JSON-like data; values of other types come back unchanged.
        """
        if isinstance(value, str):
            return self.redact(value).text
        if isinstance(value, dict):
            return {k: self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_value(v) for v in value]
        if isinstance(value, tuple):
            items = [self.redact_value(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return value


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
