"""Procedural memory: skills learned from traces, found for a task, counted, edited, removed."""

from __future__ import annotations

import asyncio

from strata.errors import InvalidInput, PreconditionRequired
from strata.ids import validate_id
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
from strata_actors.orchestration.audit import AuditFlow
from strata_actors.orchestration.base import call, plain_trace

__all__ = ["SkillFlow"]


class SkillFlow(AuditFlow):
    """The procedural layer's calls, with PII redaction and the audit history."""

    async def extract_skill(self, tenant: str, body: SkillExtractIn, *, by: str = "") -> SkillOut:
        """Learn a skill from a trace now (merging into a near-duplicate)."""
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        out = await call(
            self._actor("procedural", tenant).extract_skill.remote(
                tenant, body.task, plain_trace(body.trace), body.outcome, by=by, ttl_s=body.ttl_s
            )
        )
        await self._record(tenant, by, "extract_skill", "procedural", out["skill_id"], out["version"])
        return SkillOut(**out)

    async def find_skills(
        self,
        tenant: str,
        *,
        task: str | None = None,
        top_k: int = 5,
        min_success_rate: float | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> SkillList:
        """Skills for a task, best first; without a task, all skills by id, a page at a time."""
        actor = self._actor("procedural", tenant)
        if task is None:
            if after is not None:
                validate_id(after, field="after")
            return SkillList(**await call(actor.list_skills.remote(tenant, after=after, limit=limit)))
        if not task.strip():
            raise InvalidInput("task is blank", field="task")
        task = await asyncio.to_thread(self._pii.for_tenant(tenant).text, task)
        vector = (await self._embed([task]))[0]
        found = await self._procedural_search(tenant, vector, task, top_k=top_k, min_success_rate=min_success_rate)
        return SkillList(skills=[SkillOut(**s) for s in found["skills"]], total=len(found["skills"]))

    async def get_skill(self, tenant: str, skill_id: str) -> SkillOut:
        validate_id(skill_id, field="skill_id")
        return SkillOut(**await call(self._actor("procedural", tenant).get_skill.remote(tenant, skill_id)))

    async def record_outcome(
        self, tenant: str, skill_id: str, body: OutcomeIn, *, expected_version: int | None = None, by: str = ""
    ) -> SkillOut:
        """Count a use; without ``expected_version`` an atomic increment, with it a 409 when stale."""
        validate_id(skill_id, field="skill_id")
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        out = await call(
            self._actor("procedural", tenant).record_outcome.remote(
                tenant, skill_id, body.success, body.notes, expected_version=expected_version, by=by
            )
        )
        await self._record(tenant, by, "record_outcome", "procedural", skill_id, out["version"])
        return SkillOut(**out)

    async def update_skill(
        self, tenant: str, skill_id: str, body: SkillPatch, *, expected_version: int | None, by: str = ""
    ) -> SkillOut:
        validate_id(skill_id, field="skill_id")
        if expected_version is None:
            raise PreconditionRequired(
                "editing a skill needs If-Match with the version you edited (GET the skill for its ETag)",
                field="If-Match",
            )
        redacted = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        changes = redacted.model_dump(exclude_unset=True)
        out = await call(
            self._actor("procedural", tenant).update_skill.remote(
                tenant, skill_id, changes, expected_version=expected_version, by=by
            )
        )
        await self._record(tenant, by, "update_skill", "procedural", skill_id, out["version"])
        return SkillOut(**out)

    async def delete_skill(
        self, tenant: str, skill_id: str, *, expected_version: int | None = None, by: str = ""
    ) -> SkillDeleted:
        validate_id(skill_id, field="skill_id")
        out = await call(
            self._actor("procedural", tenant).delete_skill.remote(tenant, skill_id, expected_version=expected_version)
        )
        await self._record(tenant, by, "delete_skill", "procedural", skill_id, out["version"])
        return SkillDeleted(**out)

    async def skill_history(self, tenant: str, skill_id: str) -> SkillHistory:
        validate_id(skill_id, field="skill_id")
        return SkillHistory(**await call(self._actor("procedural", tenant).history.remote(tenant, skill_id)))

    async def skill_job(self, tenant: str, job_id: str) -> SkillJobOut:
        validate_id(job_id, field="job_id")
        return SkillJobOut(**await call(self._actor("procedural", tenant).skill_job.remote(tenant, job_id)))
