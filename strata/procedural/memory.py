"""Procedural memory: skills learned from task traces, with their track record.

A skill is a :class:`~strata.procedural.extractors.SkillDraft` (name, description, triggers,
steps with ``{placeholder}`` variables, pitfalls, success criteria) plus its
use statistics. One tenant's skills live in memory as an exact vector index
over their search text (name, description, triggers), with Milvus the
durable store: one row per skill, and one row per version in its history.

Ranking is similarity times a confidence factor: the Wilson lower bound of
the success rate, so 9 successes out of 10 uses outrank 1 out of 1, and an
unused skill is neither boosted nor hidden. A skill used at least
``min_uses`` times whose raw success rate is below the threshold is
filtered out.

Nothing here is concurrent: the owning actor (``actors/procedural.py``) is
the single writer and serialises a tenant's mutations; every mutation here
is split into a durable ``write_*`` step and an in-memory ``apply`` step.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from strata.clock import from_ms_or_none
from strata.config import ProceduralSettings, TTLSettings
from strata.errors import InvalidInput, NotFound, StoreUnavailable
from strata.ids import validate_id
from strata.paging import SortedIds
from strata.procedural.extractors import SkillDraft, merge_drafts, skill_search_text
from strata.retrieval.relevance import dense_relevance, on_span
from strata.retrieval.vectors import VectorIndex
from strata.store.records import Record, RecordStore
from strata.store.ttl import EXPIRES, Expiries, expires_ms

__all__ = [
    "HISTORY",
    "SKILL",
    "Embed",
    "HistoryEntry",
    "ProceduralMemory",
    "Skill",
    "SkillHit",
    "history_entry",
    "new_skill_id",
    "validated_changes",
    "vector_texts",
    "wilson_lower_bound",
]

SKILL = "skill"
HISTORY = "skill_version"
_TASKS_KEPT = 20
#: Embeds one text (blocking), for a write step whose skill text changed.
Embed = Callable[[str], np.ndarray]
_EDITABLE = ("skill_name", "description", "trigger_conditions", "steps", "common_pitfalls", "success_criteria")


def wilson_lower_bound(successes: int, uses: int, *, z: float = 1.96) -> float:
    """The lower end of the Wilson score interval of the success rate (0 when unused)."""
    if uses <= 0:
        return 0.0
    p = successes / uses
    denominator = 1 + z * z / uses
    centre = p + z * z / (2 * uses)
    spread = z * math.sqrt(p * (1 - p) / uses + z * z / (4 * uses * uses))
    return max(0.0, (centre - spread) / denominator)


def new_skill_id() -> str:
    return f"skill-{uuid.uuid4().hex[:12]}"


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class Skill:
    skill_id: str
    draft: SkillDraft
    created_at: datetime
    updated_at: datetime
    updated_by: str
    uses: int = 0
    successes: int = 0
    last_used: datetime | None = None
    #: The tasks it was learned from, newest last (a merge adds one).
    tasks: tuple[str, ...] = ()
    #: When it expires (epoch ms), counted from its last learning; None: never.
    expires_ms: int | None = None

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.uses if self.uses else None

    @property
    def confidence(self) -> float:
        return wilson_lower_bound(self.successes, self.uses)

    def to_payload(self) -> dict[str, Any]:
        return {
            **self.draft.to_dict(),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "updated_by": self.updated_by,
            "uses": self.uses,
            "successes": self.successes,
            "last_used": self.last_used.isoformat() if self.last_used else None,
            "tasks": list(self.tasks),
            **({EXPIRES: self.expires_ms} if self.expires_ms else {}),
        }

    @classmethod
    def from_payload(cls, skill_id: str, payload: Mapping[str, Any]) -> Skill:
        created = _time(payload.get("created_at")) or datetime.now(UTC)
        return cls(
            skill_id=skill_id,
            draft=SkillDraft.from_dict({k: payload[k] for k in _EDITABLE}),
            created_at=created,
            updated_at=_time(payload.get("updated_at")) or created,
            updated_by=str(payload.get("updated_by", "")),
            uses=int(payload.get("uses", 0)),
            successes=int(payload.get("successes", 0)),
            last_used=_time(payload.get("last_used")),
            tasks=tuple(payload.get("tasks", ())),
            expires_ms=payload.get(EXPIRES),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Skill:
        """The skill of a public view (:meth:`to_dict`, JSON or not): what an export carries.
        The derived fields (variables, success rate, confidence) are made again."""
        created = _time(data.get("created_at")) or datetime.now(UTC)
        expires = _time(data.get("expires_at"))
        return cls(
            skill_id=validate_id(str(data["skill_id"]), field="skill_id"),
            draft=SkillDraft.from_dict({k: data[k] for k in _EDITABLE}),
            created_at=created,
            updated_at=_time(data.get("updated_at")) or created,
            updated_by=str(data.get("updated_by", "")),
            uses=int(data.get("uses", 0)),
            successes=int(data.get("successes", 0)),
            last_used=_time(data.get("last_used")),
            tasks=tuple(data.get("tasks", ()))[-_TASKS_KEPT:],
            expires_ms=_ms(expires) if expires else None,
        )

    def brief(self) -> str:
        """The skill as one context line: what it is for, its steps, what to avoid, its record."""
        d = self.draft
        parts = [f"{d.skill_name}: {d.description}"]
        parts.append("Steps: " + " ".join(f"{n}. {step}" for n, step in enumerate(d.steps, 1)))
        if d.common_pitfalls:
            parts.append("Pitfalls: " + "; ".join(d.common_pitfalls))
        if d.success_criteria:
            parts.append("Done when: " + "; ".join(d.success_criteria))
        record = f"{self.successes}/{self.uses} successful uses" if self.uses else "not used yet"
        parts.append(f"({record})")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The public view (the API's ``SkillOut`` without the version)."""
        return {
            "skill_id": self.skill_id,
            **self.draft.to_dict(),
            "variables": self.draft.variables,
            "uses": self.uses,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "confidence": round(self.confidence, 4),
            "last_used": self.last_used,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "updated_by": self.updated_by,
            "tasks": list(self.tasks),
            "expires_at": from_ms_or_none(self.expires_ms),
        }


