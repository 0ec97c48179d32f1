"""The procedural layer: skills learned from task traces, with their track record.

:class:`ProceduralMemory` (in :mod:`~strata.procedural.memory`) stores, finds, merges
and scores skills; a skill starts as a :class:`SkillDraft`
(:mod:`~strata.procedural.draft`), drafted from a trace by rules
(:mod:`~strata.procedural.rules`) or by the LLM (:mod:`~strata.procedural.llm_extractor`);
:mod:`~strata.procedural.extractors` picks one.
"""

from __future__ import annotations

from strata.procedural.draft import SkillDraft, SkillExtractor
from strata.procedural.extractors import make_skill_extractor
from strata.procedural.llm_extractor import LLMSkillExtractor
from strata.procedural.memory import HistoryEntry, ProceduralMemory, Skill, SkillHit, wilson_lower_bound
from strata.procedural.rules import RuleSkillExtractor

__all__ = [
    "HistoryEntry",
    "LLMSkillExtractor",
    "ProceduralMemory",
    "RuleSkillExtractor",
    "Skill",
    "SkillDraft",
    "SkillExtractor",
    "SkillHit",
    "make_skill_extractor",
    "wilson_lower_bound",
]
