"""A document retrieval set made from a conversation benchmark, and its scoring.

Each session of a conversation becomes one Markdown document::

    # Caroline and Melanie, session 3 (27 June 2023, 13:56)

    **Caroline**: Hey Mel! ...

    **Melanie**: I went camping [image: a tent by a lake]

one paragraph per turn, and the character span of every turn in its
document is recorded. A question becomes a query whose relevant spans are
its evidence turns' spans, so any chunker and any retriever that returns
passages as ``(doc_id, start, end)`` can be scored against the same gold,
whatever the passages' sizes:

* recall@k: share of the evidence turns whose span overlaps one of the top-k
  passages;
* any@k: 1 if any evidence turn does;
* MRR: 1 / rank of the first passage overlapping an evidence turn, 0 if none
  does within the deepest k;
* tokens@k: tokens of the top-k passages together, what a caller pays to read
  them (a parent passage covers more turns and costs more).

Plain Python; nothing here runs a retriever.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strata.ids import ID_PATTERN
from strata_bench.evaluation.datasets import Benchmark, EvalConversation, EvalSession, EvalTurn
from strata_bench.evaluation.ingest import safe_id

__all__ = [
    "DocumentCorpus",
    "DocumentQuery",
    "DocumentSet",
    "EvalDocument",
    "PassageBoard",
    "Span",
    "document_set",
    "score_passages",
    "session_document",
]

#: ``(doc_id, start, end)``: characters ``start:end`` of a document.
Span = tuple[str, int, int]

#: Categories left out unless asked for, as ``strata eval retrieval`` does:
#: LoCoMo's adversarial questions have no answer in the conversation to find.
DEFAULT_EXCLUDED = frozenset({"adversarial"})

_LINE_BREAKS = re.compile(r"\s*\n\s*")


@dataclass(frozen=True)
class EvalDocument:
    """One session as Markdown; ``spans[turn_id] == (start, end)`` of its paragraph."""

    doc_id: str
    title: str
    text: str
    spans: Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class DocumentQuery:
    id: str
    question: str
    category: str
    evidence: tuple[str, ...]  # turn ids, never empty


@dataclass(frozen=True)
class DocumentCorpus:
    """The documents of one conversation (one tenant) and the queries about them."""

    id: str
    documents: tuple[EvalDocument, ...]
    queries: tuple[DocumentQuery, ...]

    def span(self, turn_id: str) -> Span:
        """Where a turn lies: its document and character span."""
        for doc in self.documents:
            found = doc.spans.get(turn_id)
            if found is not None:
                return doc.doc_id, found[0], found[1]
        raise KeyError(turn_id)

    def evidence_spans(self, query: DocumentQuery) -> list[Span]:
        return [self.span(t) for t in query.evidence]


@dataclass(frozen=True)
class DocumentSet:
    name: str
    corpora: tuple[DocumentCorpus, ...]
    #: Questions the benchmark loader dropped (no valid evidence).
    skipped_questions: int = 0

    @property
    def queries(self) -> int:
        return sum(len(c.queries) for c in self.corpora)


def _speakers(conversation: EvalConversation) -> str:
    names = list(dict.fromkeys(t.speaker for t in conversation.turns))
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _turn_line(turn: EvalTurn) -> str:
    # A turn is one paragraph: a blank line inside it would split it in two.
    text = _LINE_BREAKS.sub(" ", turn.text.strip())
    caption = f" [image: {_LINE_BREAKS.sub(' ', turn.image_caption.strip())}]" if turn.image_caption else ""
    return f"**{turn.speaker}**: {text}{caption}"


def _doc_id(session: EvalSession, number: int, taken: Collection[str]) -> str:
    safe = safe_id(session.id)
    if not ID_PATTERN.fullmatch(safe) or safe in taken:  # safe_id left only id characters, 128 at most
        safe = f"session-{number}"
    return safe


def session_document(
    conversation: EvalConversation, session: EvalSession, number: int, *, doc_id: str | None = None
) -> EvalDocument:
    """Session ``number`` (1-based) of ``conversation`` as one Markdown document.

    A heading naming the speakers, the session number and date, then one
    paragraph per turn: ``**Speaker**: text`` plus `` [image: caption]``.
    Line breaks inside a turn become spaces.
    """
    date = f" ({session.date.day} {session.date:%B %Y, %H:%M})" if session.date else ""
    title = f"{_speakers(conversation)}, session {number}{date}"
    parts = [f"# {title}"]
    offset = len(parts[0])
    spans: dict[str, tuple[int, int]] = {}
    for turn in session.turns:
        line = _turn_line(turn)
        offset += 2  # the blank line before it
        spans[turn.id] = (offset, offset + len(line))
        parts.append(line)
        offset += len(line)
    text = "\n\n".join(parts) + "\n"
    return EvalDocument(doc_id or _doc_id(session, number, ()), title, text, spans)


def document_set(
    benchmark: Benchmark,
    *,
    categories: Collection[str] | None = None,
    conversations: int | None = None,
) -> DocumentSet:
    """Every session of every conversation as a document; questions as queries.

    Args:
        categories: the question categories to keep; by default all but
            LoCoMo's ``adversarial`` ones.
        conversations: only the first this many conversations.
    """
    corpora = []
    for conversation in benchmark.conversations[:conversations]:
        documents: list[EvalDocument] = []
        for number, session in enumerate(conversation.sessions, start=1):
            if not session.turns:
                continue
            doc_id = _doc_id(session, number, {d.doc_id for d in documents})
            documents.append(session_document(conversation, session, number, doc_id=doc_id))
        queries = tuple(
            DocumentQuery(q.id, q.question, q.category, q.evidence)
            for q in conversation.questions
            if (q.category in categories if categories is not None else q.category not in DEFAULT_EXCLUDED)
        )
        corpora.append(DocumentCorpus(conversation.id, tuple(documents), queries))
    return DocumentSet(benchmark.name, tuple(corpora), benchmark.skipped_questions)


# ----------------------------------------------------------------- scoring


def _overlaps(a: Span, b: Span) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def score_passages(evidence: Sequence[Span], passages: Sequence[Span], ks: Iterable[int]) -> dict[str, float]:
    """One query's scores: ``recall@k`` and ``any@k`` for each k, and ``rr``.

    A passage covers an evidence turn when their spans overlap in the same
    document. ``rr`` is 1 / rank of the first passage covering any evidence
    turn among the top ``max(ks)``, else 0.

    Raises:
        ValueError: If ``evidence`` is empty or a k is below 1.
    """
    ks = sorted(set(ks))
    if not evidence:
        raise ValueError("evidence is empty: the query cannot be scored")
    if not ks or ks[0] < 1:
        raise ValueError(f"every k must be at least 1, got {ks}")
    wanted = list(dict.fromkeys(evidence))
    # For each evidence turn, the rank of the first passage that covers it.
    first = [next((r for r, p in enumerate(passages, 1) if _overlaps(p, e)), None) for e in wanted]
    out: dict[str, float] = {}
    for k in ks:
        found = sum(1 for r in first if r is not None and r <= k)
        out[f"recall@{k}"] = found / len(wanted)
        out[f"any@{k}"] = 1.0 if found else 0.0
    best = min((r for r in first if r is not None), default=None)
    out["rr"] = 1.0 / best if best is not None and best <= ks[-1] else 0.0
    return out


class PassageBoard:
    """Per-query scores and passage costs, reported as means overall and by category."""

    def __init__(self, ks: Sequence[int], *, tokens_k: int = 5) -> None:
        self.ks = sorted(set(ks))
        self.tokens_k = tokens_k
        self._rows: list[tuple[str, dict[str, float]]] = []

    def add(
        self,
        category: str,
        evidence: Sequence[Span],
        passages: Sequence[Span],
        *,
        texts: Sequence[str] = (),
        count: Callable[[str], int] | None = None,
    ) -> dict[str, float]:
        """Score one query; ``texts`` (the passages' texts) and ``count`` give tokens@k."""
        row = score_passages(evidence, passages, self.ks)
        if count is not None:
            row[f"tokens@{self.tokens_k}"] = float(sum(count(t) for t in texts[: self.tokens_k]))
        self._rows.append((category, row))
        return row

    def __len__(self) -> int:
        return len(self._rows)

    def report(self) -> dict[str, Any]:
        """``{"overall": {metric: mean, ..., "questions": n}, "categories": {name: {...}}}``."""
        by_category: dict[str, list[dict[str, float]]] = {}
        for category, row in self._rows:
            by_category.setdefault(category, []).append(row)
        return {
            "overall": _means([row for _, row in self._rows]),
            "categories": {name: _means(by_category[name]) for name in sorted(by_category)},
        }


def _means(rows: Sequence[dict[str, float]]) -> dict[str, Any]:
    keys = list(dict.fromkeys(key for row in rows for key in row))
    out: dict[str, Any] = {key: sum(row.get(key, 0.0) for row in rows) / len(rows) for key in keys} if rows else {}
    if "rr" in out:
        out["mrr"] = out.pop("rr")
    out["questions"] = len(rows)
    return out
