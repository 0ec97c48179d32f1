"""The tenant's audit history: every change a request makes is queued (best effort) and
written in batches off the request path (:class:`~strata.access.audit.AuditWriter`); read
back oldest first, after the tenant's queued entries. It lives in the store's state
collection, beside the layers' rows."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from strata.access.audit import AuditEntry, AuditLog, AuditWriter
from strata.access.audit import entry as audit_entry
from strata.errors import InvalidInput, StrataError
from strata.schema import AuditEntryOut, AuditHistory
from strata.store.layout import open_store
from strata_actors.orchestration.base import FlowBase

__all__ = ["AuditFlow"]

_log = logging.getLogger(__name__)


class AuditFlow(FlowBase):
    """Appending to and reading the tenant's audit history."""

    def _audit_writer(self) -> AuditWriter:
        if self._audit is None:
            audit = self.settings.audit
            self._audit = AuditWriter(
                self._open_audit_log,
                flush_interval_s=audit.flush_interval_s,
                max_batch=audit.max_batch,
                max_pending=audit.max_pending,
            )
        return self._audit

    def _open_audit_log(self) -> AuditLog:
        store, names = open_store(self.settings)
        return AuditLog(store, names.state)

    async def _record(self, tenant: str, by: str, op: str, layer: str, record_id: str, version: int | None) -> None:
        """Queue an entry for the tenant's audit history; it is written within about
        ``audit.flush_interval_s``. Best effort: the change is durable already, and failing
        the call now would make the caller retry a write that happened."""
        try:
            self._audit_writer().add(tenant, audit_entry(op, layer, record_id, key_id=by, version=version))
        except StrataError as exc:
            _log.warning("audit of %s %s for tenant %s not written: %s", op, record_id, tenant, exc.message)

    async def audit(
        self, tenant: str, *, since: datetime | None = None, after: str | None = None, limit: int = 100
    ) -> AuditHistory:
        """The tenant's changes, oldest first: time, key id, operation, layer, record, version.
        The tenant's queued entries are written first: a caller sees its own changes.
        ``since`` without a zone is UTC; ``after``: the ``next_after`` of the page before
        (:meth:`AuditLog.page`)."""
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}", field="limit")
        writer = self._audit_writer()

        def read() -> tuple[list[AuditEntry], str | None]:
            writer.flush(tenant)
            return writer.log().page(tenant, since=since, after=after, limit=limit)

        entries, next_after = await asyncio.to_thread(read)
        return AuditHistory(entries=[AuditEntryOut(**e.to_payload()) for e in entries], next_after=next_after)

    async def aclose(self) -> None:
        """Write the audit entries still queued (call when the process shuts down; an exiting
        interpreter does it too)."""
        if self._audit is not None:
            await self._audit.aclose()
