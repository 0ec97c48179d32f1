"""Skills (procedural memory): learn one from a trace, find, read, count a use, edit, delete, and
its history; and the background skill-extraction jobs."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from fastapi import APIRouter, Header, Query, Response

from strata.schema import (
    OutcomeIn,
    SkillDeleted,
    SkillExtractIn,
    SkillHistory,
    SkillJobOut,
    SkillList,
    SkillOut,
    SkillPatch,
)
from strata_serve.routes.common import Routes, expected_version, id_path

__all__ = ["SkillRoutes", "router"]

router = APIRouter()

_SKILL_ID = id_path("Skill id")
_JOB_ID = id_path("Skill job id")


class SkillRoutes(Routes):
    """Skills and skill-extraction jobs."""

    @router.post("/v1/skills:extract", status_code=201, response_model=SkillOut, tags=["skills"])
    async def extract_skill(
        self, body: SkillExtractIn, response: Response, authorization: str | None = Header(default=None)
    ) -> SkillOut:
        """Learn a skill from a successful trace (201), or update the near-duplicate skill it
        belongs to (200, ``merged: true``). With an LLM the LLM drafts it; a 502 keeps the
        trace and learns it in the background (``job_id`` in the body)."""
        key = await self._gate.caller(authorization, "extract_skill")
        tenant, key_id = key.tenant, key.key_id
        skill: SkillOut = await self._flow.extract_skill(tenant, body, by=key_id)
        response.status_code = 200 if skill.merged else 201
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @router.get("/v1/skills", response_model=SkillList, tags=["skills"])
    async def find_skills(
        self,
        task: str | None = Query(default=None, min_length=1, max_length=2000, description="Find skills for this task"),
        top_k: int = Query(default=5, ge=1, le=100),
        min_success_rate: float | None = Query(
            default=None,
            ge=0,
            le=1,
            description="Default procedural.min_success_rate; applies once a skill has min_uses uses",
        ),
        after: str | None = Query(default=None, description="Without task: the last skill_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> SkillList:
        """Skills for a task, best first (similarity x confidence in the success rate);
        without ``task``, every skill by id."""
        tenant = (await self._gate.caller(authorization, "find_skills")).tenant
        skills: SkillList = await self._flow.find_skills(
            tenant, task=task, top_k=top_k, min_success_rate=min_success_rate, after=after, limit=limit
        )
        return skills

    @router.get("/v1/skills/{skill_id}", response_model=SkillOut, tags=["skills"])
    async def get_skill(
        self, response: Response, skill_id: str = _SKILL_ID, authorization: str | None = Header(default=None)
    ) -> SkillOut:
        """The skill; the ETag is its version."""
        tenant = (await self._gate.caller(authorization, "get_skill")).tenant
        skill: SkillOut = await self._flow.get_skill(tenant, skill_id)
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @router.post("/v1/skills/{skill_id}/outcomes", response_model=SkillOut, tags=["skills"])
    async def record_outcome(
        self,
        body: OutcomeIn,
        response: Response,
        skill_id: str = _SKILL_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> SkillOut:
        """Count one use. Without ``If-Match`` an atomic increment; with it, applied only at
        that version (else 409 with the current one)."""
        key = await self._gate.caller(authorization, "record_outcome")
        tenant, key_id = key.tenant, key.key_id
        skill: SkillOut = await self._flow.record_outcome(
            tenant, skill_id, body, expected_version=expected_version(if_match), by=key_id
        )
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @router.patch("/v1/skills/{skill_id}", response_model=SkillOut, tags=["skills"])
    async def update_skill(
        self,
        body: SkillPatch,
        response: Response,
        skill_id: str = _SKILL_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> SkillOut:
        """Edit the skill's content; ``If-Match`` is required (428 without, 409 when stale)."""
        key = await self._gate.caller(authorization, "update_skill")
        tenant, key_id = key.tenant, key.key_id
        skill: SkillOut = await self._flow.update_skill(
            tenant, skill_id, body, expected_version=expected_version(if_match), by=key_id
        )
        response.headers["ETag"] = f'"{skill.version}"'
        return skill

    @router.delete("/v1/skills/{skill_id}", response_model=SkillDeleted, tags=["skills"])
    async def delete_skill(
        self,
        skill_id: str = _SKILL_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> SkillDeleted:
        """Remove the skill, its vector and its history."""
        key = await self._gate.caller(authorization, "delete_skill")
        tenant, key_id = key.tenant, key.key_id
        deleted: SkillDeleted = await self._flow.delete_skill(
            tenant, skill_id, expected_version=expected_version(if_match), by=key_id
        )
        return deleted

    @router.get("/v1/skills/{skill_id}/history", response_model=SkillHistory, tags=["skills"])
    async def skill_history(
        self, skill_id: str = _SKILL_ID, authorization: str | None = Header(default=None)
    ) -> SkillHistory:
        """Every version of the skill: when, by which key, what changed."""
        tenant = (await self._gate.caller(authorization, "skill_history")).tenant
        history: SkillHistory = await self._flow.skill_history(tenant, skill_id)
        return history

    @router.get("/v1/skill-jobs/{job_id}", response_model=SkillJobOut, tags=["skills"])
    async def skill_job(self, job_id: str = _JOB_ID, authorization: str | None = Header(default=None)) -> SkillJobOut:
        """A background skill extraction: pending, running, done (with the skill) or failed."""
        tenant = (await self._gate.caller(authorization, "skill_job")).tenant
        job: SkillJobOut = await self._flow.skill_job(tenant, job_id)
        return job
