"""Rolling summaries of conversation turns: structured, LLM or extractive.

A summary has four fields (DESIGN.md §1): ``summary``, ``key_topics``,
``action_items`` and ``user_preferences``. :class:`LLMSummarizer` asks the
configured LLM and falls back to :class:`ExtractiveSummarizer` whenever the
LLM fails or answers garbage, so a summary is always produced.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from strata.errors import LLMError
from strata.providers.llm import LLM, LLMCall, complete_json, inline_schema
from strata.retrieval.terms import extract_terms, stemmed_words

__all__ = [
    "EpisodeSummary",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
    "SummaryInput",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SummaryInput:
    speaker: str
    text: str


@dataclass(frozen=True)
class EpisodeSummary:
    summary: str
    key_topics: tuple[str, ...] = ()
    action_items: tuple[str, ...] = ()
    user_preferences: tuple[str, ...] = ()
    #: "llm" or "extractive", and why a fallback happened if it did.
    method: str = "extractive"
    fallback_reason: str | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeSummary:
        return cls(
            summary=str(data.get("summary", "")),
            key_topics=tuple(data.get("key_topics", ())),
            action_items=tuple(data.get("action_items", ())),
            user_preferences=tuple(data.get("user_preferences", ())),
            method=str(data.get("method", "extractive")),
            fallback_reason=data.get("fallback_reason"),
        )


class Summarizer(Protocol):
    def summarize(self, turns: Sequence[SummaryInput]) -> EpisodeSummary: ...


_SENTENCE = re.compile(r"(?<=[.!?。！？])\s*")
_ACTION = re.compile(
    r"\b(i will|i'll|we will|we'll|need to|have to|going to|todo|to-do|remind me|"
    r"don't forget|deadline|by (monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow))\b"
    r"|要去|需要|记得|别忘了|打算|计划|安排|提醒我",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(i (really )?(like|love|prefer|enjoy|hate|dislike|can't stand)|my favou?rite|i'm (into|allergic))\b"
    r"|我(很|最|不|特别)?(喜欢|爱|讨厌|偏好|不想|想要)|我对.{0,6}过敏",
    re.IGNORECASE,
)


class ExtractiveSummarizer:
    """Picks the sentences that carry the most frequent content terms. No LLM."""

    def __init__(self, *, max_sentences: int = 3, max_topics: int = 5) -> None:
        self._max_sentences = max_sentences
        self._max_topics = max_topics

    def summarize(self, turns: Sequence[SummaryInput]) -> EpisodeSummary:
        sentences: list[tuple[int, str, str]] = []  # (order, speaker, sentence)
        for turn in turns:
            for part in _SENTENCE.split(turn.text.strip()):
                if part.strip():
                    sentences.append((len(sentences), turn.speaker, part.strip()))
        terms = [extract_terms(s) for _, _, s in sentences]  # by order, each sentence's once
        counts = Counter(t for found in terms for t in found)

        def weight(order: int) -> float:
            found = terms[order]
            return sum(counts[t] for t in found) / (1 + len(found)) ** 0.5 if found else 0.0

        best = sorted(sentences, key=lambda s: (-weight(s[0]), s[0]))[: self._max_sentences]
        summary = " ".join(f"{speaker}: {text}" for _, speaker, text in sorted(best))
        # A topic is shown as the word it was written as most often ("hiking"), not as its stem ("hike").
        written = Counter(pair for _, _, s in sentences for pair in stemmed_words(s))
        shown = {term: word for (term, word), _ in reversed(written.most_common())}
        topics = tuple(
            shown.get(t, t) for t, n in counts.most_common(self._max_topics * 2) if n > 1 or len(counts) < 8
        )
        return EpisodeSummary(
            summary=summary,
            key_topics=topics[: self._max_topics],
            action_items=tuple(_unique(s for _, _, s in sentences if _ACTION.search(s)))[:5],
            user_preferences=tuple(
                _unique(s for _, speaker, s in sentences if speaker != "assistant" and _PREFERENCE.search(s))
            )[:5],
            method="extractive",
        )


def _unique(items: Any) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


class _SummarySchema(BaseModel):
    model_config = ConfigDict(extra="ignore")

    summary: str = Field(min_length=1, max_length=4000)
    key_topics: list[str] = Field(default_factory=list, max_length=20)
    action_items: list[str] = Field(default_factory=list, max_length=20)
    user_preferences: list[str] = Field(default_factory=list, max_length=20)


_SYSTEM = (
    "You summarise a slice of a conversation for an assistant's long-term memory. "
    'Reply with one JSON object: {"summary": str, "key_topics": [str], '
    '"action_items": [str], "user_preferences": [str]}. Keep names, dates and numbers.'
)


#: Background work: ``llm.timeout_s``, the feature's ``max_tokens``, the schema sent.
_CALL = LLMCall(feature="summary", schema=inline_schema(_SummarySchema.model_json_schema()))


#: The most of one utterance an LLM summary reads: a turn may hold 1,000,000 characters (a pasted
#: log), which no model's context takes; its opening and its end say what it was.
LLM_UTTERANCE_CHARS = 4_000


def _clipped(text: str) -> str:
    if len(text) <= LLM_UTTERANCE_CHARS:
        return text
    half = LLM_UTTERANCE_CHARS // 2
    return f"{text[:half]} […{len(text) - 2 * half} characters left out…] {text[-half:]}"


class LLMSummarizer:
    """Summaries drafted by the LLM, validated; the extractive one when that fails."""

    def __init__(self, llm: LLM, *, fallback: Summarizer | None = None) -> None:
        self._llm = llm
        self._fallback = fallback or ExtractiveSummarizer()

    def summarize(self, turns: Sequence[SummaryInput]) -> EpisodeSummary:
        transcript = "\n".join(f"{t.speaker}: {_clipped(t.text)}" for t in turns)
        try:
            parsed: _SummarySchema = complete_json(
                self._llm, _SYSTEM, transcript, validate=_SummarySchema.model_validate, call=_CALL
            )
        except LLMError as exc:
            log.warning("LLM summary failed, using the extractive one: %s", exc.message)
            fallback = self._fallback.summarize(turns)
            return EpisodeSummary(
                **{**fallback.__dict__, "method": "extractive", "fallback_reason": exc.message}
            )
        return EpisodeSummary(
            summary=parsed.summary,
            key_topics=tuple(parsed.key_topics),
            action_items=tuple(parsed.action_items),
            user_preferences=tuple(parsed.user_preferences),
            method="llm",
        )
