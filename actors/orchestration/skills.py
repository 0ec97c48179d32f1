"""Procedural memory: skills learned from traces, found for a task, counted, edited, removed."""

from __future__ import annotations

import asyncio

from strata.counting import on_behalf_of
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
    SkillVersionOut,
)
from strata_actors.orchestration.audit import AuditFlow
from strata_actors.orchestration.base import plain_trace

__all__ = ["SkillFlow"]

#: A skill's fields that hold what a user wrote (redacted as any write's).
_CONTENT = ("skill_name", "description", "trigger_conditions", "steps", "common_pitfalls", "success_criteria", "tasks")


class SkillFlow(AuditFlow):
    """The procedural layer's calls, with PII redaction and the audit history."""

    async def extract_skill(self, tenant: str, body: SkillExtractIn, *, by: str = "") -> SkillOut:
        """Learn a skill from a trace now (merging into a near-duplicate)."""
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        skill = await self.router.procedural(tenant).extract_skill(
            tenant, body.task, plain_trace(body.trace), body.outcome, by=by, ttl_s=body.ttl_s
        )
        await self._record(tenant, by, "extract_skill", "procedural", skill.skill_id, skill.version)
        return skill

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
        procedural = self.router.procedural(tenant)
        if task is None:
            if after is not None:
                validate_id(after, field="after")
            return await procedural.list_skills(tenant, after=after, limit=limit)
        if not task.strip():
            raise InvalidInput("task is blank", field="task")
        task = await asyncio.to_thread(self._pii.for_tenant(tenant).text, task)
        with on_behalf_of(tenant):
            vector = (await self._embed_query([task]))[0]
        found = await procedural.search(
            tenant, query=task, vector=vector, top_k=top_k, min_success_rate=min_success_rate
        )
        return SkillList(skills=[SkillOut.model_validate(s) for s in found], total=len(found))

    async def get_skill(self, tenant: str, skill_id: str) -> SkillOut:
        validate_id(skill_id, field="skill_id")
        return await self.router.procedural(tenant).get_skill(tenant, skill_id)

    async def record_outcome(
        self, tenant: str, skill_id: str, body: OutcomeIn, *, expected_version: int | None = None, by: str = ""
    ) -> SkillOut:
        """Count a use; without ``expected_version`` an atomic increment, with it a 409 when stale."""
        validate_id(skill_id, field="skill_id")
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        skill = await self.router.procedural(tenant).record_outcome(
            tenant, skill_id, body.success, body.notes, expected_version=expected_version, by=by
        )
        await self._record(tenant, by, "record_outcome", "procedural", skill_id, skill.version)
        return skill

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
        skill = await self.router.procedural(tenant).update_skill(
            tenant, skill_id, changes, expected_version=expected_version, by=by
        )
        await self._record(tenant, by, "update_skill", "procedural", skill_id, skill.version)
        return skill

    async def delete_skill(
        self, tenant: str, skill_id: str, *, expected_version: int | None = None, by: str = ""
    ) -> SkillDeleted:
        validate_id(skill_id, field="skill_id")
        deleted = await self.router.procedural(tenant).delete_skill(tenant, skill_id, expected_version=expected_version)
        await self._record(tenant, by, "delete_skill", "procedural", skill_id, deleted.version)
        return deleted

    async def skill_history(self, tenant: str, skill_id: str) -> SkillHistory:
        validate_id(skill_id, field="skill_id")
        return await self.router.procedural(tenant).history(tenant, skill_id)

    async def import_skill(
        self, tenant: str, skill: SkillOut, history: list[SkillVersionOut], *, by: str = ""
    ) -> tuple[SkillOut, bool]:
        """Write a skill as exported, with its id, counts and history (``strata restore``), its
        content redacted by the tenant's PII rules as any write's; and whether it was written."""
        validate_id(skill.skill_id, field="skill_id")
        redact = self._pii.for_tenant(tenant)

        def redacted() -> tuple[SkillOut, list[SkillVersionOut]]:
            content = {name: redact.value(getattr(skill, name)) for name in _CONTENT}
            versions = [
                version.model_copy(update={"snapshot": redact.value(version.snapshot),
                                           "outcome": redact.value(version.outcome)})
                for version in history
            ]
            return skill.model_copy(update=content), versions

        skill, history = await asyncio.to_thread(redacted)
        out, written = await self.router.procedural(tenant).import_skill(tenant, skill, history)
        if written:
            await self._record(tenant, by, "import_skill", "procedural", out.skill_id, out.version)
        return out, written

    async def skill_job(self, tenant: str, job_id: str) -> SkillJobOut:
        validate_id(job_id, field="job_id")
        return await self.router.procedural(tenant).skill_job(tenant, job_id)
