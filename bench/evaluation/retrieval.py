"""``strata eval retrieval``: Strata against plain baselines on a conversation benchmark.

Each conversation goes into a fresh tenant through Strata's own write path
(the in-cluster client runs the same orchestration as the HTTP API), each
question through its own retrieval path (the code behind ``/v1/search``),
with the question's date, or the last session's, as the reference time.
The baselines index the same turns directly, without Strata, so every
comparison is measured side by side in one run. Tenants are removed after.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strata.providers.llm import LLMUsage
from strata_bench.evaluation.baselines import (
    BM25Retriever,
    DenseRetriever,
    MemoEmbedder,
    Retriever,
    RRFRetriever,
    turn_document,
)
from strata_bench.evaluation.datasets import Benchmark, EvalConversation, reference_time
from strata_bench.evaluation.ingest import ingest_conversation, progress
from strata_bench.evaluation.metrics import Scoreboard
from strata_bench.stats import latency_ms

__all__ = ["BASELINES", "RetrieverRun", "evaluate", "format_table", "run_baseline", "run_strata"]

BASELINES = ("bm25", "dense", "rrf")


@dataclass
class RetrieverRun:
    name: str
    board: Scoreboard = field(default_factory=Scoreboard)
    ingest_s: float = 0.0
    turns: int = 0
    query_ms: list[float] = field(default_factory=list)
    #: Turns the write path refused (benchmark turn id -> reason): left out of the memory.
    refused: dict[str, str] = field(default_factory=dict)
    #: LLM calls and tokens the run caused (None: no LLM configured).
    llm: dict[str, int] | None = None

    def report(self, ks: Sequence[int]) -> dict[str, Any]:
        out = {
            **self.board.report(ks),
            "ingest_turns_per_s": round(self.turns / self.ingest_s, 1) if self.ingest_s else None,
            **latency_ms(self.query_ms, quantiles=(0.5, 0.95), prefix="query_"),
            "refused_turns": len(self.refused),
        }
        if self.llm is not None:
            tokens = self.llm.get("prompt_tokens", 0) + self.llm.get("completion_tokens", 0)
            out["llm"] = {
                **self.llm,
                "calls_per_turn": round(self.llm.get("calls", 0) / self.turns, 4) if self.turns else None,
                "tokens_per_turn": round(tokens / self.turns, 1) if self.turns else None,
            }
        return out


def _wanted(conversation: EvalConversation, categories: set[str] | None) -> list[Any]:
    return [q for q in conversation.questions if categories is None or q.category in categories]


def run_baseline(
    name: str, benchmark: Benchmark, ks: Sequence[int], categories: set[str] | None, make: Callable[[], Retriever]
) -> RetrieverRun:
    run = RetrieverRun(name)
    depth = max(ks)
    for conversation in benchmark.conversations:
        turns = [t for s in conversation.sessions for t in s.turns]
        retriever = make()
        started = time.perf_counter()
        retriever.index([t.id for t in turns], [turn_document(t) for t in turns])
        run.ingest_s += time.perf_counter() - started
        run.turns += len(turns)
        questions = _wanted(conversation, categories)
        bar = progress(len(questions), f"{name} {conversation.id}")
        for q in questions:
            started = time.perf_counter()
            found = retriever.search(q.question, depth)
            run.query_ms.append((time.perf_counter() - started) * 1000)
            run.board.add(q.category, q.evidence, found)
            bar.update()
        bar.close()
    return run


async def run_strata(
    benchmark: Benchmark,
    ks: Sequence[int],
    categories: set[str] | None,
    make_client: Callable[[str], Any],
    *,
    count_llm: bool = False,
) -> RetrieverRun:
    """Ingest through the write path, ask through the search path, then forget.

    ``count_llm``: also count the LLM calls and tokens the run causes (the
    layer actors' counters before and after; background summaries are
    waited for, so their calls count)."""
    run = RetrieverRun("strata")
    depth = max(ks)
    before: LLMUsage | None = None
    for conversation in benchmark.conversations:
        client = make_client(f"eval-{uuid.uuid4().hex[:10]}")
        if count_llm and before is None:
            before = await client.llm_usage()
        started = time.perf_counter()
        ingested = await ingest_conversation(client, conversation)
        await client.wait_for_passages()  # long turns are searched by every passage's vector too
        sessions, unsafe = ingested.sessions, ingested.original
        run.refused.update(ingested.refused)
        run.ingest_s += time.perf_counter() - started
        run.turns += len(conversation.turns)
        if count_llm:
            await client.wait_for_summaries()
        questions = _wanted(conversation, categories)
        bar = progress(len(questions), f"ask {conversation.id}")
        for q in questions:
            started = time.perf_counter()
            result = await client.search(
                q.question, layers=["episodic"], top_k=min(depth * 2, 100),
                reference_time=reference_time(conversation, q),
            )
            run.query_ms.append((time.perf_counter() - started) * 1000)
            found = [unsafe.get(h.id, h.id) for h in result.hits if h.kind == "turn"][:depth]
            run.board.add(q.category, q.evidence, found)
            bar.update()
        bar.close()
        for session_id in sessions:
            with contextlib.suppress(Exception):  # a session that had no turns has nothing to forget
                await client.forget_session(session_id)
        if count_llm and before is not None:
            after = await client.llm_usage()
            run.llm = {key: value - getattr(before, key) for key, value in dataclasses.asdict(after).items()}
    return run


def evaluate(
    benchmark: Benchmark,
    *,
    retrievers: Sequence[str],
    ks: Sequence[int],
    categories: set[str] | None,
    embedder: Any,
    make_client: Callable[[str], Any] | None,
    count_llm: bool = False,
) -> dict[str, Any]:
    """Run each named retriever; returns the ``--json`` document. ``count_llm``: report
    Strata's LLM calls and tokens per turn (when an LLM is configured)."""
    embedder = MemoEmbedder(embedder)
    factories: dict[str, Callable[[], Retriever]] = {
        "bm25": BM25Retriever,
        "dense": lambda: DenseRetriever(embedder),
        "rrf": lambda: RRFRetriever([BM25Retriever(), DenseRetriever(embedder)]),
    }
    results: dict[str, Any] = {}
    for name in retrievers:
        if name == "strata":
            if make_client is None:
                raise ValueError("the strata retriever needs a running stack")
            run = asyncio.run(run_strata(benchmark, ks, categories, make_client, count_llm=count_llm))
        else:
            run = run_baseline(name, benchmark, ks, categories, factories[name])
        results[name] = run.report(ks)
    return {"dataset": benchmark.name, "skipped_questions": benchmark.skipped_questions, "retrievers": results}


