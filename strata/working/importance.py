"""Importance rules for working-memory items, all in one place.

A reader looking for "why did this turn get 0.85?" should find every word list,
weight and cap in this file.  Scores are heuristic and lexical on purpose: they
run on every turn, must be deterministic, and must work for English and
Chinese without a model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from strata.retrieval.terms import LATIN_WORD, extract_terms, normalise

__all__ = [
    "BACK_REFERENCE_MARKERS_EN",
    "BACK_REFERENCE_MARKERS_ZH",
    "CAPS_ACRONYMS",
    "EMOTION_WORDS_EN",
    "EMOTION_WORDS_ZH",
    "EXPLICIT_PHRASES_EN",
    "EXPLICIT_PHRASES_ZH",
    "BackReference",
    "ImportanceRules",
    "ImportanceSignal",
]

# --- word lists -------------------------------------------------------------

EXPLICIT_PHRASES_EN: tuple[str, ...] = (
    "remember this",
    "remember that",
    "please remember",
    "don't forget",
    "do not forget",
    "keep in mind",
    "note that",
    "important:",
)

EXPLICIT_PHRASES_ZH: tuple[str, ...] = (
    "记住",  # also covers 请记住
    "请记住",
    "别忘了",
    "别忘记",
    "不要忘记",
    "不要忘了",
    "记一下",
    "重要",
)

# "不重要" / "没那么重要" say the opposite of an explicit request.
_ZH_NEGATED_IMPORTANT = re.compile(r"(?:不|没|无|并非)(?:太|那么|很)?重要")

EMOTION_WORDS_EN: frozenset[str] = frozenset(
    {
        "love", "loved", "loves", "hate", "hated", "hates", "angry", "furious",
        "frustrated", "frustrating", "annoyed", "annoying", "worried", "worry",
        "scared", "afraid", "terrified", "excited", "thrilled", "upset",
        "terrible", "awful", "horrible", "amazing", "awesome", "fantastic",
        "urgent", "urgently", "asap", "desperate", "disappointed", "sad",
        "happy", "devastated", "panic", "panicking", "hurry",
    }
)

EMOTION_WORDS_ZH: tuple[str, ...] = (
    "生气", "愤怒", "讨厌", "喜欢", "爱", "担心", "害怕", "激动", "开心",
    "难过", "着急", "紧急", "崩溃", "失望", "烦死", "气死", "焦虑", "伤心",
    "高兴", "太棒", "糟糕", "恨",
)

# Upper-case technical terms are not shouting.
CAPS_ACRONYMS: frozenset[str] = frozenset(
    {
        "API", "URL", "URI", "SQL", "JSON", "YAML", "XML", "HTML", "CSS", "HTTP",
        "HTTPS", "TCP", "UDP", "DNS", "SSH", "SSL", "TLS", "CPU", "GPU", "RAM",
        "SSD", "AWS", "GCP", "CLI", "SDK", "IDE", "PDF", "CSV", "UTC", "UUID",
        "JWT", "LLM", "RAG", "USA", "FAQ", "ETA", "PR", "CI", "CD", "OK", "ID",
    }
)

BACK_REFERENCE_MARKERS_EN: tuple[str, ...] = (
    "as i said",
    "as i mentioned",
    "like i said",
    "like i mentioned",
    "as mentioned",
    "as we discussed",
    "i told you",
    "you said",
    "going back to",
    "back to the",
    "earlier",
    "previously",
)

BACK_REFERENCE_MARKERS_ZH: tuple[str, ...] = (
    "之前说的",
    "之前提到",
    "刚才",
    "刚刚说",
    "前面提到",
    "前面说的",
    "上次说",
    "上次提到",
)

# --- tokenisation -----------------------------------------------------------

_CAPS_WORD = re.compile(r"(?<![A-Za-z])[A-Z]{3,}(?![A-Za-z])")
_EXCLAMATION = re.compile(r"[!！]")


def _phrase_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    # Word boundaries only where the phrase edge is a letter, so "important:"
    # still matches before its colon; internal spaces match any whitespace.
    parts = []
    for phrase in sorted(phrases, key=len, reverse=True):
        body = r"\s+".join(re.escape(w) for w in phrase.split())
        left = r"\b" if phrase[0].isalnum() else ""
        right = r"\b" if phrase[-1].isalnum() else ""
        parts.append(f"{left}{body}{right}")
    return re.compile("|".join(parts))


_EXPLICIT_EN = _phrase_pattern(EXPLICIT_PHRASES_EN)
_BACKREF_EN = _phrase_pattern(BACK_REFERENCE_MARKERS_EN)
_BACKREF_ZH = re.compile("|".join(map(re.escape, BACK_REFERENCE_MARKERS_ZH)))


# --- rules ------------------------------------------------------------------


@dataclass(frozen=True)
class ImportanceSignal:
    """Result of scoring one text: importance in [0, 1] and why."""

    importance: float
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackReference:
    """A new text as the back-reference rule sees it: whether it says "as I said" and its terms."""

    explicit: bool
    terms: frozenset[str]


@dataclass(frozen=True)
class ImportanceRules:
    """Tunable lexical importance rules.

    Importance = role base + task-relevance boost + emotion boost, capped at
    ``implicit_cap``; an explicit memory request sets it to
    ``explicit_importance`` instead.
    """

    base_user: float = 0.5
    base_assistant: float = 0.4
    base_tool: float = 0.3
    base_system: float = 0.7
    explicit_importance: float = 1.0
    # Leaves headroom so only explicit requests reach the top.
    implicit_cap: float = 0.95
    task_relevance_max_boost: float = 0.25
    # Fraction of the task's terms a text must share for the full boost.
    task_relevance_saturation: float = 0.5
    emotion_max_boost: float = 0.2
    emotion_exclamation_step: float = 0.04
    emotion_caps_step: float = 0.05
    emotion_word_step: float = 0.08
    back_reference_step: float = 0.1
    back_reference_min_shared: int = 2
    back_reference_explicit_min_shared: int = 1

    def base_for(self, role: str) -> float:
        """Return the base importance of ``role``.

        Raises:
            ValueError: If ``role`` is not system/user/assistant/tool.
        """
        bases = {
            "user": self.base_user,
            "assistant": self.base_assistant,
            "tool": self.base_tool,
            "system": self.base_system,
        }
        try:
            return bases[role]
        except KeyError:
            raise ValueError(
                f"unknown role {role!r}; expected one of {sorted(bases)}"
            ) from None

    def is_explicit(self, text: str) -> bool:
        """Return whether ``text`` explicitly asks for something to be remembered."""
        if _EXPLICIT_EN.search(normalise(text)):
            return True
        for phrase in EXPLICIT_PHRASES_ZH:
            if phrase == "重要":
                # Every 重要 must not be a negated one ("这个不重要").
                if text.count("重要") > len(_ZH_NEGATED_IMPORTANT.findall(text)):
                    return True
            elif phrase in text:
                return True
        return False

    def task_relevance(self, text: str, task: str | None) -> float:
        """Return the task-relevance boost in ``[0, task_relevance_max_boost]``."""
        if not task:
            return 0.0
        task_terms = extract_terms(task)
        if not task_terms:
            return 0.0
        shared = len(task_terms & extract_terms(text))
        coverage = shared / len(task_terms)
        saturation = max(self.task_relevance_saturation, 1e-9)
        return self.task_relevance_max_boost * min(1.0, coverage / saturation)

    def emotion(self, text: str) -> float:
        """Return the emotional-intensity boost in ``[0, emotion_max_boost]``."""
        exclamations = len(_EXCLAMATION.findall(text))
        caps = sum(1 for w in _CAPS_WORD.findall(text) if w not in CAPS_ACRONYMS)
        lowered = normalise(text)
        words = sum(1 for w in LATIN_WORD.findall(lowered) if w in EMOTION_WORDS_EN)
        words += sum(lowered.count(w) for w in EMOTION_WORDS_ZH)
        raw = (
            self.emotion_exclamation_step * exclamations
            + self.emotion_caps_step * caps
            + self.emotion_word_step * words
        )
        return min(self.emotion_max_boost, raw)

    def score(self, text: str, *, role: str, task: str | None = None) -> ImportanceSignal:
        """Score one turn.

        Args:
            text: The turn's content.
            role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
            task: The active task description, if any.

        Raises:
            ValueError: If ``role`` is unknown.
        """
        base = self.base_for(role)
        reasons: list[str] = []
        explicit = self.is_explicit(text)
        if explicit:
            reasons.append("explicit")
        relevance = self.task_relevance(text, task)
        if relevance > 0:
            reasons.append("task_relevance")
        emotion = self.emotion(text)
        if emotion > 0:
            reasons.append("emotion")
        importance = self.explicit_importance if explicit else min(self.implicit_cap, base + relevance + emotion)
        return ImportanceSignal(importance=_clamp01(importance), reasons=tuple(reasons))

    def has_back_reference_marker(self, text: str) -> bool:
        """Return whether ``text`` contains an explicit "as I said"-style marker."""
        return bool(_BACKREF_EN.search(normalise(text)) or _BACKREF_ZH.search(text))

    def back_reference(self, later_text: str) -> BackReference:
        """What ``later_text`` brings to the back-reference rule: worked out once per new
        item, then set against every earlier item's terms (:meth:`boost_from`)."""
        # The marker's own words ("之前", "刚才") must not count as shared content.
        stripped = _BACKREF_ZH.sub(" ", _BACKREF_EN.sub(" ", normalise(later_text)))
        return BackReference(explicit=self.has_back_reference_marker(later_text), terms=extract_terms(stripped))

    def boost_from(self, earlier_terms: frozenset[str], later: BackReference) -> float:
        """How much ``later`` raises an earlier item of terms ``earlier_terms`` (:meth:`back_reference_boost`)."""
        shared = len(earlier_terms & later.terms)
        if later.explicit and shared >= self.back_reference_explicit_min_shared:
            return self.back_reference_step
        if shared >= self.back_reference_min_shared:
            return self.back_reference_step
        return 0.0

    def back_reference_boost(self, earlier_text: str, later_text: str) -> float:
        """Return how much ``later_text`` referring back raises ``earlier_text``.

        An explicit marker ("as I said", "之前说的") plus at least
        ``back_reference_explicit_min_shared`` shared terms, or at least
        ``back_reference_min_shared`` shared terms alone, yields
        ``back_reference_step``; otherwise 0.  The caller caps the sum at 1.0.
        """
        return self.boost_from(extract_terms(earlier_text), self.back_reference(later_text))


def _clamp01(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return max(0.0, min(1.0, value))