@dataclass(frozen=True)
class SkillHit:
    skill: Skill
    similarity: float
    score: float
    #: The similarity on the embedder's calibrated span, in [0, 1] (:mod:`strata.retrieval.relevance`).
    relevance: float = 0.0


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    at: datetime
    by: str
    change: str  # created | merged | edited | outcome
    uses: int
    successes: int
    #: The skill's content after a created / merged / edited change.
    snapshot: dict[str, Any] | None = None
    #: An outcome change: {"success": bool, "notes": str | None}.
    outcome: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "at": self.at,
            "by": self.by,
            "change": self.change,
            "uses": self.uses,
            "successes": self.successes,
            "snapshot": self.snapshot,
            "outcome": self.outcome,
        }


@dataclass
class _Pending:
    """A write's result, applied to memory after it is durable."""

    skill: Skill
    vector: np.ndarray
    rows: list[Record] = field(default_factory=list)


class ProceduralMemory:
    """One tenant's skills: durable rows plus an exact in-memory vector index."""

    def __init__(
        self, tenant: str, *, store: RecordStore, collection: str, settings: ProceduralSettings,
        ttl: TTLSettings | None = None,
    ) -> None:
        self.tenant = validate_id(tenant, field="tenant")
        self._ttl = ttl or TTLSettings()
        #: Deadlines of the skills that expire, by skill id.
        self.expiries: Expiries[str] = Expiries()
        self._store = store
        self._collection = collection
        self.settings = settings
        self._skills: dict[str, Skill] = {}
        self._skill_ids = SortedIds()  # for pages of skills by id
        self._vectors: dict[str, np.ndarray] = {}
        self._index = VectorIndex()

    def load(self) -> None:
        for row in self._store.scan(self._collection, tenant=self.tenant, kinds=[SKILL]):
            skill = Skill.from_payload(row.session, row.payload)
            if row.vector is None:  # scan() reads vectors: a skill row without one is damaged
                raise StoreUnavailable(f"tenant {self.tenant!r}: skill row {row.pk!r} has no vector")
            self._remember(skill, np.asarray(row.vector, dtype=np.float32))

    # -- reads ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._skills)

    def get(self, skill_id: str) -> Skill:
        validate_id(skill_id, field="skill_id")
        skill = self._skills.get(skill_id)
        if skill is None:
            raise NotFound(f"no skill {skill_id!r} in this tenant")
        return skill

    def skills(self, *, after: str | None = None, limit: int = 50) -> tuple[list[Skill], bool]:
        """Skills by id, the ``limit`` first after ``after``, and whether more follow."""
        ids, more = self._skill_ids.page(after=after, limit=limit)
        return [self._skills[i] for i in ids], more

    def search(
        self,
        vector: np.ndarray,
        *,
        top_k: int,
        min_success_rate: float | None = None,
        min_similarity: float | None = None,
    ) -> list[SkillHit]:
        """Skills for a task embedding, best first.

        Args:
            min_success_rate: skills used at least ``settings.min_uses`` times
                with a lower raw success rate are left out; default
                ``settings.min_success_rate``. Unused skills are never left out.
            min_similarity: cosine floor; default ``settings.min_similarity``.
        """
        rate = self.settings.min_success_rate if min_success_rate is None else min_success_rate
        span = self.settings.cosine_span
        floor = on_span(self.settings.min_similarity, span) if min_similarity is None else min_similarity
        weight = self.settings.success_weight
        sims = self._index.scores(np.asarray(vector, dtype=np.float32))
        hits = []
        for skill_id, sim in zip(self._index.ids, sims.tolist(), strict=True):
            skill = self._skills[skill_id]
            if sim < floor:
                continue
            if skill.uses >= self.settings.min_uses and (skill.success_rate or 0.0) < rate:
                continue
            factor = (1 - weight) + weight * skill.confidence
            relevance = round(float(dense_relevance(sim, self.settings.cosine_span)), 4)
            hits.append(SkillHit(skill, float(sim), float(sim) * factor, relevance))
        hits.sort(key=lambda h: (-h.score, h.skill.skill_id))
        return hits[:top_k]

    def duplicate_of(self, vector: np.ndarray) -> str | None:
        """The existing skill a new one with this embedding would duplicate, if any."""
        sims = self._index.scores(np.asarray(vector, dtype=np.float32))
        if len(sims) == 0:
            return None
        best = int(np.argmax(sims))
        threshold = on_span(self.settings.merge_similarity, self.settings.cosine_span)
        return self._index.ids[best] if sims[best] >= threshold else None

    def history(self, skill_id: str) -> list[HistoryEntry]:
        """Every version of a skill, oldest first."""
        self.get(skill_id)
        rows = self._store.scan(
            self._collection, tenant=self.tenant, session=skill_id, kinds=[HISTORY], with_vectors=False
        )
        entries = [history_entry(row.payload) for row in rows]
        return sorted(entries, key=lambda e: e.version)

    # -- writes (durable step, in a worker thread) --------------------------------

    def write_learned(
        self,
        skill_id: str,
        draft: SkillDraft,
        vector: np.ndarray,
        *,
        embed: Embed,
        task: str,
        by: str,
        version: int,
        now: datetime,
        ttl_s: float | None = None,
    ) -> _Pending:
        """Create a skill, or merge ``draft`` into the existing ``skill_id`` (a near-duplicate).

        ``vector`` is the embedding of ``draft``'s search text; ``embed`` makes
        the merged skill's when its text differs from both. A merge renews the
        skill's expiry: it lives until the later of its deadline and the new one.
        """
        validate_id(skill_id, field="skill_id")
        existing = self._skills.get(skill_id)
        deadline = expires_ms(self._ttl.seconds(self.tenant, "procedural", ttl_s), now=now)
        if existing is None:
            skill = Skill(
                skill_id, draft, created_at=now, updated_at=now, updated_by=by, tasks=(task[:300],), expires_ms=deadline
            )
            return self._write(skill, vector, change="created", version=version, now=now)
        merged = merge_drafts(existing.draft, draft)
        tasks = (*existing.tasks, task[:300])[-_TASKS_KEPT:]
        later = max(existing.expires_ms, deadline) if existing.expires_ms and deadline else None
        skill = replace(existing, draft=merged, updated_at=now, updated_by=by, tasks=tasks, expires_ms=later)
        merged_vector = self._vector_for(skill, embed, known=(draft, vector))
        return self._write(skill, merged_vector, change="merged", version=version, now=now)

    def write_edit(
        self, skill_id: str, changes: Mapping[str, Any], *, embed: Embed, by: str, version: int, now: datetime
    ) -> _Pending:
        """Replace some of the skill's content fields."""
        existing = self.get(skill_id)
        unknown = set(changes) - set(_EDITABLE)
        if unknown:
            raise InvalidInput(f"cannot edit {sorted(unknown)}; editable: {', '.join(_EDITABLE)}", field="body")
        try:
            draft = SkillDraft.from_dict({**existing.draft.to_dict(), **changes})
        except ValueError as exc:
            raise InvalidInput(f"the edited skill is not valid: {exc}", field="body") from None
        if not draft.steps:
            raise InvalidInput("a skill needs at least one step", field="steps")
        skill = replace(existing, draft=draft, updated_at=now, updated_by=by)
        return self._write(skill, self._vector_for(skill, embed), change="edited", version=version, now=now)

    def write_outcome(
        self, skill_id: str, *, success: bool, notes: str | None, by: str, version: int, now: datetime
    ) -> _Pending:
        """Count one use of the skill, successful or not."""
        existing = self.get(skill_id)
        skill = replace(
            existing,
            uses=existing.uses + 1,
            successes=existing.successes + int(success),
            last_used=now,
            updated_at=now,
            updated_by=by,
        )
        outcome = {"success": success, "notes": notes}
        return self._write(skill, self._vectors[skill_id], change="outcome", version=version, now=now, outcome=outcome)

    def write_imported(self, skill: Skill, history: Sequence[HistoryEntry], vector: np.ndarray) -> _Pending:
        """Write a skill as another tenant or stack exported it (``strata restore``): its id,
        counts and times as they were, and every entry of its history with its own version
        (the caller has claimed a version at least the last of them)."""
        if not skill.draft.steps:
            raise InvalidInput("a skill needs at least one step", field="steps")
        vector = np.asarray(vector, dtype=np.float32)
        rows = [self._skill_row(skill, vector, now=skill.updated_at)]
        rows += [self._history_row(skill.skill_id, entry) for entry in history]
        self._store.upsert(self._collection, rows)
        return _Pending(skill, vector, rows)

    def delete(self, skill_id: str) -> int:
        """Remove the skill and its history from the store (durable step)."""
        self.get(skill_id)
        return self._store.delete(self._collection, tenant=self.tenant, session=skill_id)

    # -- in-memory step (on the actor's event loop) -------------------------------

    def apply(self, pending: _Pending) -> Skill:
        self._remember(pending.skill, pending.vector)
        return pending.skill

    def drop(self, skill_id: str) -> None:
        self.expiries.drop([skill_id])
        self._skills.pop(skill_id, None)
        self._skill_ids.discard(skill_id)
        self._vectors.pop(skill_id, None)
        self._index.remove_group(skill_id)

    # -- internals ------------------------------------------------------------

    def _vector_for(self, skill: Skill, embed: Embed, known: tuple[SkillDraft, np.ndarray] | None = None) -> np.ndarray:
        """The search vector of a changed skill: reused when its search text did not change."""
        text = skill_search_text(skill.draft)
        if text == skill_search_text(self._skills[skill.skill_id].draft):
            return self._vectors[skill.skill_id]
        if known is not None and text == skill_search_text(known[0]):
            return known[1]
        return embed(text)

    def _write(
        self,
        skill: Skill,
        vector: np.ndarray,
        *,
        change: str,
        version: int,
        now: datetime,
        outcome: dict[str, Any] | None = None,
    ) -> _Pending:
        vector = np.asarray(vector, dtype=np.float32)
        entry = HistoryEntry(
            version=version,
            at=now,
            by=skill.updated_by,
            change=change,
            uses=skill.uses,
            successes=skill.successes,
            snapshot=skill.draft.to_dict() if outcome is None else None,
            outcome=outcome,
        )
        rows = [self._skill_row(skill, vector, now=now), self._history_row(skill.skill_id, entry)]
        # One upsert: the skill row and its history entry land together.
        self._store.upsert(self._collection, rows)
        return _Pending(skill, vector, rows)

    def _skill_row(self, skill: Skill, vector: np.ndarray, *, now: datetime) -> Record:
        return Record(
            pk=self._pk(SKILL, skill.skill_id),
            tenant=self.tenant,
            session=skill.skill_id,
            kind=SKILL,
            ts_ms=_ms(now),
            text=skill_search_text(skill.draft)[:4000],
            payload=skill.to_payload(),
            vector=vector,
        )

    def _history_row(self, skill_id: str, entry: HistoryEntry) -> Record:
        return Record(
            pk=self._pk(HISTORY, skill_id, f"{entry.version:010d}"),
            tenant=self.tenant,
            session=skill_id,
            kind=HISTORY,
            ts_ms=_ms(entry.at),
            text="",
            payload=_entry_payload(entry),
        )

    def _remember(self, skill: Skill, vector: np.ndarray) -> None:
        if skill.skill_id in self._vectors:
            self._index.set(skill.skill_id, vector)
        else:
            self._index.add(skill.skill_id, vector, group=skill.skill_id)
        self._skills[skill.skill_id] = skill
        self._skill_ids.add(skill.skill_id)
        self._vectors[skill.skill_id] = vector
        self.expiries.set(skill.skill_id, skill.expires_ms)

    def _pk(self, *parts: str) -> str:
        return "/".join((self.tenant, *parts))


def _entry_payload(entry: HistoryEntry) -> dict[str, Any]:
    return {**entry.to_dict(), "at": entry.at.isoformat()}


def history_entry(payload: Mapping[str, Any]) -> HistoryEntry:
    """A history entry from its stored payload or its public view (:meth:`HistoryEntry.to_dict`)."""
    return HistoryEntry(
        version=int(payload["version"]),
        at=_time(payload.get("at")) or datetime.now(UTC),
        by=str(payload.get("by", "")),
        change=str(payload.get("change", "")),
        uses=int(payload.get("uses", 0)),
        successes=int(payload.get("successes", 0)),
        snapshot=payload.get("snapshot"),
        outcome=payload.get("outcome"),
    )


def validated_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The editable fields of a PATCH body that were given (None = not given)."""
    return {k: v for k, v in changes.items() if k in _EDITABLE and v is not None}


def vector_texts(rows: Sequence[Record]) -> list[tuple[Record, str]]:
    """The rows of one tenant that carry a vector (skills), each with the text its vector is
    made from (:func:`skill_search_text`): what ``strata reindex`` embeds again."""
    return [
        (row, skill_search_text(Skill.from_payload(row.session, row.payload).draft))
        for row in rows
        if row.kind == SKILL
    ]
