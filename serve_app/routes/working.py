"""A session's working memory: read it, add to it."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from fastapi import APIRouter, Header, Response

from strata.schema import WorkingItemsIn, WorkingState
from strata_serve.routes.common import SESSION, Routes, expected_version

__all__ = ["WorkingRoutes", "router"]

router = APIRouter()


class WorkingRoutes(Routes):
    """A session's working memory."""

    @router.get("/v1/sessions/{session_id}/working", response_model=WorkingState, tags=["working"])
    async def get_working(
        self, response: Response, session_id: str = SESSION, authorization: str | None = Header(default=None)
    ) -> WorkingState:
        """The session's working memory; the ETag is its version."""
        tenant = (await self._gate.caller(authorization, "get_working", session=session_id)).tenant
        state: WorkingState = await self._flow.working(tenant, session_id)
        response.headers["ETag"] = f'"{state.version}"'
        return state

    @router.post("/v1/sessions/{session_id}/working/items", response_model=WorkingState, tags=["working"])
    async def add_working_items(
        self,
        body: WorkingItemsIn,
        response: Response,
        session_id: str = SESSION,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> WorkingState:
        """Add items; with ``If-Match`` the write applies only at that version (else 409)."""
        key = await self._gate.caller(authorization, "add_working_items", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        state: WorkingState = await self._flow.add_working_items(
            tenant, session_id, body, expected_version=expected_version(if_match), by=key_id
        )
        response.headers["ETag"] = f'"{state.version}"'
        return state
