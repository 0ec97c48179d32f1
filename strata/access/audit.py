"""The audit history: who changed what, when, at which version — never the content.

One row per change in the state collection, under the tenant it concerns:
time, key id, operation, layer, record id and the version it made. Rows
carry no text, so forgetting an item leaves its audit trail without its
content (the issue's rule), and forgetting a tenant leaves the record that
it was forgotten.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from strata.ids import validate_id
from strata.store.records import Record, RecordStore

__all__ = ["AUDIT_KIND", "AuditEntry", "AuditLog", "entry"]

AUDIT_KIND = "audit"


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    key_id: str
    #: What was done: ``record_turns``, ``index_document``, ``delete_skill``, ``forget_tenant`` ...
    op: str
    layer: str
    #: The record it touched: a session, a document, a skill, the tenant.
    record_id: str
    #: The version the change made (None for changes that make none).
    version: int | None = None

    def to_payload(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.isoformat()}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> AuditEntry:
        return cls(
            at=datetime.fromisoformat(payload["at"]),
            key_id=str(payload.get("key_id", "")),
            op=str(payload["op"]),
            layer=str(payload["layer"]),
            record_id=str(payload["record_id"]),
            version=payload.get("version"),
        )


class AuditLog:
    def __init__(self, store: RecordStore, collection: str) -> None:
        self._store = store
        self._collection = collection

    def append(self, tenant: str, entries: list[AuditEntry]) -> None:
        validate_id(tenant, field="tenant")
        now_ms = int(time.time() * 1000)
        self._store.upsert(
            self._collection,
            [
                Record(
                    # Time first: the ids sort in the order the changes were made.
                    pk=f"{tenant}/{AUDIT_KIND}/{int(e.at.timestamp() * 1000):013d}-{uuid.uuid4().hex[:8]}",
                    tenant=tenant,
                    session=AUDIT_KIND,
                    kind=AUDIT_KIND,
                    ts_ms=now_ms,
                    text="",
                    payload=e.to_payload(),
                )
                for e in entries
            ],
        )

    def read(self, tenant: str, *, since: datetime | None = None, limit: int = 100) -> list[AuditEntry]:
        """The tenant's changes since ``since``, oldest first, at most ``limit``."""
        rows = self._store.scan(
            self._collection, tenant=tenant, session=AUDIT_KIND, kinds=[AUDIT_KIND], with_vectors=False
        )
        rows.sort(key=lambda r: r.pk)
        entries = [AuditEntry.from_payload(r.payload) for r in rows]
        if since is not None:
            entries = [e for e in entries if e.at > since]
        return entries[:limit]


def entry(op: str, layer: str, record_id: str, *, key_id: str, version: int | None = None) -> AuditEntry:
    return AuditEntry(at=datetime.now(UTC), key_id=key_id, op=op, layer=layer, record_id=record_id, version=version)

