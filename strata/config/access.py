"""Settings of who may call and what is recorded: API keys, rate limits, the audit log."""

from __future__ import annotations

from pydantic import Field, model_validator

from strata.config.validation import Section

__all__ = ["AuditSettings", "AuthSettings"]


class AuthSettings(Section):
    #: An admin key for ``/v1/admin``, besides the admin keys ``strata keys`` stores (hashed).
    admin_key: str | None = None
    #: Requests per second each key may send (0: no limit), and the burst it may send at once,
    #: over every API replica together; above it, 429 with Retry-After.
    rate_limit_per_s: float = Field(default=200.0, ge=0)
    rate_burst: int = Field(default=400, ge=1)
    #: Actors that hold the keys' rate limits and the Idempotency-Key claims for every API
    #: replica, a tenant's on ``owner_shard(tenant, limit_shards)``. 0: each replica limits on its
    #: own (a key may send the rate to each) and claims keys for itself only.
    limit_shards: int = Field(default=1, ge=0, le=64)
    #: A replica takes a key's requests from its shared limit up to ``rate_lease`` at once and
    #: spends them within ``rate_lease_s`` (1: one actor call per request).
    rate_lease: int = Field(default=10, ge=1)
    rate_lease_s: float = Field(default=1.0, gt=0)
    #: How long an API replica trusts what the key store said of a key: a revoked key is refused
    #: on every replica within ``key_cache_ttl_s``; a key created a moment ago works within
    #: ``unknown_key_ttl_s``. 0 reads the store on every request (~2.4 ms on milvus-lite).
    key_cache_ttl_s: float = Field(default=1.0, ge=0, le=60)
    unknown_key_ttl_s: float = Field(default=1.0, ge=0, le=60)
    #: Keys each replica keeps (least recently used leave first): a flood of random keys stays this size.
    key_cache_entries: int = Field(default=10_000, ge=0)
    #: Failed authentications (wrong, revoked or malformed keys) each client address may make
    #: per second per replica, and at once; above it, 429 with Retry-After and no store read.
    failed_auth_per_s: float = Field(default=2.0, ge=0)
    failed_auth_burst: int = Field(default=20, ge=1)


class AuditSettings(Section):
    """How audit rows are written: queued by the request, written in batches off its path
    (``strata.access.audit``). An entry is lost only if its process dies before its batch."""

    #: The longest an entry waits for its batch while the store answers.
    flush_interval_s: float = Field(default=0.2, gt=0, le=60)
    #: Entries per store call; this many queued start a batch at once.
    max_batch: int = Field(default=500, ge=1, le=10_000)
    #: Entries a process keeps while the store refuses them; past it the oldest are dropped (and logged).
    max_pending: int = Field(default=100_000, ge=1, le=10_000_000)

    @model_validator(mode="after")
    def _batch_fits(self) -> AuditSettings:
        if self.max_pending < self.max_batch:
            raise ValueError("audit.max_pending must be at least audit.max_batch")
        return self
