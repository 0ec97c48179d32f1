"""Benchmarks for retrieval evaluation, loaded into one neutral shape.

Two sources are read:

* LoCoMo (``locomo10.json``): a JSON list of samples, with free-text session
  dates and a handful of data defects the loader repairs or drops (see
  :func:`load_locomo`).
* Strata's neutral format: ``{"conversations": [...]}``, validated strictly
  (see :func:`load_strata`).

Every question keeps only evidence ids that name turns of its own conversation;
a question left with no evidence cannot be scored for retrieval, so it is
skipped and counted in :attr:`Benchmark.skipped_questions` instead.
All datetimes are timezone-aware; a source without a zone is read as UTC.

Every defect of a file raises :class:`ValueError`, a value of the wrong JSON type too
(not :class:`TypeError`): callers catch one error for a bad file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "LOCOMO_CATEGORIES",
    "Benchmark",
    "EvalConversation",
    "EvalQuestion",
    "EvalSession",
    "EvalTurn",
    "load_benchmark",
    "load_locomo",
    "load_strata",
    "parse_locomo_datetime",
    "reference_time",
]

# As LoCoMo's own scoring code numbers them, not in the order the paper lists them.
LOCOMO_CATEGORIES: Mapping[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


@dataclass(frozen=True)
class EvalTurn:
    """One message: ``id`` is unique within its conversation."""

    id: str
    speaker: str
    text: str
    image_caption: str | None = None


@dataclass(frozen=True)
class EvalSession:
    """A dated run of turns; ``date`` is None when the source gives none we can read."""

    id: str
    date: datetime | None
    turns: tuple[EvalTurn, ...]


@dataclass(frozen=True)
class EvalQuestion:
    """A question whose answer lies in the turns named by ``evidence`` (never empty).

    ``answer`` is None when the source has no gold answer (LoCoMo's adversarial
    questions); ``date`` is when the question is asked, if the source says.
    """

    id: str
    question: str
    answer: str | None
    evidence: tuple[str, ...]
    category: str
    date: datetime | None = None


@dataclass(frozen=True)
class EvalConversation:
    """One history (sessions in order) and the questions asked about it."""

    id: str
    sessions: tuple[EvalSession, ...]
    questions: tuple[EvalQuestion, ...]

    @property
    def turns(self) -> tuple[EvalTurn, ...]:
        """All turns of all sessions, in order."""
        return tuple(turn for session in self.sessions for turn in session.turns)


@dataclass(frozen=True)
class Benchmark:
    """A named set of conversations.

    ``skipped_questions`` counts questions dropped because none of their
    evidence ids named a turn of their conversation.
    """

    name: str
    conversations: tuple[EvalConversation, ...]
    skipped_questions: int = 0


def reference_time(conversation: EvalConversation, question: EvalQuestion) -> datetime | None:
    """The "now" a question is asked at: its own date, else the latest session date.

    Relative expressions in a question ("last week") resolve against this.
    Returns None when neither the question nor any session is dated.
    """
    if question.date is not None:
        return question.date
    dates = [s.date for s in conversation.sessions if s.date is not None]
    return max(dates) if dates else None


# ----------------------------------------------------------------- LoCoMo

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_DIA_ID = re.compile(r"D\d+:\d+")

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>[a-z]+)\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
_DATE_PATTERNS = (
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b"),  # 8 May, 2023
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b"),  # May 8, 2023
)
# A time needs a colon or am/pm, so the day number in "8 May" is never read as an hour.
_TIME_PATTERNS = (
    re.compile(r"\b(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::\d{2})?(?:\s*(?P<half>[ap])\.?m\b\.?)?"),
    re.compile(r"\b(?P<hour>\d{1,2})\s*(?P<half>[ap])\.?m\b\.?"),
)


def parse_locomo_datetime(text: str) -> datetime | None:
    """Read a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"`` as UTC.

    Also accepts the variants hand-edited data drifts into: no comma, "a.m.",
    24-hour clock, "May 8th, 2023", abbreviated months, a date with no time
    (midnight), or an ISO-8601 string. Returns None for anything else, and for
    impossible values ("30 February", "13 pm").
    """
    stripped = text.strip()
    if not stripped:
        return None
    try:
        # Converted data sometimes lands here already in ISO form.
        return _as_aware(datetime.fromisoformat(stripped))
    except ValueError:
        pass
    cleaned = " ".join(stripped.lower().split())

    hour, minute = 0, 0
    for pattern in _TIME_PATTERNS:
        match = pattern.search(cleaned)
        if match is None:
            continue
        hour = int(match["hour"])
        minute = int(match["minute"]) if "minute" in match.groupdict() and match["minute"] else 0
        half = match["half"]
        if half is not None:
            if not 1 <= hour <= 12:
                return None
            hour = hour % 12 + (12 if half == "p" else 0)
        # Cut the time out so its digits cannot pose as a day below.
        cleaned = cleaned[: match.start()] + " " + cleaned[match.end() :]
        break

    for pattern in _DATE_PATTERNS:
        for match in pattern.finditer(cleaned):
            if match["month"] not in _MONTHS:
                continue
            try:
                return datetime(
                    int(match["year"]), _MONTHS[match["month"]], int(match["day"]), hour, minute, tzinfo=UTC
                )
            except ValueError:
                return None
    return None


def load_locomo(path: str | os.PathLike[str]) -> Benchmark:
    """Load LoCoMo (a JSON list of ``{sample_id, conversation, qa, ...}`` samples).

    Sessions are the non-empty ``session_N`` lists in numeric order (some
    samples carry more ``session_N_date_time`` keys than sessions). Evidence
    strings are split on ``;``, commas and white space, and only
    ``D<int>:<int>`` ids naming an existing turn are kept: the data has
    malformed strings ("D8:6; D9:17", "D", "D:11:26") and ids of turns that
    do not exist. Question ids are ``f"{sample_id}-q{index}"`` with ``index``
    the position in the sample's ``qa`` list, so ids stay stable when
    questions are skipped.

    Raises:
        ValueError: If the file is not LoCoMo-shaped, a category is unknown, or
            a turn id repeats within a conversation.
    """
    path = Path(path)
    return _locomo_from_json(_read_json(path), name=path.stem)


def _locomo_from_json(data: Any, *, name: str) -> Benchmark:
    if not isinstance(data, list):
        raise ValueError("LoCoMo data must be a JSON list of samples")
    conversations: list[EvalConversation] = []
    skipped = 0
    for position, sample in enumerate(data):
        where = f"sample {position}"
        sample_id = str(_require(sample, "sample_id", where))
        where = f"sample {sample_id}"
        conversation = _require(sample, "conversation", where)
        if not isinstance(conversation, dict):
            raise ValueError(f"{where}: 'conversation' must be an object")
        sessions = _locomo_sessions(conversation, where)
        turn_ids = _check_unique_turn_ids(sessions, where)
        questions: list[EvalQuestion] = []
        for index, qa in enumerate(_require(sample, "qa", where)):
            question = _locomo_question(qa, f"{sample_id}-q{index}", turn_ids)
            if question is None:
                skipped += 1
            else:
                questions.append(question)
        conversations.append(EvalConversation(sample_id, tuple(sessions), tuple(questions)))
    return Benchmark(name, tuple(conversations), skipped)


def _locomo_sessions(conversation: Mapping[str, Any], where: str) -> list[EvalSession]:
    numbered: list[tuple[int, str]] = []
    for key, value in conversation.items():
        match = _SESSION_KEY.fullmatch(key)
        if match and isinstance(value, list) and value:
            numbered.append((int(match[1]), key))
    sessions = []
    # Numeric order: "session_10" sorts before "session_2" as a string.
    for _, key in sorted(numbered):
        raw_date = conversation.get(f"{key}_date_time")
        date = parse_locomo_datetime(raw_date) if isinstance(raw_date, str) else None
        turns = []
        for raw in conversation[key]:
            turn_where = f"{where} {key}"
            caption = raw.get("blip_caption") if isinstance(raw, dict) else None
            turns.append(
                EvalTurn(
                    id=str(_require(raw, "dia_id", turn_where)),
                    speaker=str(_require(raw, "speaker", turn_where)),
                    text=str(_require(raw, "text", turn_where)),
                    image_caption=str(caption) if caption else None,
                )
            )
        sessions.append(EvalSession(key, date, tuple(turns)))
    return sessions


def _locomo_question(qa: Any, question_id: str, turn_ids: frozenset[str]) -> EvalQuestion | None:
    where = f"question {question_id}"
    raw_category = _require(qa, "category", where)
    try:
        category = LOCOMO_CATEGORIES[int(raw_category)]
    except (KeyError, ValueError, TypeError):
        raise ValueError(f"{where}: unknown LoCoMo category {raw_category!r}") from None
    raw_evidence = qa.get("evidence") or []
    if isinstance(raw_evidence, str):
        raw_evidence = [raw_evidence]
    pieces = (piece for item in raw_evidence for piece in _EVIDENCE_SPLIT.split(str(item)))
    evidence = _known_evidence((p for p in pieces if _DIA_ID.fullmatch(p)), turn_ids)
    if not evidence:
        return None
    # Adversarial questions carry only the trap answer (`adversarial_answer`); their
    # gold is "not mentioned", so there is no answer to keep.
    answer = qa.get("answer")
    return EvalQuestion(
        id=question_id,
        question=str(_require(qa, "question", where)),
        answer=None if answer is None else str(answer),
        evidence=evidence,
        category=category,
        date=None,
    )


# ----------------------------------------------------------------- neutral format


def load_strata(path: str | os.PathLike[str]) -> Benchmark:
    """Load Strata's neutral evaluation format.

    The shape, exactly::

        {"conversations": [{"id": str,
          "sessions": [{"id": str, "date": ISO-8601 str | null,
                        "turns": [{"id": str, "speaker": str, "text": str,
                                   "image_caption": str (optional)}]}],
          "questions": [{"id": str, "question": str, "answer": str (optional),
                         "evidence": [turn id, ...], "category": str,
                         "date": ISO-8601 str (optional)}]}]}

    Evidence ids that are not turns of the conversation are dropped; a question
    left with none is skipped and counted.

    Raises:
        ValueError: On a missing or mistyped field, an unparseable date, or a
            turn id that repeats within a conversation (the message names it).
    """
    path = Path(path)
    return _strata_from_json(_read_json(path), name=path.stem)


def _strata_from_json(data: Any, *, name: str) -> Benchmark:
    if not isinstance(data, dict) or not isinstance(data.get("conversations"), list):
        raise ValueError("neutral-format data must be an object with a 'conversations' list")
    conversations: list[EvalConversation] = []
    skipped = 0
    for c_index, raw in enumerate(data["conversations"]):
        where = f"conversations[{c_index}]"
        conversation_id = _string(raw, "id", where)
        sessions = []
        for s_index, raw_session in enumerate(_list(raw, "sessions", where)):
            s_where = f"{where}.sessions[{s_index}]"
            turns = []
            for t_index, raw_turn in enumerate(_list(raw_session, "turns", s_where)):
                t_where = f"{s_where}.turns[{t_index}]"
                turns.append(
                    EvalTurn(
                        id=_string(raw_turn, "id", t_where),
                        speaker=_string(raw_turn, "speaker", t_where),
                        text=_string(raw_turn, "text", t_where),
                        image_caption=_optional_string(raw_turn, "image_caption", t_where),
                    )
                )
            sessions.append(
                EvalSession(
                    id=_string(raw_session, "id", s_where),
                    date=_optional_date(raw_session, "date", s_where),
                    turns=tuple(turns),
                )
            )
        turn_ids = _check_unique_turn_ids(sessions, f"conversation {conversation_id!r}")
        questions = []
        for q_index, raw_question in enumerate(_list(raw, "questions", where)):
            q_where = f"{where}.questions[{q_index}]"
            raw_evidence = _list(raw_question, "evidence", q_where)
            if not all(isinstance(e, str) for e in raw_evidence):
                raise ValueError(f"{q_where}: 'evidence' must be a list of turn id strings")
            evidence = _known_evidence(raw_evidence, turn_ids)
            if not evidence:
                skipped += 1
                continue
            questions.append(
                EvalQuestion(
                    id=_string(raw_question, "id", q_where),
                    question=_string(raw_question, "question", q_where),
                    answer=_optional_string(raw_question, "answer", q_where),
                    evidence=evidence,
                    category=_string(raw_question, "category", q_where),
                    date=_optional_date(raw_question, "date", q_where),
                )
            )
        conversations.append(EvalConversation(conversation_id, tuple(sessions), tuple(questions)))
    return Benchmark(name, tuple(conversations), skipped)


def _string(obj: Any, key: str, where: str) -> str:
    value = _require(obj, key, where)
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _optional_string(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _list(obj: Any, key: str, where: str) -> list[Any]:
    value = _require(obj, key, where)
    if not isinstance(value, list):
        raise ValueError(f"{where}: {key!r} must be a list, got {type(value).__name__}")
    return value


def _optional_date(obj: Mapping[str, Any], key: str, where: str) -> datetime | None:
    value = _optional_string(obj, key, where)
    if value is None:
        return None
    try:
        return _as_aware(datetime.fromisoformat(value))
    except ValueError:
        raise ValueError(f"{where}: {key!r} is not an ISO-8601 datetime: {value!r}") from None


# ----------------------------------------------------------------- shared


def load_benchmark(path: str | os.PathLike[str], fmt: str | None = None) -> Benchmark:
    """Load a benchmark file as ``"locomo"``, ``"strata"``, or detected (``fmt=None``).

    Detection: a JSON list is LoCoMo, an object with ``"conversations"`` is the
    neutral format.

    Raises:
        ValueError: If ``fmt`` is unknown, the format cannot be detected, or the
            loader rejects the data.
    """
    path = Path(path)
    data = _read_json(path)
    if fmt is None:
        if isinstance(data, list):
            fmt = "locomo"
        elif isinstance(data, dict) and "conversations" in data:
            fmt = "strata"
        else:
            raise ValueError(f"{path}: cannot tell the format (neither a LoCoMo list nor {{'conversations': ...}})")
    if fmt == "locomo":
        return _locomo_from_json(data, name=path.stem)
    if fmt == "strata":
        return _strata_from_json(data, name=path.stem)
    raise ValueError(f"unknown benchmark format {fmt!r}; expected 'locomo', 'strata' or None")


def _read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def _require(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise ValueError(f"{where}: missing {key!r}")
    return obj[key]


def _check_unique_turn_ids(sessions: Iterable[EvalSession], where: str) -> frozenset[str]:
    seen: set[str] = set()
    for session in sessions:
        for turn in session.turns:
            if turn.id in seen:
                raise ValueError(f"{where}: duplicate turn id {turn.id!r}")
            seen.add(turn.id)
    return frozenset(seen)


def _known_evidence(ids: Iterable[str], turn_ids: frozenset[str]) -> tuple[str, ...]:
    # Order kept, repeats dropped: recall divides by the number of distinct turns.
    return tuple(dict.fromkeys(i for i in ids if i in turn_ids))


def _as_aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.utcoffset() is None else value