def format_table(document: dict[str, Any], ks: Sequence[int]) -> str:
    """The results as a plain-text table: one block per retriever, a row per category."""
    lines = []
    header = f"{'category':<14}{'n':>6}" + "".join(f"{'R@' + str(k):>8}" for k in ks) + "".join(
        f"{'any@' + str(k):>8}" for k in ks
    )
    for name, result in document["retrievers"].items():
        lines.append(
            f"\n{name}  (ingest {result['ingest_turns_per_s']} turns/s, "
            f"query p50 {result['query_p50_ms']} ms, p95 {result['query_p95_ms']} ms)"
        )
        if result.get("llm"):
            llm = result["llm"]
            lines.append(
                f"LLM: {llm.get('calls', 0)} calls, "
                f"{llm.get('prompt_tokens', 0) + llm.get('completion_tokens', 0)} tokens; "
                f"{llm['calls_per_turn']} calls and {llm['tokens_per_turn']} tokens per turn"
            )
        lines.append(header)
        rows = [*result["categories"].items(), ("overall", result["overall"])]
        for category, row in rows:
            cells = "".join(f"{row[f'recall@{k}']:>8.3f}" for k in ks) + "".join(f"{row[f'any@{k}']:>8.3f}" for k in ks)
            lines.append(f"{category:<14}{row['questions']:>6}{cells}")
    return "\n".join(lines)
