"""API keys: each bearer key is bound to one tenant; only its hash is stored."""

from __future__ import annotations

import hashlib
import secrets
import time

from strata.ids import SYSTEM_TENANT, validate_id
from strata.records import Record, RecordStore

__all__ = ["KeyStore", "hash_key"]

#: Keys live in a tenant of their own, out of reach of any tenant's calls.
KEY_TENANT = SYSTEM_TENANT
_KIND = "apikey"


def hash_key(key: str) -> str:
    # surrogatepass: a garbage key with lone surrogates hashes instead of raising.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class KeyStore:
    def __init__(self, store: RecordStore, collection: str) -> None:
        self._store = store
        self._collection = collection

    def create(self, tenant: str) -> str:
        """A new key for ``tenant``; the secret is returned once and stored hashed."""
        validate_id(tenant, field="tenant")
        key = "sk-strata-" + secrets.token_urlsafe(24)
        digest = hash_key(key)
        self._store.upsert(
            self._collection,
            [
                Record(
                    pk=f"{KEY_TENANT}/{_KIND}/{digest}",
                    tenant=KEY_TENANT,
                    session=_KIND,
                    kind=_KIND,
                    ts_ms=int(time.time() * 1000),
                    text="",
                    payload={"tenant": tenant, "key_id": digest[:12]},
                )
            ],
        )
        return key

    def tenant_of(self, key: str) -> str | None:
        """The tenant a key belongs to, or None for an unknown key."""
        if not key.startswith("sk-strata-") or len(key) > 200:
            return None
        rows = self._store.get(self._collection, tenant=KEY_TENANT, pks=[f"{KEY_TENANT}/{_KIND}/{hash_key(key)}"])
        return str(rows[0].payload["tenant"]) if rows else None
