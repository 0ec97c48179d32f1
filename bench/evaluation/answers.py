"""``strata eval answers``: the LoCoMo answer protocol, end to end.

Each conversation goes into a fresh tenant through the write path, as in ``strata eval
context``. For each question, then:

1. Strata's context for it (the context path behind ``/v1/context``, at one budget, in a
   session that holds no turns);
2. an LLM answers from that context (:data:`~strata_bench.evaluation.chat.ANSWER_PROMPT`);
3. an LLM judge labels the answer CORRECT or WRONG against the gold answer
   (:data:`~strata_bench.evaluation.chat.JUDGE_PROMPT`, LoCoMo's "LLM-as-a-judge" protocol).

Every question asked ends in exactly one of: correct, wrong, or failed at a stage (context,
answer, judge) with its reason: a transport error, a timeout, an HTTP error, an empty reply,
or a judge reply that names neither label. Failures are counted and named, never dropped:
``accuracy`` is correct / questions asked (a failure is not a right answer), and
``judged_accuracy`` is correct / (correct + wrong), the figure over the questions the judge
labelled. Questions without a gold answer (LoCoMo's adversarial ones) are left out, as peers
leave category 5 out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from strata_bench.evaluation.chat import (
    JUDGE_SCHEMA,
    ChatEndpoint,
    Endpoint,
    Reply,
    answer_prompt,
    judge_prompt,
    parse_label,
)
from strata_bench.evaluation.context import ASK_SESSION, ContextClient
from strata_bench.evaluation.datasets import Benchmark, EvalConversation, EvalQuestion, reference_time
from strata_bench.evaluation.ingest import ingest_conversation, progress
from strata_bench.stats import latency_ms

__all__ = [
    "AnswerRecord",
    "AnswerTally",
    "add_arguments",
    "evaluate_answers",
    "format_answers_table",
    "report_answers",
    "run_answers",
    "select_questions",
]

#: The stages a question can fail at, in order.
STAGES = ("context", "answer", "judge")


def select_questions(benchmark: Benchmark, *, categories: Collection[str] | None = None,
                     limit: int | None = None) -> tuple[Benchmark, int]:
    """The questions to ask: those of ``categories`` (None: every one) with a gold answer, the
    first ``limit`` of them in order. A conversation left with none is dropped, so it is never
    ingested. Returns the benchmark and how many questions were left out for having no gold."""
    kept: list[EvalConversation] = []
    without_gold, left = 0, limit
    for conversation in benchmark.conversations:
        wanted = [q for q in conversation.questions if categories is None or q.category in categories]
        answerable = [q for q in wanted if q.answer is not None]
        without_gold += len(wanted) - len(answerable)
        if left is not None:
            answerable, left = answerable[:left], max(0, left - len(answerable))
        if answerable:
            kept.append(replace(conversation, questions=tuple(answerable)))
    return replace(benchmark, conversations=tuple(kept)), without_gold


@dataclass
class AnswerRecord:
    """One question's way through the protocol."""

    conversation: str
    id: str
    category: str
    question: str
    gold: str
    context_tokens: int | None = None
    answer: str | None = None
    #: The judge's reply as written (kept when it could not be read, to see why).
    judge_reply: str | None = None
    #: True CORRECT, False WRONG, None: not judged (see ``failure``).
    correct: bool | None = None
    #: ``"<stage>: <reason>"`` when the question failed at a stage.
    failure: str | None = None
    context_ms: float | None = None
    answer_ms: float | None = None
    judge_ms: float | None = None
    answer_tokens_in: int | None = None
    answer_tokens_out: int | None = None
    judge_tokens_in: int | None = None
    judge_tokens_out: int | None = None


