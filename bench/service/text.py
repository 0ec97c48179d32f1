"""The service benchmark's text: turns, runbook documents and questions from varied templates,
mixed with LoCoMo's sentences and questions when they are given (read locally, never downloaded).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from strata.limits import MESSAGE_CHARS_MAX
from strata_bench.service.sizes import SESSION_TURNS

__all__ = ["TextSource", "hostile_texts", "make_sessions"]

# -- synthetic data ---------------------------------------------------------------

_SLOTS: dict[str, list[str]] = {
    "person": ["Ana", "Marco", "Priya", "Tom", "Yuki", "Lena", "Omar", "Grace", "Sam", "Ines", "Kofi", "Mei"],
    "city": ["Lisbon", "Kyoto", "Oslo", "Porto", "Seville", "Hanoi", "Vancouver", "Tbilisi", "Cork", "Lyon"],
    "month": ["March", "April", "June", "August", "October", "December"],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"],
    "food": ["lentil soup", "mushroom risotto", "pad thai", "shakshuka", "ramen", "falafel", "paella"],
    "hobby": ["bouldering", "watercolour painting", "the cello", "sourdough baking", "trail running", "chess"],
    "project": ["the billing migration", "the mobile app redesign", "the data pipeline", "the onboarding flow"],
    "tool": ["Terraform", "Kubernetes", "Postgres", "Kafka", "Redis", "Grafana", "Airflow"],
    "number": ["3", "12", "45", "120", "250", "1,500"],
    "pet": ["dog Biscuit", "cat Miso", "parrot Kiwi", "rabbit Clover"],
    "book": ["Piranesi", "The Overstory", "Dune", "Educated", "Project Hail Mary"],
}
_USER = [
    "I finally booked the flights to {city} for {month}; {person} is coming with me.",
    "Can you remind me that {person}'s birthday dinner is on {day} at 7?",
    "I tried making {food} last night and it came out far too salty.",
    "We hit a problem with {tool} in {project}: the job fails after {number} retries.",
    "My {pet} has a vet appointment on {day} morning, please keep that in mind.",
    "I've started {hobby} again, twice a week after work.",
    "{person} recommended {book}; I'm about {number} pages in and loving it.",
    "The budget for {project} is capped at {number} thousand euros this quarter.",
    "Please remember that I'm allergic to peanuts and prefer vegetarian places.",
    "I'm thinking of moving to {city} next year for the new job.",
    "Our standup moved to {day} because {person} is out.",
    "I spent the weekend fixing the {tool} dashboards for {project}.",
    "What should I pack for a week in {city} in {month}?",
    "I ran {number} kilometres this month, my best so far.",
    "{person} and I argued about whether to use {tool} for {project}.",
]
_AGENT = [
    "Noted: {city} in {month} with {person}. Want me to track the hotel too?",
    "I'll remind you on {day}. Shall I suggest a restaurant near {city} Street?",
    "Less salt and a splash of lemon usually rescues {food}.",
    "That sounds like a timeout; raising the {tool} client timeout often fixes it.",
    "Got it, {day} morning for the vet. I'll bring it up the day before.",
    "Great! {hobby} twice a week is a good rhythm.",
    "{book} is a good pick; tell me what you think when you finish.",
    "Understood, I'll keep {project} within {number} thousand.",
    "I'll remember that and only suggest places without peanuts.",
    "Moving is a big step; I can compare rents in {city} if you like.",
]
_QUESTIONS = [
    "When am I flying to {city}?", "What did I say about {food}?", "What went wrong with {tool} last week?",
    "When is the vet appointment for my {pet}?", "Which book did {person} recommend?",
    "How much budget does {project} have?", "What are my dietary restrictions?", "What hobby did I pick up again?",
    "What do the runbooks say about {tool} failover?", "Who is coming with me to {city}?",
    "What did we decide about {project} yesterday?", "How far did I run this month?",
]
_DOC_TOPICS = ["payments", "search", "auth", "deploys", "billing", "alerting", "databases", "caching",
               "onboarding", "backups", "networking", "observability"]
_DOC_SENTENCES = [
    "The {topic} service runs {number} replicas behind {tool}, spread over two zones.",
    "On a failure, page the {topic} on-call first; {person} owns the escalation policy.",
    "Restarts of {topic} workers go through a canary that takes five percent of traffic.",
    "Every {day} the {topic} team reviews error budgets and open incidents.",
    "Credentials for {topic} rotate every {number} days and live in the vault.",
    "A full {topic} failover to the standby region takes about {number} seconds.",
    "Latency of {topic} above the SLO for ten minutes opens an incident automatically.",
    "{person} wrote the {topic} playbook after the outage in {month}.",
]


class TextSource:
    """Turns, documents and questions: templates, mixed with LoCoMo's sentences when given."""

    def __init__(self, sentences: Path | None = None, *, seed: int = 7) -> None:
        self._rng = random.Random(seed)  # noqa: S311  a seeded workload, not a secret
        self._pairs: list[tuple[str, str]] = []
        self._questions: list[str] = []
        self.origin = "templates"
        if sentences is not None and sentences.is_file():
            from strata_bench.evaluation.datasets import load_locomo

            for conversation in load_locomo(sentences).conversations:
                for session in conversation.sessions:
                    turns = [t.text for t in session.turns if t.text.strip()]
                    self._pairs += list(zip(turns[0::2], turns[1::2], strict=False))  # an odd last turn has no reply
                self._questions += [q.question for q in conversation.questions]
            self._rng.shuffle(self._pairs)
            self.origin = f"templates and {len(self._pairs)} LoCoMo turn pairs ({sentences})"
        self._cursor = 0

    def _fill(self, template: str, **extra: str) -> str:
        return template.format(**{k: self._rng.choice(v) for k, v in _SLOTS.items()}, **extra)

    def turns(self, n: int) -> list[tuple[str, str]]:
        """``n`` (user, agent) pairs; half from LoCoMo when it was given."""
        out = []
        for _ in range(n):
            if self._pairs and self._rng.random() < 0.5:
                out.append(self._pairs[self._cursor % len(self._pairs)])
                self._cursor += 1
            else:
                out.append((self._fill(self._rng.choice(_USER)), self._fill(self._rng.choice(_AGENT))))
        return out

    def document(self, n: int, *, paragraphs: int) -> tuple[str, str]:
        """A Markdown runbook: (title, text); ~60 words a paragraph."""
        topic = _DOC_TOPICS[n % len(_DOC_TOPICS)]
        title = f"{topic.title()} runbook {n}"
        body = [" ".join(self._fill(self._rng.choice(_DOC_SENTENCES), topic=topic) for _ in range(4))
                for _ in range(paragraphs)]
        return title, f"# {title}\n\n" + "\n\n".join(body)

    def questions(self, n: int) -> list[str]:
        """``n`` questions; half from LoCoMo when it was given."""
        out = []
        for _ in range(n):
            if self._questions and self._rng.random() < 0.5:
                out.append(self._rng.choice(self._questions))
            else:
                out.append(self._fill(self._rng.choice(_QUESTIONS)))
        return out


