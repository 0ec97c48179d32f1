"""The tenant's audit history: every change a request makes is appended (best effort), and
read back oldest first. It lives in the store's state collection, beside the layers' rows."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from strata.access.audit import AuditLog
from strata.access.audit import entry as audit_entry
from strata.errors import InvalidInput, StrataError
from strata.schema import AuditEntryOut, AuditHistory
from strata.store.layout import open_store
from strata_actors.orchestration.base import FlowBase

__all__ = ["AuditFlow"]

_log = logging.getLogger(__name__)


class AuditFlow(FlowBase):
    """Appending to and reading the tenant's audit history."""

    async def _audit_log(self) -> AuditLog:
        if self._audit is None:
            store, names = await asyncio.to_thread(open_store, self.settings)
            self._audit = AuditLog(store, names.state)
        return self._audit

    async def _record(
        self, tenant: str, by: str, op: str, layer: str, record_id: str, version: int | None
    ) -> None:
        """Append to the tenant's audit history. Best effort: the change is durable already,
        and failing the call now would make the caller retry a write that happened."""
        try:
            log_ = await self._audit_log()
            await asyncio.to_thread(log_.append, tenant, [audit_entry(op, layer, record_id, key_id=by, version=version)])
        except StrataError as exc:
            _log.warning("audit of %s %s for tenant %s not written: %s", op, record_id, tenant, exc.message)

    async def audit(self, tenant: str, *, since: datetime | None = None, limit: int = 100) -> AuditHistory:
        """The tenant's changes, oldest first: time, key id, operation, layer, record, version."""
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}", field="limit")
        log_ = await self._audit_log()
        entries = await asyncio.to_thread(log_.read, tenant, since=since, limit=limit)
        return AuditHistory(entries=[AuditEntryOut(**e.to_payload()) for e in entries])
