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

__all__ = [
    "BACK_REFERENCE_MARKERS_EN",
    "BACK_REFERENCE_MARKERS_ZH",
    "CAPS_ACRONYMS",
    "CJK_STOP_CHARS",
    "EMOTION_WORDS_EN",
    "EMOTION_WORDS_ZH",
    "ENGLISH_STOP_WORDS",
    "EXPLICIT_PHRASES_EN",
    "EXPLICIT_PHRASES_ZH",
    "ImportanceRules",
    "ImportanceSignal",
    "extract_terms",
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

ENGLISH_STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are aren't as at
    be because been before being below between both but by can can't cannot
    could couldn't did didn't do does doesn't doing don't down during each few
    for from further get got had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd
    i'll i'm i've if in into is isn't it it's its itself just let's like me
    more most much must mustn't my myself no nor not now of off on once only or
    other ought our ours ourselves out over own please really same said say says
    shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they
    they'd they'll they're they've this those through to too under until up
    us very was wasn't we we'd we'll we're we've were weren't what what's when
    when's where where's which while who who's whom why why's will with won't
    would wouldn't yes yeah you you'd you'll you're you've your yours yourself
    yourselves ok okay thanks thank hi hello hey one also well still even
    want need know think make sure thing things something anything remember
    mentioned told going back earlier previously
    """.split()
)

# Function characters; a bigram made only of these ("我们", "这个") carries no topic.
CJK_STOP_CHARS: frozenset[str] = frozenset(
    "的了是我你他她它们在和与也就都吗呢吧啊呀哦嗯这那个一有不没要会把被给对说很还又再从到"
    "着过得地之其而及或但并如果因为所以可以能就是么什怎样哪里些"
)

# --- tokenisation -----------------------------------------------------------

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_LATIN_WORD = re.compile(r"[0-9a-z\u00c0-\u024f]+(?:'[a-z]+)*")
_CAPS_WORD = re.compile(r"(?<![A-Za-z])[A-Z]{3,}(?![A-Za-z])")
_EXCLAMATION = re.compile(r"[!！]")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\uff07": "'"})


def _normalise(text: str) -> str:
    return text.translate(_APOSTROPHES).lower()


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


def _stem(word: str) -> str:
    # Plural folding only: "deadlines" should meet "deadline"; anything
    # cleverer would need a real stemmer for little gain.
    if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def extract_terms(text: str) -> frozenset[str]:
    """Return the distinctive terms of ``text`` used for overlap rules.

    Latin words are lower-cased, stop words and one-letter words (not digits) removed and
    plurals folded; CJK runs become character bigrams (bigrams made only of
    function characters are dropped; a lone character counts as a unigram).
    """
    lowered = _normalise(text)
    terms: set[str] = set()
    for word in _LATIN_WORD.findall(lowered):
        # Single digits stay: "6月8日" and "May 8" are found by their numbers.
        if (len(word) < 2 and not word.isdigit()) or word in ENGLISH_STOP_WORDS:
            continue
        terms.add(_stem(word))
    for run in _CJK_RUN.findall(lowered):
        if len(run) == 1:
            if run not in CJK_STOP_CHARS:
                terms.add(run)
            continue
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if bigram[0] in CJK_STOP_CHARS and bigram[1] in CJK_STOP_CHARS:
                continue
            terms.add(bigram)
    return frozenset(terms)


# --- rules ------------------------------------------------------------------


@dataclass(frozen=True)
class ImportanceSignal:
    """Result of scoring one text: importance in [0, 1] and why."""

    importance: float
    reasons: tuple[str, ...] = ()


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
        if _EXPLICIT_EN.search(_normalise(text)):
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
        lowered = _normalise(text)
        words = sum(1 for w in _LATIN_WORD.findall(lowered) if w in EMOTION_WORDS_EN)
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
        if explicit:
            importance = self.explicit_importance
        else:
            importance = min(self.implicit_cap, base + relevance + emotion)
        return ImportanceSignal(importance=_clamp01(importance), reasons=tuple(reasons))

    def has_back_reference_marker(self, text: str) -> bool:
        """Return whether ``text`` contains an explicit "as I said"-style marker."""
        return bool(_BACKREF_EN.search(_normalise(text)) or _BACKREF_ZH.search(text))

    def back_reference_boost(self, earlier_text: str, later_text: str) -> float:
        """Return how much ``later_text`` referring back raises ``earlier_text``.

        An explicit marker ("as I said", "之前说的") plus at least
        ``back_reference_explicit_min_shared`` shared terms, or at least
        ``back_reference_min_shared`` shared terms alone, yields
        ``back_reference_step``; otherwise 0.  The caller caps the sum at 1.0.
        """
        explicit = self.has_back_reference_marker(later_text)
        # The marker's own words ("之前", "刚才") must not count as shared content.
        stripped = _BACKREF_ZH.sub(" ", _BACKREF_EN.sub(" ", _normalise(later_text)))
        shared = len(extract_terms(earlier_text) & extract_terms(stripped))
        if explicit and shared >= self.back_reference_explicit_min_shared:
            return self.back_reference_step
        if shared >= self.back_reference_min_shared:
            return self.back_reference_step
        return 0.0


def _clamp01(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return max(0.0, min(1.0, value))
