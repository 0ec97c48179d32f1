"""The tenant's audit history: every change, never its content."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from datetime import datetime

from fastapi import APIRouter, Header, Query

from strata.schema import AuditHistory
from strata_serve.routes.common import Routes

__all__ = ["AuditRoutes", "router"]

router = APIRouter()

# A module-level marker, as FastAPI reads it: once, at import; nothing is called per request.
_SINCE = Query(default=None, description="Only changes after this time; without a zone, UTC")


class AuditRoutes(Routes):
    """The audit history of the caller's tenant."""

    @router.get("/v1/audit", response_model=AuditHistory, tags=["audit"])
    async def audit(
        self,
        since: datetime | None = _SINCE,
        after: str | None = Query(default=None, max_length=64, description="next_after of the previous page"),
        limit: int = Query(default=100, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> AuditHistory:
        """Every write, update and delete of your tenant: when, which key, which layer and
        record, which version. Never the content. A page at a time, oldest first."""
        tenant = (await self._gate.caller(authorization, "audit")).tenant
        history: AuditHistory = await self._flow.audit(tenant, since=since, after=after, limit=limit)
        return history