class AnswerTally:
    """Correct, wrong and failed (by stage) over a set of :class:`AnswerRecord`."""

    def __init__(self, records: Iterable[AnswerRecord] = ()) -> None:
        self.questions = 0
        self.correct = 0
        self.wrong = 0
        self.failed: Counter[str] = Counter()
        for record in records:
            self.add(record)

    def add(self, record: AnswerRecord) -> None:
        self.questions += 1
        if record.failure is not None:
            self.failed[record.failure.split(":", 1)[0]] += 1
        elif record.correct:
            self.correct += 1
        else:
            self.wrong += 1

    def report(self) -> dict[str, Any]:
        judged = self.correct + self.wrong
        return {
            "questions": self.questions,
            "correct": self.correct,
            "wrong": self.wrong,
            **{f"{stage}_failed": self.failed[stage] for stage in STAGES},
            "accuracy": round(self.correct / self.questions, 4) if self.questions else None,
            "judged_accuracy": round(self.correct / judged, 4) if judged else None,
        }


# ----------------------------------------------------------------- the run


@dataclass(frozen=True)
class _Models:
    answerer: ChatEndpoint
    answer_model: str
    judge: ChatEndpoint
    judge_model: str


def _usage(record: AnswerRecord, stage: str, reply: Reply) -> None:
    setattr(record, f"{stage}_ms", round(reply.latency_ms, 1))
    setattr(record, f"{stage}_tokens_in", reply.tokens_in)
    setattr(record, f"{stage}_tokens_out", reply.tokens_out)


async def _ask(client: ContextClient, conversation: EvalConversation, question: EvalQuestion, models: _Models,
               *, budget_tokens: int, top_k: int | None) -> AnswerRecord:
    record = AnswerRecord(conversation=conversation.id, id=question.id, category=question.category,
                          question=question.question, gold=str(question.answer))
    asked_on = reference_time(conversation, question)
    started = time.perf_counter()
    try:
        result = await client.build_context(question.question, ASK_SESSION, max_tokens=budget_tokens, top_k=top_k,
                                            reference_time=asked_on)
    except Exception as exc:  # one question the stack refused: counted, and the run goes on
        record.failure = f"context: {type(exc).__name__}"
        return record
    record.context_ms = round((time.perf_counter() - started) * 1000, 1)
    record.context_tokens = result.token_count
    reply = await models.answerer.complete(answer_prompt(question.question, result.context, asked_on),
                                           model=models.answer_model)
    _usage(record, "answer", reply)
    if reply.text is None:
        record.failure = f"answer: {reply.error}"
        return record
    record.answer = reply.text
    verdict = await models.judge.complete(judge_prompt(question.question, record.gold, reply.text),
                                          model=models.judge_model, schema=JUDGE_SCHEMA)
    _usage(record, "judge", verdict)
    record.judge_reply = verdict.text
    if verdict.text is None:
        record.failure = f"judge: {verdict.error}"
        return record
    record.correct = parse_label(verdict.text)
    if record.correct is None:
        record.failure = "judge: unparseable reply"
    return record


async def run_answers(
    benchmark: Benchmark,
    make_client: Callable[[str], ContextClient],
    answerer: ChatEndpoint,
    judge: ChatEndpoint,
    *,
    budget_tokens: int = 1024,
    top_k: int | None = None,
    concurrency: int = 1,
) -> tuple[list[AnswerRecord], str, str]:
    """Ingest each conversation into a fresh tenant, take every question through the protocol,
    forget the conversation. Returns the records, in question order, and the two model names.

    ``concurrency``: questions in flight at once (1 suits a local server that generates one
    reply at a time: more would only queue behind it and count as timeouts).

    Raises:
        ValueError: If a model is not named and its endpoint cannot say which it serves.
    """
    models = _Models(answerer, await answerer.resolve_model(), judge, await judge.resolve_model())
    in_flight = asyncio.Semaphore(max(1, concurrency))
    records: list[AnswerRecord] = []
    for conversation in benchmark.conversations:
        client = make_client(f"eval-{uuid.uuid4().hex[:10]}")
        ingested = await ingest_conversation(client, conversation)
        await client.wait_for_passages()  # long turns are searched by every passage's vector too
        bar = progress(len(conversation.questions), f"answers {conversation.id}")

        async def one(question: EvalQuestion, client: ContextClient = client, bar: Any = bar,
                      conversation: EvalConversation = conversation) -> AnswerRecord:
            async with in_flight:
                record = await _ask(client, conversation, question, models, budget_tokens=budget_tokens, top_k=top_k)
            bar.update()
            return record

        records.extend(await asyncio.gather(*(one(q) for q in conversation.questions)))
        bar.close()
        for session_id in ingested.sessions:
            with contextlib.suppress(Exception):  # a session that had no turns has nothing to forget
                await client.forget_session(session_id)
    return records, models.answer_model, models.judge_model


