"""ProceduralMemory on the in-memory reference store: ranking, filters, merges, history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from strata.config import ProceduralSettings
from strata.errors import InvalidInput, NotFound
from strata.procedural.extractors import SkillDraft
from strata.procedural.memory import ProceduralMemory, wilson_lower_bound
from strata.store.records import InMemoryRecordStore

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
DIM = 8


def unit(*weights: float) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[: len(weights)] = weights
    return v / np.linalg.norm(v)


def draft(name: str, steps: list[str] | None = None, pitfalls: list[str] | None = None) -> SkillDraft:
    return SkillDraft(
        skill_name=name,
        description=f"How to {name.replace('-', ' ')}",
        trigger_conditions=[f"asked to {name.replace('-', ' ')}"],
        steps=steps or ["Run `make build`", "Run `make deploy ENV={env}`"],
        common_pitfalls=pitfalls or [],
        success_criteria=["the service answers"],
    )


class Embedder:
    """Deterministic vectors for texts, registered by the test (the merge path embeds)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, text: str) -> np.ndarray:
        self.calls.append(text)
        return unit(1, 0.1)


@pytest.fixture()
def memory() -> ProceduralMemory:
    store = InMemoryRecordStore()
    store.ensure_collection("proc", dim=DIM)
    return ProceduralMemory("t1", store=store, collection="proc", settings=ProceduralSettings())


def learn(memory: ProceduralMemory, skill_id: str, d: SkillDraft, vector: np.ndarray, version: int = 1) -> None:
    pending = memory.write_learned(
        skill_id, d, vector, embed=Embedder(), task=d.description, by="k1", version=version, now=T0
    )
    memory.apply(pending)


def outcome(memory: ProceduralMemory, skill_id: str, success: bool, version: int) -> None:
    now = T0 + timedelta(minutes=version)
    memory.apply(memory.write_outcome(skill_id, success=success, notes=None, by="k2", version=version, now=now))


def test_wilson_lower_bound_prefers_evidence() -> None:
    assert wilson_lower_bound(0, 0) == 0.0
    assert wilson_lower_bound(9, 10) > wilson_lower_bound(1, 1)
    assert wilson_lower_bound(90, 100) > wilson_lower_bound(9, 10)
    assert 0 <= wilson_lower_bound(3, 10) < 0.3 < wilson_lower_bound(30, 40)


def test_search_ranks_by_similarity_and_track_record(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1, 0.2))
    learn(memory, "skill-b", draft("deploy-worker"), unit(1, 0.2, 0.01))
    for v in range(2, 12):  # b: 10 of 10
        outcome(memory, "skill-b", True, v)
    hits = memory.search(unit(1, 0.2), top_k=5)
    assert [h.skill.skill_id for h in hits] == ["skill-b", "skill-a"]
    assert hits[0].similarity < hits[1].similarity + 1e-6  # a is as similar, b has the record


def test_low_success_rate_is_filtered_only_once_used_enough(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1))
    outcome(memory, "skill-a", False, 2)
    outcome(memory, "skill-a", False, 3)
    # 2 uses < min_uses 3: still found
    assert [h.skill.skill_id for h in memory.search(unit(1), top_k=3)] == ["skill-a"]
    outcome(memory, "skill-a", True, 4)  # 1/3 < 0.7 with 3 uses: filtered
    assert memory.search(unit(1), top_k=3) == []
    assert [h.skill.skill_id for h in memory.search(unit(1), top_k=3, min_success_rate=0.3)] == ["skill-a"]


def test_unused_skills_are_never_filtered_and_dissimilar_ones_are(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1))
    learn(memory, "skill-z", draft("bake-bread"), unit(0, 0, 1))
    assert [h.skill.skill_id for h in memory.search(unit(1), top_k=5, min_success_rate=1.0)] == ["skill-a"]


