"""``strata eval context``: its metrics on hand-made data, and its run over a tiny benchmark.

The run needs a client that answers the context path. The command's client drives a running
stack; here the client is the episodic layer and the context assembler in-process (the same
code the stack's actors and orchestration run, over the in-memory record store), so the
evaluation loop is exercised without Ray or Milvus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from strata.config import EpisodicSettings
from strata.context.assemble import assemble_context
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.providers.tokens import TiktokenCounter
from strata.schema import ContextItem, ContextResult, ContextSection
from strata.store.records import InMemoryRecordStore
from strata_bench.evaluation.baselines import BM25Retriever
from strata_bench.evaluation.context import (
    BudgetTally,
    context_turn_ids,
    evaluate_context,
    evidence_recall,
    format_context_table,
    history_text,
    limit_benchmark,
    pack_turns,
    run_packed_baseline,
    run_strata_context,
)
from strata_bench.evaluation.datasets import Benchmark, EvalConversation, EvalQuestion, EvalSession, EvalTurn

COUNTER = TiktokenCounter()
DAY = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


def _benchmark() -> Benchmark:
    lines = [
        ("Ann", "I adopted a grey cat called Pixel last spring."),
        ("Bob", "Nice! My sister keeps bees on her farm in Wales."),
        ("Ann", "I started learning the cello in January."),
        ("Bob", "I ran the Berlin marathon in three hours and ten minutes."),
        ("Ann", "My favourite dish is mushroom risotto with lemon."),
        ("Bob", "We painted the kitchen a pale yellow last weekend."),
    ]
    # Ids with a space: the write path keeps only id-safe characters, and the run maps them back.
    turns = tuple(EvalTurn(id=f"D1 {n}", speaker=s, text=t) for n, (s, t) in enumerate(lines, start=1))
    questions = (
        EvalQuestion(id="q1", question="What is the name of Ann's cat?", answer="Pixel",
                     evidence=("D1 1",), category="single-hop"),
        EvalQuestion(id="q2", question="Which marathon did Bob run, and in what time?", answer="Berlin",
                     evidence=("D1 4",), category="single-hop"),
        EvalQuestion(id="q3", question="What instrument does Ann play, and what does she cook?", answer="cello",
                     evidence=("D1 3", "D1 5"), category="multi-hop"),
        EvalQuestion(id="q4", question="What colour is Bob's motorbike?", answer=None,
                     evidence=("D1 6",), category="adversarial"),
    )
    conversation = EvalConversation(id="c1", sessions=(EvalSession(id="s 1", date=DAY, turns=turns),),
                                    questions=questions)
    return Benchmark(name="tiny", conversations=(conversation,))


# ----------------------------------------------------------------- metrics


def test_evidence_recall_counts_found_turns_once() -> None:
    assert evidence_recall(["a", "b"], ["b", "x", "b", "a"]) == 1.0
    assert evidence_recall(["a", "b"], ["b", "x"]) == 0.5
    assert evidence_recall(["a"], []) == 0.0
    with pytest.raises(ValueError, match="empty"):
        evidence_recall([], ["a"])


def test_packing_is_greedy_by_rank_and_never_over_budget() -> None:
    ranked = [(f"t{i}", f"Speaker {i}: " + "word " * (3 + 7 * (i % 4))) for i in range(40)]
    for budget in range(0, 400, 7):
        ids, tokens = pack_turns(ranked, budget, COUNTER)
        assert tokens <= budget
        assert ids == [i for i, _ in ranked[: len(ids)]]  # a prefix of the ranking: nothing skipped
        assert tokens == COUNTER.count("\n".join(line for i, line in ranked if i in ids))
        if len(ids) < len(ranked):  # it stopped because the next turn did not fit
            longer = "\n".join(line for _, line in ranked[: len(ids) + 1])
            assert COUNTER.count(longer) > budget


def test_packing_stops_at_the_first_turn_that_does_not_fit() -> None:
    short, long = "Ann: yes", "Bob: " + "a long sentence about nothing in particular " * 20
    ids, _ = pack_turns([("1", short), ("2", long), ("3", short)], 50, COUNTER)
    assert ids == ["1"]  # "3" would fit, but packing is by rank until the next does not


def test_no_answer_questions_are_accounted_apart() -> None:
    tally = BudgetTally(100)
    tally.add("single-hop", ["a", "b"], ["a"], 80)
    tally.add("temporal", ["c"], ["c"], 40)
    tally.add("adversarial", None, ["a"], 10)
    tally.add("adversarial", None, [], 30)
    report = tally.report()
    assert report["questions"] == 2
    assert report["recall"] == pytest.approx(0.75)
    assert report["tokens_mean"] == pytest.approx(60)
    assert report["budget_share"] == pytest.approx(0.6)
    assert report["categories"] == {"single-hop": {"questions": 1, "recall": 0.5},
                                    "temporal": {"questions": 1, "recall": 1.0}}
    assert report["no_answer_questions"] == 2
    assert report["no_answer_tokens_mean"] == pytest.approx(20)
    assert report["no_answer_budget_share"] == pytest.approx(0.2)


def test_context_turn_ids_reads_episodic_turns_only() -> None:
    def item(layer: str, kind: str, item_id: str, turn_ids: Sequence[str] = ()) -> ContextItem:
        return ContextItem(layer=layer, kind=kind, id=item_id, text="x", score=1.0, turn_ids=list(turn_ids))

    result = ContextResult(
        context="x", messages=[], token_count=5, max_tokens=100, task_type="general", versions={},
        sections=[
            ContextSection(layer="episodic", tokens=3, items=[
                item("episodic", "turn", "D1_2"), item("episodic", "summary", "s1", ["D1_3"]),
                item("episodic", "turn", "D1_9")]),
            ContextSection(layer="working", tokens=2, items=[item("working", "user", "D1_4")]),
        ],
    )
    assert context_turn_ids(result, {"D1_2": "D1 2"}) == ["D1 2", "D1_9"]


def test_limit_benchmark_keeps_the_first_conversations_and_questions() -> None:
    (conversation,) = _benchmark().conversations
    two = Benchmark(name="two", conversations=(conversation, replace(conversation, id="c2")))
    assert [c.id for c in limit_benchmark(two, conversations=1).conversations] == ["c1"]
    assert [q.id for q in limit_benchmark(two, questions=2).conversations[1].questions] == ["q1", "q2"]


def test_packed_baseline_finds_evidence_when_it_fits() -> None:
    benchmark = _benchmark()
    report = run_packed_baseline("bm25", benchmark, [5, 2048], {"adversarial"}, BM25Retriever, COUNTER)
    tiny, large = report["budgets"]
    assert tiny["recall"] == 0.0 and tiny["tokens_mean"] == 0  # no turn fits in 5 tokens
    assert large["questions"] == 3 and large["no_answer_questions"] == 1
    assert large["recall"] > 0.5
    assert large["tokens_mean"] <= COUNTER.count(history_text(benchmark.conversations[0]))


# ----------------------------------------------------------------- the run, in-process


class LayerClient:
    """The context path without the stack: the episodic layer and the assembler in-process."""

    embedder: OnnxMiniLMEmbedder | None = None

    def __init__(self, tenant: str) -> None:
        if LayerClient.embedder is None:
            LayerClient.embedder = OnnxMiniLMEmbedder(threads=1)
        self.store = InMemoryRecordStore()
        self.store.ensure_collection("e", dim=LayerClient.embedder.dim)
        self.memory = EpisodicMemory(tenant, store=self.store, collection="e", settings=EpisodicSettings())
        self.forgotten: list[str] = []

    async def record_turns(self, session_id: str, turns: Sequence[dict[str, Any]]) -> Any:
        assert self.embedder is not None
        prepared = self.memory.prepare(session_id, [TurnInput(**t) for t in turns], now=DAY)
        self.memory.record(prepared, self.embedder.embed([t.text for t in prepared]))

    async def build_context(self, message: str, session_id: str, *, max_tokens: int | None = None,
                            reference_time: Any = None, top_k: int | None = None) -> ContextResult:
        assert self.embedder is not None and max_tokens is not None
        vector = self.embedder.embed_query([self.memory.dense_query(message)])[0]
        hits = self.memory.search(vector, query_text=message, top_k=top_k or 8)
        items = [ContextItem(layer="episodic", kind=h.kind, id=h.id, text=h.text, score=h.score,
                             timestamp=h.timestamp, session_id=h.session_id, turn_ids=list(h.turn_ids))
                 for h in hits]
        assembled = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=max_tokens,
                                     counter=COUNTER, min_relative_score=0.4)
        return ContextResult(context=assembled.text, messages=assembled.messages, sections=assembled.sections,
                             token_count=assembled.tokens, max_tokens=max_tokens, task_type="general", versions={})

    async def forget_session(self, session_id: str) -> Any:
        self.forgotten.append(session_id)

    async def wait_for_passages(self) -> int:
        return len(self.memory.unembedded())


def test_the_run_asks_every_budget_and_maps_turn_ids_back() -> None:
    clients: list[LayerClient] = []

    def make(tenant: str) -> LayerClient:
        clients.append(LayerClient(tenant))
        return clients[-1]

    report = asyncio.run(run_strata_context(_benchmark(), [24, 1024], {"adversarial"}, make))
    small, large = report["budgets"]
    assert [c.forgotten for c in clients] == [["s_1"]]
    for row in (small, large):
        assert row["questions"] == 3 and row["no_answer_questions"] == 1
        assert row["tokens_mean"] <= row["budget_tokens"]
    assert small["recall"] < large["recall"]
    assert large["recall"] >= 2 / 3  # the cat and the marathon are found by name; ids map back ("D1 1")
    # What held the places: per question asked (4), the items of each layer and kind.
    assert set(large["items_per_question"]) == {"episodic/turn"}
    assert small["items_per_question"].get("episodic/turn", 0) < large["items_per_question"]["episodic/turn"]


def test_evaluate_context_reports_every_method_and_the_history() -> None:
    benchmark = _benchmark()
    document = evaluate_context(benchmark, budgets=[64, 512], baselines=["bm25"], counter=COUNTER,
                                make_client=LayerClient)
    assert set(document["methods"]) == {"strata", "bm25 packed"}
    assert document["best_baseline"] == "bm25"
    history = COUNTER.count(history_text(benchmark.conversations[0]))
    assert document["history_tokens"]["per_conversation"] == {"c1": history}
    table = format_context_table(document)
    assert "strata" in table and "bm25 packed" in table and "(best baseline)" in table
    assert "items: episodic/turn" in table
    with pytest.raises(ValueError, match="embedder"):
        evaluate_context(benchmark, baselines=["rrf"], counter=COUNTER, make_client=None)
