"""``strata eval context``: what the context path returns for a benchmark's questions.

Each conversation goes into a fresh tenant through Strata's write path, as in
``strata eval retrieval``; each question is then asked through the context path
(the code behind ``/v1/context``) once per budget, in a session that holds no
turns, so the context is what the memory layers chose (working memory is empty).
Per budget it reports:

* evidence recall: the share of a question's evidence turns that are items of the
  returned context (episodic items of kind ``turn``, matched by turn id);
* tokens returned (``ContextResult.token_count``), as a mean and as a share of the budget;
* for questions whose answer is not in the history (LoCoMo's ``adversarial``
  category), the tokens returned: a context that knows it has nothing should be small.

Two references are measured in the same run: the whole history's tokens per
conversation, and each baseline's ranking (BM25, RRF) packed into the same
budget, greedily by rank until the next turn does not fit. Every count uses
Strata's own token counter (:mod:`strata.providers.tokens`).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from strata.providers.tokens import TokenCounter
from strata.schema import ContextResult
from strata_bench.evaluation.baselines import (
    BM25Retriever,
    DenseRetriever,
    MemoEmbedder,
    Retriever,
    RRFRetriever,
    turn_document,
)
from strata_bench.evaluation.datasets import Benchmark, EvalConversation, EvalTurn, reference_time
from strata_bench.evaluation.ingest import ingest_conversation, progress
from strata_bench.evaluation.metrics import Scoreboard

__all__ = [
    "BUDGETS",
    "NO_ANSWER_CATEGORIES",
    "BudgetTally",
    "ContextClient",
    "context_turn_ids",
    "evaluate_context",
    "evidence_recall",
    "format_context_table",
    "history_text",
    "limit_benchmark",
    "pack_turns",
    "run_packed_baseline",
    "run_strata_context",
    "turn_line",
]

BUDGETS = (256, 512, 1024, 2048)
#: Categories whose answer is not in the history: their evidence names a trap, not an answer.
NO_ANSWER_CATEGORIES = frozenset({"adversarial"})
#: The session the questions are asked in: never written to, so working memory adds nothing.
ASK_SESSION = "eval-ask"
#: How deep a baseline ranks: enough turns to fill the largest budget several times over.
_BASELINE_DEPTH = 200


class ContextClient(Protocol):
    """The part of :class:`~strata_actors.client.InClusterClient` the run uses."""

    async def record_turns(self, session_id: str, turns: Sequence[dict[str, Any]]) -> Any: ...

    async def build_context(self, message: str, session_id: str, *, max_tokens: int | None = None,
                            reference_time: Any = None, top_k: int | None = None) -> ContextResult: ...

    async def forget_session(self, session_id: str) -> Any: ...

    async def wait_for_passages(self) -> int: ...


# ----------------------------------------------------------------- metrics


def evidence_recall(evidence: Collection[str], returned: Iterable[str]) -> float:
    """The share of ``evidence`` turn ids among ``returned``.

    Raises:
        ValueError: If ``evidence`` is empty (recall is undefined).
    """
    wanted = set(evidence)
    if not wanted:
        raise ValueError("evidence is empty: recall is undefined")
    return len(wanted.intersection(returned)) / len(wanted)


def turn_line(turn: EvalTurn) -> str:
    """A turn as one line of text, ``Speaker: text`` (the text Strata stores for it)."""
    text = turn.text + (f" [shared an image: {turn.image_caption}]" if turn.image_caption else "")
    return f"{turn.speaker}: {text}"


def history_text(conversation: EvalConversation) -> str:
    """The whole history, one line per turn: what an agent pays to send it all."""
    return "\n".join(turn_line(t) for t in conversation.turns)


def pack_turns(
    ranked: Sequence[tuple[str, str]], budget_tokens: int, counter: TokenCounter
) -> tuple[list[str], int]:
    """Take ``(turn id, line)`` pairs in rank order until the next one does not fit.

    The lines are joined by newlines; returns the ids taken and the tokens of the
    joined text, which never exceed ``budget_tokens``.
    """
    ids: list[str] = []
    lines: list[str] = []
    used = 0
    for turn_id, line in ranked:
        # The parts' sum (the newline before it included) is cheap and usually exact; a join can
        # merge tokens ("word \n"), so before stopping, the joined text itself is counted.
        used += counter.count(line) + (1 if lines else 0)
        if used > budget_tokens:
            used = counter.count("\n".join([*lines, line]))
            if used > budget_tokens:
                break
        ids.append(turn_id)
        lines.append(line)
    tokens = counter.count("\n".join(lines))
    # A join could in principle cost more than its parts: the text itself is the measure.
    while tokens > budget_tokens:
        ids.pop()
        lines.pop()
        tokens = counter.count("\n".join(lines))
    return ids, tokens


def context_turn_ids(result: ContextResult, original: dict[str, str] | None = None) -> list[str]:
    """The ids of the turns placed in ``result`` (episodic items of kind ``turn``), mapped back
    through ``original`` (stored id -> benchmark id) where given."""
    original = original or {}
    return [
        original.get(item.id, item.id)
        for section in result.sections
        if section.layer == "episodic"
        for item in section.items
        if item.kind == "turn"
    ]


@dataclass
class BudgetTally:
    """One method's results at one budget: per question, its category, evidence recall
    (None: a question without an answer in the history) and tokens returned."""

    budget_tokens: int
    entries: list[tuple[str, float | None, int]] = field(default_factory=list)

    def add(self, category: str, evidence: Collection[str] | None, returned: Iterable[str], tokens: int) -> None:
        """Record a question; ``evidence`` None for one without an answer in the history."""
        recall = None if evidence is None else evidence_recall(evidence, returned)
        self.entries.append((category, recall, tokens))

    def report(self) -> dict[str, Any]:
        answerable = [(c, r, t) for c, r, t in self.entries if r is not None]
        unanswerable = [t for _, r, t in self.entries if r is None]
        by_category: dict[str, list[float]] = {}
        for category, recall, _ in answerable:
            by_category.setdefault(category, []).append(float(recall or 0.0))
        tokens = [t for _, _, t in answerable]
        return {
            "budget_tokens": self.budget_tokens,
            "questions": len(answerable),
            "recall": _mean([float(r or 0.0) for _, r, _ in answerable]),
            "tokens_mean": _mean(tokens),
            "budget_share": _mean(tokens) / self.budget_tokens if tokens else 0.0,
            "categories": {c: {"questions": len(v), "recall": _mean(v)} for c, v in sorted(by_category.items())},
            "no_answer_questions": len(unanswerable),
            "no_answer_tokens_mean": _mean(unanswerable) if unanswerable else None,
            "no_answer_budget_share": _mean(unanswerable) / self.budget_tokens if unanswerable else None,
        }


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def limit_benchmark(benchmark: Benchmark, *, conversations: int | None = None,
                    questions: int | None = None) -> Benchmark:
    """The first ``conversations`` conversations, each with its first ``questions`` questions."""
    kept = benchmark.conversations[:conversations] if conversations else benchmark.conversations
    if questions:
        kept = tuple(replace(c, questions=c.questions[:questions]) for c in kept)
    return replace(benchmark, conversations=tuple(kept))


# ----------------------------------------------------------------- runs


def _evidence(question: Any, no_answer: Collection[str]) -> tuple[str, ...] | None:
    return None if question.category in no_answer else question.evidence


async def run_strata_context(
    benchmark: Benchmark,
    budgets: Sequence[int],
    no_answer: Collection[str],
    make_client: Callable[[str], ContextClient],
    *,
    top_k: int | None = None,
) -> dict[str, Any]:
    """Ingest each conversation into a fresh tenant, ask every question at every budget, forget."""
    tallies = {b: BudgetTally(b) for b in budgets}
    kinds: dict[int, Counter[str]] = {b: Counter() for b in budgets}  # items placed, by layer/kind
    ingest_s, turns, refused, calls_ms = 0.0, 0, 0, []
    for conversation in benchmark.conversations:
        client = make_client(f"eval-{uuid.uuid4().hex[:10]}")
        started = time.perf_counter()
        ingested = await ingest_conversation(client, conversation)
        await client.wait_for_passages()  # long turns are searched by every passage's vector too
        sessions, original = ingested.sessions, ingested.original
        refused += len(ingested.refused)
        ingest_s += time.perf_counter() - started
        turns += len(conversation.turns)
        bar = progress(len(conversation.questions), f"context {conversation.id}")
        for q in conversation.questions:
            started = time.perf_counter()
            # The budgets of one question concurrently, as an agent's calls would overlap.
            results = await asyncio.gather(*(
                client.build_context(q.question, ASK_SESSION, max_tokens=b, top_k=top_k,
                                     reference_time=reference_time(conversation, q))
                for b in budgets
            ))
            calls_ms.append((time.perf_counter() - started) * 1000)
            for budget, result in zip(budgets, results, strict=True):
                tallies[budget].add(q.category, _evidence(q, no_answer), context_turn_ids(result, original),
                                    result.token_count)
                kinds[budget].update(f"{s.layer}/{i.kind}" for s in result.sections if s.layer != "working"
                                     for i in s.items)
            bar.update()
        bar.close()
        for session_id in sessions:
            with contextlib.suppress(Exception):  # a session that had no turns has nothing to forget
                await client.forget_session(session_id)
    asked = sum(len(c.questions) for c in benchmark.conversations) or 1
    return {
        # Per question, the items of each layer and kind the context held (summaries and
        # passages take places that turns, the only items recall counts, then do not).
        "budgets": [{**tallies[b].report(), "items_per_question": {k: round(n / asked, 2) for k, n in
                                                                  sorted(kinds[b].items())}} for b in budgets],
        "ingest_turns_per_s": round(turns / ingest_s, 1) if ingest_s else None,
        "refused_turns": refused,
        "question_ms_mean": round(_mean(calls_ms), 1),
    }


def run_packed_baseline(
    name: str,
    benchmark: Benchmark,
    budgets: Sequence[int],
    no_answer: Collection[str],
    make: Callable[[], Retriever],
    counter: TokenCounter,
) -> dict[str, Any]:
    """Rank each conversation's turns for each question with a baseline, and pack them into each budget.

    Also reports the baseline's recall@10 on the answerable questions, by which the
    best baseline is chosen."""
    tallies = {b: BudgetTally(b) for b in budgets}
    board = Scoreboard()
    for conversation in benchmark.conversations:
        turns = conversation.turns
        lines = {t.id: turn_line(t) for t in turns}
        retriever = make()
        retriever.index([t.id for t in turns], [turn_document(t) for t in turns])
        bar = progress(len(conversation.questions), f"{name} {conversation.id}")
        for q in conversation.questions:
            ranked = retriever.search(q.question, min(len(turns), _BASELINE_DEPTH))
            evidence = _evidence(q, no_answer)
            if evidence is not None:
                board.add(q.category, evidence, ranked)
            for budget in budgets:
                ids, tokens = pack_turns([(i, lines[i]) for i in ranked], budget, counter)
                tallies[budget].add(q.category, evidence, ids, tokens)
            bar.update()
        bar.close()
    return {
        "budgets": [tallies[b].report() for b in budgets],
        "recall@10": board.report([10])["overall"]["recall@10"] if len(board) else 0.0,
    }


def evaluate_context(
    benchmark: Benchmark,
    *,
    budgets: Sequence[int] = BUDGETS,
    baselines: Sequence[str] = ("bm25", "rrf"),
    no_answer: Collection[str] = NO_ANSWER_CATEGORIES,
    embedder: Any = None,
    counter: TokenCounter,
    make_client: Callable[[str], ContextClient] | None,
    top_k: int | None = None,
) -> dict[str, Any]:
    """Run the context path and the packed baselines; returns the ``--json`` document.

    ``make_client``: a client bound to a new tenant (None: baselines only).
    ``embedder``: for the ``rrf`` baseline's dense half. ``top_k``: passed to every
    context call (None: the task type's configured depth).

    Raises:
        ValueError: If a baseline is unknown, or ``rrf`` is asked for without an embedder.
    """
    unknown = set(baselines) - {"bm25", "rrf"}
    if unknown:
        raise ValueError(f"unknown baseline(s) {sorted(unknown)}; choose from bm25, rrf")
    factories: dict[str, Callable[[], Retriever]] = {"bm25": BM25Retriever}
    if "rrf" in baselines:
        if embedder is None:
            raise ValueError("the rrf baseline needs an embedder")
        memo = MemoEmbedder(embedder)
        factories["rrf"] = lambda: RRFRetriever([BM25Retriever(), DenseRetriever(memo)])
    history = {c.id: counter.count(history_text(c)) for c in benchmark.conversations}
    methods: dict[str, Any] = {}
    if make_client is not None:
        methods["strata"] = asyncio.run(run_strata_context(benchmark, budgets, no_answer, make_client, top_k=top_k))
    packed = {name: run_packed_baseline(name, benchmark, budgets, no_answer, factories[name], counter)
              for name in baselines}
    best = max(packed, key=lambda n: packed[n]["recall@10"]) if packed else None
    methods.update({f"{name} packed": result for name, result in packed.items()})
    return {
        "dataset": benchmark.name,
        "conversations": len(benchmark.conversations),
        "questions": sum(len(c.questions) for c in benchmark.conversations),
        "no_answer_categories": sorted(no_answer),
        "history_tokens": {"mean": _mean(list(history.values())), "per_conversation": history},
        "best_baseline": best,
        "methods": methods,
    }


def format_context_table(document: dict[str, Any]) -> str:
    """The results as a plain-text table: a row per method and budget."""
    history = document["history_tokens"]
    per = history["per_conversation"].values()
    lines = [(f"full history: {history['mean']:,.0f} tokens per conversation on average "
              f"(min {min(per, default=0):,}, max {max(per, default=0):,})")]
    for name, result in document["methods"].items():
        if "recall@10" in result:
            best = "  (best baseline)" if name == f"{document['best_baseline']} packed" else ""
            note = f"ranking recall@10 {result['recall@10']:.3f}{best}"
        else:
            note = f"ingest {result['ingest_turns_per_s']} turns/s, {result['question_ms_mean']} ms per question"
        lines.append(f"\n{name}  ({note})")
        lines.append(f"{'budget':>8}{'n':>6}{'recall':>8}{'tokens':>8}{'share':>7}"
                     f"{'n no-ans':>10}{'tokens':>8}{'share':>7}")
        for row in result["budgets"]:
            na_tokens, na_share = row["no_answer_tokens_mean"], row["no_answer_budget_share"]
            lines.append(
                f"{row['budget_tokens']:>8}{row['questions']:>6}{row['recall']:>8.3f}{row['tokens_mean']:>8.0f}"
                f"{row['budget_share']:>7.2f}{row['no_answer_questions']:>10}"
                + (f"{na_tokens:>8.0f}{na_share:>7.2f}" if na_tokens is not None else f"{'–':>8}{'–':>7}")
                + ("  items: " + ", ".join(f"{k} {v}" for k, v in row["items_per_question"].items())
                   if row.get("items_per_question") else "")
            )
    return "\n".join(lines)