def _latency(values: Sequence[float | None]) -> dict[str, float | None]:
    ms = [v for v in values if v is not None]
    return {"calls": len(ms), "mean_ms": round(statistics.fmean(ms), 1) if ms else None,
            **latency_ms(ms, quantiles=(0.5, 0.95), digits=1)}


def _replied(record: AnswerRecord, stage: str) -> bool:
    return (record.answer if stage == "answer" else record.judge_reply) is not None


def _tokens(records: Sequence[AnswerRecord], stage: str) -> dict[str, Any]:
    """Tokens as the endpoint reported them, over every call that got a response (an empty reply
    costs tokens too); calls with a reply but no ``usage`` are counted apart."""
    out: dict[str, Any] = {}
    for side in ("in", "out"):
        counts = [v for r in records if (v := getattr(r, f"{stage}_tokens_{side}")) is not None]
        out[side] = sum(counts)
        out[f"{side}_mean"] = round(statistics.fmean(counts), 1) if counts else None
    out["calls_without_usage"] = sum(1 for r in records if _replied(r, stage)
                                     and getattr(r, f"{stage}_tokens_in") is None)
    return out


def report_answers(records: Sequence[AnswerRecord]) -> dict[str, Any]:
    """The figures of a run: overall and per category, failures by reason, latency and tokens."""
    categories = sorted({r.category for r in records})
    contexts = [r.context_tokens for r in records if r.context_tokens is not None]
    return {
        "overall": AnswerTally(records).report(),
        "categories": {c: AnswerTally(r for r in records if r.category == c).report() for c in categories},
        "failures": dict(Counter(r.failure for r in records if r.failure is not None).most_common()),
        # Latency of the calls that returned a reply (a timeout's latency is the timeout).
        "latency": {
            "context": _latency([r.context_ms for r in records]),
            **{stage: _latency([getattr(r, f"{stage}_ms") for r in records if _replied(r, stage)])
               for stage in ("answer", "judge")},
        },
        "tokens": {"answer": _tokens(records, "answer"), "judge": _tokens(records, "judge")},
        "context_tokens_mean": round(statistics.fmean(contexts), 1) if contexts else None,
    }


def evaluate_answers(
    benchmark: Benchmark,
    *,
    make_client: Callable[[str], ContextClient],
    answer: Endpoint,
    judge: Endpoint,
    budget_tokens: int = 1024,
    top_k: int | None = None,
    concurrency: int = 1,
) -> dict[str, Any]:
    """Run the protocol over ``benchmark``; returns the ``--json`` document (with every record).

    Raises:
        ValueError: If a model is not named and its endpoint cannot say which it serves.
    """

    async def run() -> tuple[list[AnswerRecord], str, str]:
        answerer, judging = ChatEndpoint(answer), ChatEndpoint(judge)
        try:
            return await run_answers(benchmark, make_client, answerer, judging, budget_tokens=budget_tokens,
                                     top_k=top_k, concurrency=concurrency)
        finally:
            await answerer.aclose()
            await judging.aclose()

    records, answer_model, judge_model = asyncio.run(run())
    return {
        "dataset": benchmark.name,
        "conversations": len(benchmark.conversations),
        "questions": len(records),
        "budget_tokens": budget_tokens,
        "top_k": top_k,
        "concurrency": concurrency,
        "answer": {**answer.describe(), "model": answer_model},
        "judge": {**judge.describe(), "model": judge_model},
        **report_answers(records),
        "records": [asdict(r) for r in records],
    }


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} ms"


