"""What an agent reads before it answers: the context to put in front of the LLM, and search."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from fastapi import APIRouter, Header, Response

from strata.layers import LAYERS
from strata.schema import ContextRequest, ContextResult, SearchRequest, SearchResult
from strata_serve.routes.common import Routes, json_response

__all__ = ["ContextRoutes", "router"]

router = APIRouter()


class ContextRoutes(Routes):
    """The context for an LLM, and scored hits across layers."""

    @router.post("/v1/context", response_model=ContextResult, tags=["context"])
    async def build_context(
        self, body: ContextRequest, authorization: str | None = Header(default=None)
    ) -> Response:
        """The context to put in front of the LLM: working memory plus the task type's layers
        (or ``layers``), of those the key sees. With a session-bound key, episodic memory is
        read from that session only."""
        policy = self._settings.context.policies.get(body.task_type)
        info, layers = await self._gate.reader(
            authorization,
            "build_context",
            session=body.session_id,
            asked=body.layers,
            default=[layer for layer in LAYERS if policy is None or layer in policy],
            always=["working"],
        )
        session_only = info.session_id is not None
        context = await self._flow.build_context(info.tenant, body, session_only=session_only, layers=layers)
        return json_response(context)

    @router.post("/v1/search", response_model=SearchResult, tags=["search"])
    async def search(self, body: SearchRequest, authorization: str | None = Header(default=None)) -> Response:
        """Scored hits across ``layers`` (by default every layer the key sees); a time expression in
        the query narrows the time range."""
        info, layers = await self._gate.reader(authorization, "search", session=body.session_id, asked=body.layers)
        return json_response(await self._flow.search(info.tenant, body.model_copy(update={"layers": layers})))
