"""Recording turns and interactions, listing sessions and their turns, and forgetting them."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from fastapi import APIRouter, Header, Query

from strata.access.scopes import Need, may
from strata.schema import ForgetResult, InteractionIn, InteractionResult, RecordTurnsResult, TurnBatchIn, TurnIn
from strata.schema.outputs import SessionList, SessionTurns
from strata_serve.auth import ROUTES
from strata_serve.routes.common import SESSION, Routes, expected_version, id_path

__all__ = ["TurnRoutes", "router"]

router = APIRouter()

_TURN_ID = id_path("Turn id")


class TurnRoutes(Routes):
    """Turns in, sessions and turns out, and forgetting them."""

    @router.post("/v1/sessions/{session_id}/turns", status_code=201, response_model=RecordTurnsResult, tags=["turns"])
    async def record_turn(
        self,
        body: TurnIn,
        session_id: str = SESSION,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> RecordTurnsResult:
        """Record one turn in episodic and working memory. ``If-Match``: expected episodic version."""
        key = await self._gate.caller(authorization, "record_turn", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        recorded: RecordTurnsResult = await self._flow.record_turns(
            tenant, session_id, [body], expected_version=expected_version(if_match), by=key_id
        )
        return recorded

    @router.post(
        "/v1/sessions/{session_id}/turns/batch", status_code=201, response_model=RecordTurnsResult, tags=["turns"]
    )
    async def record_turns(
        self,
        body: TurnBatchIn,
        session_id: str = SESSION,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> RecordTurnsResult:
        """Record up to 1,000 turns at once (importing history): one write, one embedding batch."""
        key = await self._gate.caller(authorization, "record_turns", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        recorded: RecordTurnsResult = await self._flow.record_turns(
            tenant, session_id, body.turns, expected_version=expected_version(if_match), by=key_id
        )
        return recorded

    @router.get("/v1/sessions", response_model=SessionList, tags=["turns"])
    async def list_sessions(
        self,
        after: str | None = Query(default=None, description="The last session_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> SessionList:
        """The sessions with turns in episodic memory, by id, a page at a time: how many turns,
        the first and last turn's time. Every session's: not for a session key."""
        tenant = (await self._gate.caller(authorization, "list_sessions")).tenant
        page: SessionList = await self._flow.list_sessions(tenant, after=after, limit=limit)
        return page

    @router.get("/v1/sessions/{session_id}/turns", response_model=SessionTurns, tags=["turns"])
    async def list_turns(
        self,
        session_id: str = SESSION,
        after: str | None = Query(default=None, description="The last turn_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        newest_first: bool = Query(default=False, description="The latest turn first; after then pages back in time"),
        authorization: str | None = Header(default=None),
    ) -> SessionTurns:
        """The session's turns in time order (or newest first), a page at a time; 404 for a
        session without turns."""
        tenant = (await self._gate.caller(authorization, "list_turns", session=session_id)).tenant
        page: SessionTurns = await self._flow.list_turns(
            tenant, session_id, after=after, limit=limit, newest_first=newest_first
        )
        return page

    @router.post("/v1/interactions", status_code=201, response_model=InteractionResult, tags=["turns"])
    async def post_interaction(
        self, body: InteractionIn, authorization: str | None = Header(default=None)
    ) -> InteractionResult:
        """Record an exchange in working and episodic memory; a successful coding /
        debugging / deployment task with a trace teaches a skill in the background, if the
        key may write skills (a session key may not)."""
        key = await self._gate.caller(authorization, "post_interaction", session=body.session_id)
        learns = may(key, Need(writes=ROUTES["post_interaction"].learns), session=body.session_id)
        recorded: InteractionResult = await self._flow.post_interaction(key.tenant, body, by=key.key_id, learn=learns)
        return recorded

    @router.delete("/v1/sessions/{session_id}", response_model=ForgetResult, tags=["forget"])
    async def forget_session(
        self, session_id: str = SESSION, authorization: str | None = Header(default=None)
    ) -> ForgetResult:
        """Forget the session in every layer: turns, vectors, summaries, working memory."""
        key = await self._gate.caller(authorization, "forget_session", session=session_id)
        tenant, key_id = key.tenant, key.key_id
        forgotten: ForgetResult = await self._flow.forget_session(tenant, session_id, by=key_id)
        return forgotten

    @router.delete("/v1/sessions/{session_id}/turns/{turn_id}", response_model=ForgetResult, tags=["forget"])
    async def forget_turn(
        self, session_id: str = SESSION, turn_id: str = _TURN_ID, authorization: str | None = Header(default=None)
    ) -> ForgetResult:
        """Forget one turn: its episodic row and vector, the summaries that cover it (the rest of
        their turns are summarised again), and its copies in working memory."""
        key = await self._gate.caller(authorization, "forget_turn", session=session_id)
        forgotten: ForgetResult = await self._flow.forget_turn(key.tenant, session_id, turn_id, by=key.key_id)
        return forgotten