def format_answers_table(document: dict[str, Any]) -> str:
    """The results as plain text: accuracy per category and overall, failures, latency, tokens."""
    answer, judge = document["answer"], document["judge"]
    lines = [f"answers: {answer['model']} at {answer['base_url']} (max_tokens {answer['max_tokens']}); "
             f"judge: {judge['model']} at {judge['base_url']} (max_tokens {judge['max_tokens']}); "
             f"context budget {document['budget_tokens']} tokens",
             f"{'category':<14}{'n':>6}{'correct':>9}{'wrong':>7}{'failed':>8}{'accuracy':>10}{'judged':>8}"]

    def row(name: str, t: dict[str, Any]) -> str:
        failed = sum(t[f"{s}_failed"] for s in STAGES)
        acc, judged = t["accuracy"], t["judged_accuracy"]
        return (f"{name:<14}{t['questions']:>6}{t['correct']:>9}{t['wrong']:>7}{failed:>8}"
                f"{'–' if acc is None else f'{acc:.3f}':>10}{'–' if judged is None else f'{judged:.3f}':>8}")

    lines += [row(c, t) for c, t in document["categories"].items()]
    lines.append(row("overall", document["overall"]))
    overall = document["overall"]
    lines.append("failed: " + ", ".join(f"{overall[f'{s}_failed']} at {s}" for s in STAGES)
                 + "".join(f"\n  {n} × {reason}" for reason, n in document["failures"].items()))
    for stage in ("answer", "judge"):
        lat, tok = document["latency"][stage], document["tokens"][stage]
        lines.append(f"{stage}: {lat['calls']} replies, p50 {_ms(lat['p50_ms'])}, p95 {_ms(lat['p95_ms'])}; "
                     f"tokens in {tok['in']:,} / out {tok['out']:,} (per call {tok['in_mean']} / {tok['out_mean']})"
                     + (f", {tok['calls_without_usage']} calls without usage" if tok["calls_without_usage"] else ""))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``strata eval answers``'s options (the key is read at the edge: ``--api-key`` or
    ``STRATA_EVAL_LLM_KEY``)."""
    parser.add_argument("--dataset", required=True, help="LoCoMo JSON or Strata's neutral format")
    parser.add_argument("--format", choices=["locomo", "strata"], help="default: detected")
    parser.add_argument("--llm", required=True, metavar="URL",
                        help="the answering model's OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", help="its model (default: the first the endpoint's /models lists)")
    parser.add_argument("--judge-llm", metavar="URL", help="the judge's base URL (default: --llm)")
    parser.add_argument("--judge-model", help="the judge's model (default: --model when the judge is the same "
                        "endpoint, else the first its /models lists)")
    parser.add_argument("--api-key", help="sent to both endpoints (default: $STRATA_EVAL_LLM_KEY; none needed "
                        "by local servers)")
    parser.add_argument("--max-tokens", type=int, default=64, help="the answer's max_tokens (default 64)")
    parser.add_argument("--judge-max-tokens", type=int, default=16, help="the judgement's max_tokens (default 16)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="per LLM call, connection to last byte; no retries (default 60)")
    parser.add_argument("--concurrency", type=int, default=1, help="questions in flight at once (default 1)")
    parser.add_argument("--limit", type=int, help="only the first N questions (only their conversations are "
                        "ingested)")
    parser.add_argument("--categories", help="comma-separated; default all but adversarial (no gold answer)")
    parser.add_argument("--budget", type=int, default=1024, help="the context's token budget (default 1024)")
    parser.add_argument("--top-k", type=int, help="items per layer (default: the task type's configured depth)")
    parser.add_argument("--json", help="write the results, every question's answer and label among them, here")
    parser.add_argument("--data-dir", help="the stack's data dir (default ./.strata)")
