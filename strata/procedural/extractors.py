"""Procedural memory: turn a task's execution trace into a reusable skill.

A trace is the list of steps an agent took, in order: each a free-text string
or a dict with any of ``tool``, ``args``, ``command``, ``action``, ``output``,
``error`` and ``status`` ("ok" | "error"); the API maps other shapes (OpenAI
tool calls, LangChain steps, log records) onto these and keeps the rest as the
step's ``metadata`` (the rule extractor ignores it; the LLM sees it). A
:class:`SkillExtractor` turns it into a :class:`SkillDraft`: successful steps become the skill's steps, with
concrete values replaced by ``{placeholder}`` variables; failed steps become
pitfalls, with the fix when a later step shows one.

:class:`RuleSkillExtractor` is deterministic and needs no LLM.
:class:`LLMSkillExtractor` asks the LLM and validates the answer strictly; it
never falls back by itself, so the caller (which keeps the trace) decides.

The pieces: :mod:`strata.procedural.draft` (the draft, its limits, merging),
:mod:`strata.procedural.rules` (the rule extractor) and :mod:`strata.procedural.llm_extractor`
(the LLM extractor). Import from here: this module is their public surface.
"""

from __future__ import annotations

from strata.procedural.draft import SkillDraft, SkillExtractor, merge_drafts, normalize_step, skill_search_text
from strata.procedural.llm_extractor import LLMSkillExtractor
from strata.procedural.rules import RuleSkillExtractor
from strata.providers.llm import LLM

__all__ = [
    "LLMSkillExtractor",
    "RuleSkillExtractor",
    "SkillDraft",
    "SkillExtractor",
    "make_skill_extractor",
    "merge_drafts",
    "normalize_step",
    "skill_search_text",
]


def make_skill_extractor(llm: LLM | None) -> SkillExtractor:
    """The LLM extractor when an LLM is configured, else the rule extractor."""
    return LLMSkillExtractor(llm) if llm is not None else RuleSkillExtractor()
