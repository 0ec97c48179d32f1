"""A skill restored from its export (strata restore) on the in-memory reference store: the
public view it is exported as becomes the same skill again in another tenant, with its id,
counts, times and every version of its history, and survives a reload."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from strata.config import ProceduralSettings
from strata.procedural.extractors import SkillDraft
from strata.procedural.memory import ProceduralMemory, Skill, history_entry
from strata.schema.outputs import SkillOut, SkillVersionOut
from strata.store.records import InMemoryRecordStore

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
DRAFT = SkillDraft(
    skill_name="deploy-api", description="How to deploy the API", trigger_conditions=["asked to deploy"],
    steps=["Run `make build`", "Run `make deploy ENV={env}`"], common_pitfalls=["a stale cache"],
    success_criteria=["the service answers"],
)


def _vector() -> np.ndarray:
    v = np.zeros(8, np.float32)
    v[0] = 1.0
    return v


def _tenant(store: InMemoryRecordStore, tenant: str) -> ProceduralMemory:
    return ProceduralMemory(tenant, store=store, collection="proc", settings=ProceduralSettings())


def test_an_exported_skill_comes_back_the_same_with_its_history() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("proc", dim=8)
    source = _tenant(store, "src")
    source.apply(source.write_learned("skill-a", DRAFT, _vector(), embed=lambda _: _vector(), task="deploy",
                                      by="k1", version=1, now=T0, ttl_s=None))
    for version, success in ((2, True), (3, False), (4, True)):
        source.apply(source.write_outcome("skill-a", success=success, notes=f"run {version}", by="k2",
                                          version=version, now=T0 + timedelta(minutes=version)))
    # What the export carries: the API's views, through JSON.
    out = SkillOut.model_validate({**source.get("skill-a").to_dict(), "version": 4})
    versions = [SkillVersionOut.model_validate(e.to_dict()) for e in source.history("skill-a")]
    skill = Skill.from_dict(out.model_dump(mode="json"))
    entries = [history_entry(v.model_dump(mode="json")) for v in versions]

    target = _tenant(store, "dst")
    target.apply(target.write_imported(skill, entries, _vector()))
    reloaded = _tenant(store, "dst")
    reloaded.load()
    assert reloaded.get("skill-a") == source.get("skill-a")
    assert reloaded.history("skill-a") == source.history("skill-a")
    assert [(e.version, e.change) for e in reloaded.history("skill-a")] == [
        (1, "created"), (2, "outcome"), (3, "outcome"), (4, "outcome")
    ]
    assert reloaded.get("skill-a").success_rate == 2 / 3