def make_sessions(
    source: TextSource, turns: int, prefix: str, *, now: datetime
) -> list[tuple[str, list[dict[str, Any]]]]:
    """Sessions of ``SESSION_TURNS`` turns, one a day, ending yesterday; turns two minutes apart."""
    count = max(1, -(-turns // SESSION_TURNS))
    out = []
    for s in range(count):
        start = now - timedelta(days=count - s)
        n = min(SESSION_TURNS, turns - s * SESSION_TURNS)
        pairs = source.turns(n)
        # Turn ids of their own make a retried batch safe: turns that landed are answered "replayed".
        out.append((f"{prefix}-s{s:04d}", [{"user": u, "agent": a, "timestamp": start + timedelta(minutes=2 * i),
                                           "turn_id": f"t{i:04d}"} for i, (u, a) in enumerate(pairs)]))
    return out


# -- hostile text in other scripts ---------------------------------------------------

#: (first, last) code points of the scripts the mixed-script text draws short runs from: Latin,
#: Cyrillic, Greek, Arabic, Devanagari, Hangul, Hiragana, Thai, CJK ideographs and Hebrew.
_SCRIPTS = [(0x41, 0x5A), (0x61, 0x7A), (0x400, 0x44F), (0x391, 0x3C9), (0x627, 0x64A), (0x905, 0x939),
            (0xAC00, 0xD7A3), (0x3041, 0x3096), (0xE01, 0xE2E), (0x4E00, 0x9FA5), (0x5D0, 0x5EA)]
#: What follows each emoji: a zero-width joiner, a variation selector, or a skin tone and a joiner.
#: Each keeps the text under 3.7 UTF-8 bytes a character, so 16,000 of them fit a turn (60,000 bytes).
_EMOJI_TAILS = ["\u200d", "\ufe0f", "\U0001f3fd\u200d"]


def hostile_texts(chars: int = MESSAGE_CHARS_MAX, *, seed: int = 0) -> dict[str, str]:
    """Texts of exactly ``chars`` characters in scripts other than English, each of a kind that
    once cost seconds to write (random: the same ``seed``, the same texts).

    ``random_cjk``: ideographs drawn from U+4E00-U+9FA5, which make almost no dictionary word,
    so jieba's taggers got all of them (a 1,000-character turn took 3.7 s of CPU to write, 16,000
    characters 59 s); ``mixed_scripts``: runs of one to eight characters of ten scripts, between
    spaces and stops; ``emoji``: with joiners, skin tones and variation selectors;
    ``combining_marks``: Latin letters under one to six combining marks each.
    """
    rng = random.Random(seed)  # noqa: S311  a seeded workload, not a secret
    cjk = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(chars))
    mixed: list[str] = []
    while len(mixed) < chars:
        first, last = rng.choice(_SCRIPTS)
        mixed += [chr(rng.randint(first, last)) for _ in range(rng.randint(1, 8))]
        mixed.append(rng.choice(" ,.。"))
    emoji: list[str] = []
    while len(emoji) < chars:
        emoji += [chr(rng.randint(0x1F300, 0x1FAFF)), rng.choice(_EMOJI_TAILS)]
    marks: list[str] = []
    while len(marks) < chars:
        marks += [chr(rng.randint(0x61, 0x7A)), *(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(1, 6)))]
    return {
        "random_cjk": cjk,
        "mixed_scripts": "".join(mixed)[:chars],
        "emoji": "".join(emoji)[:chars],
        "combining_marks": "".join(marks)[:chars],
    }
