"""The skill draft: its fields, the limits every draft obeys and the text rules they share.

Whoever produced a draft (rules, LLM, a merge), it is a :class:`SkillDraft`
whose lists are clipped and de-duplicated under :func:`normalize_step`. The
limits and text helpers below are shared by the extractor modules
(:mod:`strata.procedural.rules`, :mod:`strata.procedural.llm_extractor`) so that every draft obeys
the same ones; import the public names from :mod:`strata.procedural.extractors`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from strata.limits import SKILL_ITEM_CHARS_MAX
from strata.retrieval.terms import ENGLISH_STOP_WORDS as _STOP

__all__ = [
    "CJK",
    "LIST_FIELDS",
    "LIST_LIMITS",
    "MAX_CRITERIA",
    "MAX_ITEM",
    "MAX_PITFALLS",
    "MAX_STEPS",
    "MAX_TRIGGERS",
    "TRAILING_PUNCTUATION",
    "SkillDraft",
    "SkillExtractor",
    "check_trace_input",
    "clean_text",
    "clip_text",
    "merge_drafts",
    "normalize_step",
    "skill_search_text",
    "slugify",
    "unique_items",
]

# Limits every draft obeys, whoever produced it.
MAX_STEPS, MAX_PITFALLS, MAX_CRITERIA, MAX_TRIGGERS = 50, 20, 10, 10
MAX_ITEM = SKILL_ITEM_CHARS_MAX
LIST_LIMITS = {"trigger_conditions": MAX_TRIGGERS, "steps": MAX_STEPS,
               "common_pitfalls": MAX_PITFALLS, "success_criteria": MAX_CRITERIA}
LIST_FIELDS = tuple(LIST_LIMITS)

# Character ranges of Chinese, Japanese and Korean text, for regex classes.
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
# ``{name}``; ``${HOME}`` is shell, not a skill variable.
_VARIABLE = re.compile(r"(?<!\$)\{([^\W\d]\w*)\}")
_ANY_VARIABLE = re.compile(r"\{[^\W\d]\w*\}")
TRAILING_PUNCTUATION = ".,;:!?。，；：！？、 \t"


# --- the draft -------------------------------------------------------------------


@dataclass(frozen=True)
class SkillDraft:
    """A skill as extracted, before it is stored, versioned and scored."""

    skill_name: str
    description: str
    trigger_conditions: list[str]
    steps: list[str]
    common_pitfalls: list[str]
    success_criteria: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SkillDraft:
        """Rebuild a draft from :meth:`to_dict` output; unknown keys are ignored.

        Raises:
            ValueError: a field is missing or has the wrong type, or ``skill_name`` is empty.
        """
        if not isinstance(data, Mapping):
            raise ValueError("a skill draft must be a mapping")
        for key in ("skill_name", "description"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"skill draft field {key!r} must be a string")
        if not data["skill_name"].strip():
            raise ValueError("skill draft field 'skill_name' is empty")
        lists: dict[str, list[str]] = {}
        for key in LIST_FIELDS:
            value = data.get(key)
            if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"skill draft field {key!r} must be a list of strings")
            lists[key] = list(value)
        return cls(skill_name=data["skill_name"], description=data["description"], **lists)

    @property
    def variables(self) -> list[str]:
        """Placeholder names used in the steps, in order of first use."""
        return list(dict.fromkeys(m.group(1) for step in self.steps for m in _VARIABLE.finditer(step)))


class SkillExtractor(Protocol):
    """Turns a task, its trace and its outcome into a skill draft."""

    def extract(
        self, task: str, trace: Sequence[Mapping[str, Any] | str], outcome: str | None = None
    ) -> SkillDraft: ...


def normalize_step(text: str) -> str:
    """The key two steps (or pitfalls, criteria) are duplicates under: case, spacing,
    placeholder names and trailing punctuation do not count."""
    return " ".join(_ANY_VARIABLE.sub("{}", text).casefold().split()).rstrip(TRAILING_PUNCTUATION)


def skill_search_text(draft: SkillDraft) -> str:
    """The text embedded to find this skill for a new task."""
    parts = [draft.skill_name.replace("-", " "), draft.description, *draft.trigger_conditions]
    return "\n".join(p.strip() for p in parts if p.strip())


def check_trace_input(task: str, trace: Sequence[Mapping[str, Any] | str]) -> None:
    """The argument check every :class:`SkillExtractor` makes first; raises ``ValueError``."""
    if not isinstance(task, str) or not task.strip():
        raise ValueError("task must be a non-empty string")
    if isinstance(trace, (str, bytes)) or not isinstance(trace, Sequence):
        raise ValueError("trace must be a list of steps")


# --- merging -------------------------------------------------------------------------


def merge_drafts(existing: SkillDraft, new: SkillDraft) -> SkillDraft:
    """Merge a near-duplicate draft into an existing skill.

    The name stays; the description stays unless empty. Lists are ordered
    unions under :func:`normalize_step`. Steps keep their order; a new step
    goes right after the nearest preceding new step already present (a step
    the new trace added between two known steps lands between them); new
    steps before any known one go just before the first known one, and when
    nothing is known they are appended. Nothing existing is dropped for the limits.
    """
    steps = list(existing.steps)
    keys = [normalize_step(s) for s in steps]
    new_keys = [normalize_step(s) for s in new.steps]
    known = [keys.index(k) for k in new_keys if k in keys]
    # Index of the step the next new one goes after; leading new steps go just before the first known one.
    anchor = known[0] - 1 if known else len(steps) - 1
    for step, key in zip(new.steps, new_keys, strict=True):
        if key in keys:
            anchor = keys.index(key)
        elif key and len(steps) < MAX_STEPS:
            anchor += 1
            steps.insert(anchor, step)
            keys.insert(anchor, key)

    def union(key: str) -> list[str]:
        old = getattr(existing, key)
        return unique_items([*old, *getattr(new, key)], max(LIST_LIMITS[key], len(old)))

    return SkillDraft(
        skill_name=existing.skill_name,
        description=existing.description if existing.description.strip() else new.description,
        trigger_conditions=union("trigger_conditions"),
        steps=steps,
        common_pitfalls=union("common_pitfalls"),
        success_criteria=union("success_criteria"),
    )


# --- small text helpers ------------------------------------------------------------


def clip_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def clean_text(text: str, limit: int = MAX_ITEM) -> str:
    """``text`` on one line, runs of whitespace made one space, clipped to ``limit``."""
    return clip_text(" ".join(text.split()), limit)


def unique_items(items: Sequence[str], limit: int) -> list[str]:
    """Ordered union under :func:`normalize_step`, each item clipped, at most ``limit``."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        item = clip_text(item.strip(), MAX_ITEM)
        key = normalize_step(item)
        if key and key not in seen and len(out) < limit:
            seen.add(key)
            out.append(item)
    return out


def slugify(text: str, fallback: str = "skill") -> str:
    """At most six meaningful words joined by "-", at most 64 chars; CJK runs kept as they are."""
    text = re.sub(r"^\s*(?:请|帮我|帮忙|麻烦你?|我想|我要)+", "", text)
    words: list[str] = []
    for token in re.findall(r"[^\W_]+", text):
        for part in re.findall(f"[{CJK}]+|[^{CJK}]+", token):
            if re.match(f"[{CJK}]", part):
                words.append(part[:16])
            elif part.casefold() not in _STOP:
                words.append(part.casefold())
    slug = ""
    for word in words[:6]:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > 64:
            slug = slug or word[:64]
            break
        slug = candidate
    return slug or fallback
