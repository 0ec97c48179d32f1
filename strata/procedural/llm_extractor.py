"""The LLM extractor: a skill drafted by the LLM, validated against a strict schema.

The trace is sent as JSON (cut to a budget), the reply must validate against
a strict pydantic schema, and the result obeys the same limits as every draft.
It never falls back to the rules by itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from strata.procedural.draft import (
    LIST_FIELDS,
    LIST_LIMITS,
    MAX_ITEM,
    MAX_STEPS,
    SkillDraft,
    check_trace_input,
    clean_text,
    clip_text,
    slugify,
    unique_items,
)
from strata.providers.llm import LLM, LLMCall, complete_json, inline_schema

__all__ = ["LLMSkillExtractor"]

_Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80, strict=True)]
_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000, strict=True)]
_Item = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_ITEM, strict=True)]


class _SkillSchema(BaseModel):
    # Extra keys are ignored: they do no harm and a retry costs a call. Missing keys do not pass.
    model_config = ConfigDict(extra="ignore")

    skill_name: _Name
    description: _Text
    trigger_conditions: list[_Item] = Field(max_length=30)
    steps: list[_Item] = Field(min_length=1, max_length=MAX_STEPS)
    common_pitfalls: list[_Item] = Field(max_length=30)
    success_criteria: list[_Item] = Field(max_length=30)


_SCHEMA = inline_schema(_SkillSchema.model_json_schema())

_SYSTEM = """You turn an AI agent's execution trace into a reusable skill (procedural memory).
Reply with ONE JSON object with exactly these keys:
- "skill_name": a short lowercase slug of 2-6 words joined by "-", e.g. "deploy-fastapi-service-kubernetes".
- "description": one or two sentences: what the skill does and which tools it uses.
- "trigger_conditions": list of strings: tasks, situations or error messages in which to use this skill.
- "steps": list of 1-50 strings: the steps that worked, in order, leaving out failed attempts. Replace \
concrete values (service names, paths, URLs, hosts, ports, versions, ids) with {placeholder} variables \
such as {service} or {path}, the same name for the same value.
- "common_pitfalls": list of strings: what failed in the trace, the error it gave and the fix if one is known.
- "success_criteria": list of strings: how to tell the task is done.
Every string is 1-500 characters. Keep the trace's language: if it is Chinese, write Chinese. \
No prose outside the JSON object."""


class LLMSkillExtractor:
    """A skill drafted by the LLM and validated strictly.

    It never falls back to the rules: :class:`~strata.errors.LLMError` and
    :class:`~strata.errors.LLMOutputInvalid` reach the caller, which still has the trace.
    """

    def __init__(self, llm: LLM, *, retries: int = 1, max_trace_chars: int = 12000) -> None:
        if retries < 0 or max_trace_chars < 500:
            raise ValueError("retries must be >= 0 and max_trace_chars >= 500")
        self.llm = llm
        self.retries = retries
        self.max_trace_chars = max_trace_chars

    def extract(
        self, task: str, trace: Sequence[Mapping[str, Any] | str], outcome: str | None = None,
        *, deadline: float | None = None,
    ) -> SkillDraft:
        """Ask the LLM for a skill draft.

        Args:
            task: what the agent was asked to do.
            trace: the steps in execution order; sent as JSON, cut to ``max_trace_chars``.
            outcome: how it ended.
            deadline: ``time.monotonic()`` by which the reply must be in (a caller waits:
                one attempt, no retry); None: ``llm.timeout_s`` and ``retries``.

        Raises:
            ValueError: the task is empty or the trace is not a list.
            LLMError: the endpoint failed, timed out or refused.
            LLMOutputInvalid: no reply validated (after ``retries`` further attempts).
        """
        check_trace_input(task, trace)
        parsed: _SkillSchema = complete_json(
            self.llm, _SYSTEM, self.prompt(task, trace, outcome),
            validate=_SkillSchema.model_validate, retries=0 if deadline else self.retries,
            call=LLMCall(feature="skills", schema=_SCHEMA, deadline=deadline),
        )
        lists = {key: unique_items(getattr(parsed, key), LIST_LIMITS[key]) for key in LIST_FIELDS}
        if not lists["success_criteria"]:
            lists["success_criteria"] = [clip_text(f"the task '{clean_text(task, 300)}' is done", MAX_ITEM)]
        return SkillDraft(skill_name=slugify(parsed.skill_name, slugify(task)), description=parsed.description, **lists)

    def prompt(self, task: str, trace: Sequence[Mapping[str, Any] | str], outcome: str | None) -> str:
        """The user prompt: task, outcome and the trace, one JSON step per line.

        Past ``max_trace_chars`` long steps are cut first (one huge log must not
        crowd out the rest), then the middle goes: the start sets the scene, the
        end holds the fix.
        """
        full = [f"{i + 1}. {json.dumps(step, ensure_ascii=False, default=str)}" for i, step in enumerate(trace)]
        lines = [clip_text(line, max(200, self.max_trace_chars // 4)) for line in full]
        shown = lines
        if sum(len(line) + 1 for line in lines) > self.max_trace_chars:
            head = _take(lines, self.max_trace_chars * 2 // 3)
            tail = _take(lines[len(head) :][::-1], self.max_trace_chars - sum(len(line) + 1 for line in head))[::-1]
            shown = [*head, f"... ({len(lines) - len(head) - len(tail)} steps omitted) ...", *tail]
        note = "\n(The trace was truncated to fit: steps omitted or cut.)" if shown != full else ""
        return (
            f"Task: {task.strip()}\nOutcome: {(outcome or '').strip() or 'not given'}\n"
            f"Trace ({len(full)} steps, JSON, one per line):\n" + "\n".join(shown) + note
        )


def _take(lines: list[str], budget: int) -> list[str]:
    """The leading lines that fit in ``budget`` characters."""
    out: list[str] = []
    for line in lines:
        budget -= len(line) + 1
        if budget < 0:
            break
        out.append(line)
    return out
