"""Settings of what is kept: PII redaction before a write, and how long each layer's items live."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from strata.config.validation import Section, only_known
from strata.limits import TTL_MAX_S

__all__ = ["PII_TYPES", "PIIAction", "PIISettings", "TTLLayers", "TTLSettings"]

PII_TYPES = ("email", "phone", "card", "cn_id", "iban", "ip", "secret", "ssn", "passport", "person", "address")
PIIAction = Literal["mask", "hash", "keep"]


def _all_masked() -> dict[str, PIIAction]:
    return {t: "mask" for t in PII_TYPES}


class PIISettings(Section):
    """Redaction before anything is written: what each detected type becomes.

    ``mask`` writes ``[EMAIL]``; ``hash`` a stable pseudonym ``[EMAIL:3f9a1c2e]`` (an HMAC with
    ``hash_key``, so the memory still links what was the same value); ``keep`` leaves it.
    """

    enabled: bool = True
    policy: dict[str, PIIAction] = Field(default_factory=lambda: _all_masked())
    #: Per-tenant departures from ``policy``, by tenant id.
    tenants: dict[str, dict[str, PIIAction]] = Field(default_factory=dict)
    #: Use Presidio for names and addresses when it is installed.
    ner: bool = True
    #: Secret of the ``hash`` pseudonyms; ``strata up`` makes one in the data dir when unset.
    hash_key: str | None = None

    @field_validator("policy")
    @classmethod
    def _known_types(cls, value: dict[str, str]) -> dict[str, str]:
        only_known(value, PII_TYPES, "unknown PII type(s)")
        return value

    @field_validator("tenants")
    @classmethod
    def _known_tenant_types(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for policy in value.values():
            cls._known_types(policy)
        return value

    def policy_for(self, tenant: str) -> dict[str, str]:
        """Every type's action for ``tenant``: a type no policy names is masked."""
        return {**_all_masked(), **self.policy, **self.tenants.get(tenant, {})}


class TTLLayers(Section):
    """Seconds an item of each layer lives after it is written; null or 0 = forever."""

    working: float | None = Field(default=None, ge=0, le=TTL_MAX_S)
    episodic: float | None = Field(default=None, ge=0, le=TTL_MAX_S)
    semantic: float | None = Field(default=None, ge=0, le=TTL_MAX_S)
    procedural: float | None = Field(default=None, ge=0, le=TTL_MAX_S)


class TTLSettings(TTLLayers):
    """How long memories live. An item's own ``ttl_s`` (on write) may shorten what is
    configured for its layer and tenant, never lengthen it: a retention rule is a ceiling."""

    #: Per tenant: these layers' TTLs replace the defaults above (0 = forever for that tenant).
    tenants: dict[str, TTLLayers] = Field(default_factory=dict)
    #: Expired items are never returned; each shard purges them from every store at least
    #: this often (milvus-lite keeps a collection TTL but does not apply it).
    sweep_interval_s: float = Field(default=60.0, gt=0, le=86_400)

    def seconds(self, tenant: str, layer: str, item_ttl_s: float | None = None) -> float | None:
        """The TTL of a new item of ``layer`` for ``tenant``; None = it never expires."""
        override = self.tenants.get(tenant)
        own = getattr(override, layer) if override else None
        configured = own if own is not None else getattr(self, layer)
        limits = [t for t in (configured, item_ttl_s) if t]
        return min(limits) if limits else None
