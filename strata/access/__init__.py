"""Who may call, how often, and what they changed: API keys and their scopes, rate
limits, idempotent writes and the audit history. All of it is plain Python over
the record store; the HTTP app applies it at its edge.
"""

from __future__ import annotations

from strata.access.audit import AuditEntry, AuditLog, AuditWriter
from strata.access.idempotency import IdempotencyStore
from strata.access.keycache import KeyCache
from strata.access.keys import KeyStore, hash_key, open_keys
from strata.access.ratelimit import RateLimiter
from strata.access.scopes import Forbidden, authorize

__all__ = [
    "AuditEntry",
    "AuditLog",
    "AuditWriter",
    "Forbidden",
    "IdempotencyStore",
    "KeyCache",
    "KeyStore",
    "RateLimiter",
    "authorize",
    "hash_key",
    "open_keys",
]
