"""The procedural layer's shard actor: skills read, found, counted, edited and deleted.

Concurrency: every change of a skill (an outcome, an edit, a merge, a
delete) is a :meth:`LayerShard.mutate` of the skill's own version scope,
under the tenant's lock, so concurrent updates are applied one after the
other and none is lost. An outcome without ``expected_version`` is the
server-side atomic increment; with it, a stale version is a 409.

Skills are learned from traces by the extraction jobs of its base class,
:class:`~strata_actors.skill_jobs.SkillJobs`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from strata.errors import NotFound, VersionConflict
from strata.procedural.extractors import skill_search_text
from strata.procedural.memory import SKILL, ProceduralMemory, Skill, history_entry, validated_changes
from strata.store.layout import Collections
from strata.store.records import RecordStore
from strata_actors.expiry import WholeRecordExpiry
from strata_actors.skill_jobs import SkillJobs

__all__ = ["ProceduralShard"]


def _hit(skill: Skill, version: int, similarity: float, score: float, relevance: float) -> dict[str, Any]:
    return {**skill.to_dict(), "version": version, "similarity": similarity, "score": score, "relevance": relevance,
            "brief": skill.brief()}


class ProceduralShard(WholeRecordExpiry, SkillJobs):
    """The procedural layer of the tenants of one shard: skills, learned by :class:`SkillJobs`."""

    layer_name = "procedural"
    vectors_in = "procedural"
    batched_reads = frozenset({"search"})
    expiring_kinds = (SKILL,)

    def make_layer(self, tenant: str, store: RecordStore, collections: Collections) -> ProceduralMemory:
        return ProceduralMemory(
            tenant, store=store, collection=collections.procedural, settings=self.settings.procedural,
            ttl=self.settings.ttl,
        )

    def tenant_rows(self, collections: Collections) -> tuple[str, list[str] | None]:
        return collections.procedural, None

    def load_layer(self, layer: ProceduralMemory) -> None:
        layer.load()

    # -- outcomes, edits, deletes ---------------------------------------------------

    async def record_outcome(
        self,
        tenant: str,
        skill_id: str,
        success: bool,
        notes: str | None = None,
        *,
        expected_version: int | None = None,
        by: str = "",
    ) -> dict[str, Any]:
        slot = await self._tenant(tenant)
        slot.layer.get(skill_id)  # 404 before claiming a version
        now = datetime.now(UTC)
        skill, version = await self.mutate_versioned(
            tenant,
            skill_id,
            expected_version,
            lambda layer, v: layer.write_outcome(skill_id, success=success, notes=notes, by=by, version=v, now=now),
            lambda layer, pending: layer.apply(pending),
        )
        return {**skill.to_dict(), "version": version}

    async def update_skill(
        self, tenant: str, skill_id: str, changes: dict[str, Any], *, expected_version: int | None, by: str = ""
    ) -> dict[str, Any]:
        slot = await self._tenant(tenant)
        slot.layer.get(skill_id)
        fields = validated_changes(changes)
        now = datetime.now(UTC)
        skill, version = await self.mutate_versioned(
            tenant,
            skill_id,
            expected_version,
            lambda layer, v: layer.write_edit(
                skill_id, fields, embed=lambda text: self._embed_one(text, tenant), by=by, version=v, now=now
            ),
            lambda layer, pending: layer.apply(pending),
        )
        return {**skill.to_dict(), "version": version}

    async def delete_skill(self, tenant: str, skill_id: str, *, expected_version: int | None = None) -> dict[str, Any]:
        slot = await self._tenant(tenant)
        slot.layer.get(skill_id)  # NotFound before claiming a version
        removed, version = await self.remove(
            tenant, skill_id, expected_version, lambda layer: layer.delete(skill_id), lambda layer: layer.drop(skill_id)
        )
        return {"skill_id": skill_id, "removed": removed, "version": version}

    async def import_skill(
        self, tenant: str, skill: dict[str, Any], history: Sequence[dict[str, Any]]
    ) -> dict[str, Any]:
        """Write a skill as it was exported (``strata restore``): its id, counts, times and every
        version of its history; its vector is made by this stack's embedder. The skill's version
        is the exported one (or the next of this tenant's, if that is higher), so a later change
        never takes a version its history already has. A skill already here as exported is left
        alone (``written`` False).

        Raises:
            VersionConflict: the tenant has a skill of that id with other content or counts.
        """
        imported = Skill.from_dict(skill)
        entries = sorted((history_entry(entry) for entry in history), key=lambda e: e.version)
        vector = (await self.embed([skill_search_text(imported.draft)], tenant=tenant))[0]
        async with self._locked(tenant) as slot:
            await self.refuse_if_forgetting(tenant, imported.skill_id)  # it claims a version without mutate
            current = await self._version(tenant, slot, imported.skill_id)
            try:
                there = slot.layer.get(imported.skill_id)
            except NotFound:
                there = None
            if there is not None:
                if _same(there, imported):
                    return {**there.to_dict(), "version": current, "written": False}
                raise VersionConflict(
                    f"skill {imported.skill_id!r} is already in this tenant with other content or counts "
                    f"(version {current}): not overwritten",
                    current_version=current,
                    layer=self.layer_name,
                )
            last = max([int(skill.get("version", 0)), *(e.version for e in entries)])
            version = await self._claim(tenant, slot, imported.skill_id, at_least=last)
            pending = await asyncio.to_thread(slot.layer.write_imported, imported, entries, vector)
            slot.layer.apply(pending)
            slot.last_used = time.monotonic()
        return {**imported.to_dict(), "version": version, "written": True}

    # -- reads ----------------------------------------------------------------

    async def get_skill(self, tenant: str, skill_id: str) -> dict[str, Any]:
        slot = await self._tenant(tenant)
        skill = slot.layer.get(skill_id)
        return {**skill.to_dict(), "version": await self.version(tenant, skill_id)}

    async def list_skills(self, tenant: str, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
        slot = await self._tenant(tenant)
        page, more = slot.layer.skills(after=after, limit=limit)
        versions = await self.versions(tenant, [s.skill_id for s in page])
        skills = [{**s.to_dict(), "version": versions[s.skill_id]} for s in page]
        return {
            "skills": skills,
            "total": len(slot.layer),
            "next_after": page[-1].skill_id if more else None,
        }

    async def search(
        self,
        tenant: str,
        *,
        query: str | None = None,
        vector: np.ndarray | None = None,
        top_k: int = 5,
        min_success_rate: float | None = None,
    ) -> dict[str, Any]:
        """Skills for a task (its text, or its embedding), best first."""
        if vector is None:
            if query is None:
                raise ValueError("give query or vector")
            vector = (await self.embed_query([query], tenant=tenant))[0]
        slot = await self._tenant(tenant)
        hits = slot.layer.search(np.asarray(vector, np.float32), top_k=top_k, min_success_rate=min_success_rate)
        versions = await self.versions(tenant, [h.skill.skill_id for h in hits])
        out = [_hit(h.skill, versions[h.skill.skill_id], h.similarity, h.score, h.relevance) for h in hits]
        return {"skills": out}

    async def history(self, tenant: str, skill_id: str) -> dict[str, Any]:
        slot = await self._tenant(tenant)
        entries = await asyncio.to_thread(slot.layer.history, skill_id)
        return {"skill_id": skill_id, "versions": [e.to_dict() for e in entries]}


def _same(a: Skill, b: Skill) -> bool:
    """The same skill, as far as a restore can tell: content, counts and last use."""
    return (a.draft, a.uses, a.successes, a.last_used) == (b.draft, b.uses, b.successes, b.last_used)