def test_near_duplicate_is_found_and_merged_with_a_new_version(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api", pitfalls=["forgetting the env"]), unit(1, 0.1))
    assert memory.duplicate_of(unit(1, 0.12)) == "skill-a"
    assert memory.duplicate_of(unit(0, 1)) is None
    extra = draft("deploy-api", steps=["Run `make build`", "Run `make test`", "Run `make deploy ENV={env}`"],
                  pitfalls=["a stale cache"])
    embed = Embedder()
    memory.apply(memory.write_learned(
        "skill-a", extra, unit(1, 0.12), embed=embed, task="deploy again", by="k3", version=2, now=T0
    ))
    skill = memory.get("skill-a")
    assert skill.draft.steps == ["Run `make build`", "Run `make test`", "Run `make deploy ENV={env}`"]
    assert skill.draft.common_pitfalls == ["forgetting the env", "a stale cache"]
    assert skill.tasks[-1] == "deploy again" and skill.updated_by == "k3"
    assert len(memory) == 1
    assert [e.change for e in memory.history("skill-a")] == ["created", "merged"]


def test_outcomes_count_and_history_records_each_version(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1))
    outcome(memory, "skill-a", True, 2)
    outcome(memory, "skill-a", False, 3)
    skill = memory.get("skill-a")
    assert (skill.uses, skill.successes, skill.success_rate) == (2, 1, 0.5)
    assert skill.last_used == T0 + timedelta(minutes=3)
    history = memory.history("skill-a")
    assert [(e.version, e.change, e.by, e.uses) for e in history] == [
        (1, "created", "k1", 0), (2, "outcome", "k2", 1), (3, "outcome", "k2", 2)
    ]
    assert history[0].snapshot is not None and history[2].outcome == {"success": False, "notes": None}


def test_state_survives_a_reload(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1))
    outcome(memory, "skill-a", True, 2)
    again = ProceduralMemory("t1", store=memory._store, collection="proc", settings=ProceduralSettings())
    again.load()
    skill = again.get("skill-a")
    assert (skill.uses, skill.successes) == (1, 1)
    assert skill.draft == memory.get("skill-a").draft
    assert [h.skill.skill_id for h in again.search(unit(1), top_k=1)] == ["skill-a"]


def test_edit_validates_and_reembeds_only_when_the_search_text_changes(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1))
    embed = Embedder()
    memory.apply(memory.write_edit("skill-a", {"steps": ["Run `make all`"]}, embed=embed, by="k1", version=2, now=T0))
    assert embed.calls == [] and memory.get("skill-a").draft.steps == ["Run `make all`"]
    memory.apply(memory.write_edit("skill-a", {"description": "Ship the API"}, embed=embed, by="k1", version=3, now=T0))
    assert len(embed.calls) == 1
    with pytest.raises(InvalidInput):
        memory.write_edit("skill-a", {"uses": 99}, embed=embed, by="k1", version=4, now=T0)
    with pytest.raises(InvalidInput):
        memory.write_edit("skill-a", {"steps": []}, embed=embed, by="k1", version=4, now=T0)


def test_delete_removes_skill_and_history(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1))
    outcome(memory, "skill-a", True, 2)
    assert memory.delete("skill-a") == 3  # the skill row and two history rows
    memory.drop("skill-a")
    with pytest.raises(NotFound):
        memory.get("skill-a")
    assert memory.search(unit(1), top_k=3) == []


def test_tenants_do_not_see_each_other(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api"), unit(1))
    other = ProceduralMemory("t2", store=memory._store, collection="proc", settings=ProceduralSettings())
    other.load()
    assert len(other) == 0 and other.search(unit(1), top_k=3) == []


def test_brief_names_steps_pitfalls_and_record(memory: ProceduralMemory) -> None:
    learn(memory, "skill-a", draft("deploy-api", pitfalls=["forgetting the env"]), unit(1))
    brief = memory.get("skill-a").brief()
    assert "1. Run `make build`" in brief and "forgetting the env" in brief and "not used yet" in brief
