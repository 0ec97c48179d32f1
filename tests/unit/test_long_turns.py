"""Long turns: kept whole, searched by passages, quoted by the passage that matched.

Embeds with the real packaged MiniLM model; stores in the in-memory record store (the
same over HTTP, on milvus-lite, is tests/e2e/test_long_turns.py).
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

import numpy as np
import pytest

from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.passages import PASSAGE, cut, joined
from strata.episodic.summarize import LLMSummarizer, SummaryInput
from strata.episodic.turns import TurnInput, vector_texts
from strata.errors import InvalidInput
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.store.records import InMemoryRecordStore

pytestmark = pytest.mark.unit

COLL = "episodic"
NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SETTINGS = EpisodicSettings()
NEEDLE = (
    "The staging dashboard API now answers in 250 milliseconds after we moved the session cache "
    "from Redis to the in-process LRU."
)
QUESTION = "How fast does the staging dashboard API answer now, after the session cache move?"


def filler(chars: int, seed: int) -> str:
    """Log-like and prose-like text about other things, ``chars`` characters long."""
    rng = random.Random(seed)
    words = ("build", "worker", "queue", "deploy", "retry", "token", "parser", "schema", "index", "branch",
             "commit", "review", "lint", "module", "upload", "render", "config", "vendor", "socket", "fixture")
    lines = []
    total = 0
    while total < chars:
        line = f"2026-02-{rng.randint(1, 28):02d} INFO " + " ".join(rng.choice(words) for _ in range(12)) + "."
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:chars]


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


def fresh(store: InMemoryRecordStore | None = None) -> tuple[InMemoryRecordStore, EpisodicMemory]:
    store = store or InMemoryRecordStore()
    store.ensure_collection(COLL, dim=384)
    return store, EpisodicMemory("t1", store=store, collection=COLL, settings=SETTINGS)


def record(memory: EpisodicMemory, embedder: OnnxMiniLMEmbedder, session: str, inputs: list[TurnInput]) -> None:
    turns = memory.prepare(session, inputs, now=NOW)
    vectors = embedder.embed([t.text for t in turns])
    texts = [text for t in turns for text in memory.passage_texts(t.user, t.agent)]
    passages = embedder.embed(texts) if texts else None
    memory.record(turns, vectors, passages)


def search(memory: EpisodicMemory, embedder: OnnxMiniLMEmbedder, question: str) -> list:  # type: ignore[type-arg]
    query = embedder.embed_query([memory.dense_query(question)])[0]
    return memory.search(query, query_text=question, top_k=5, include_summaries=False)


def test_cut_covers_the_text_in_order_and_breaks_at_words() -> None:
    text = filler(12_345, seed=1)
    spans = cut(text, 1000)
    assert "".join(text[s:e] for s, e in spans) == text
    assert all(e - s <= 1000 for s, e in spans) and len(spans) >= 13
    assert all(text[e - 1] in " \n." for _, e in spans[:-1])  # a break, not the middle of a word


def test_cut_makes_shorter_passages_of_cjk_text() -> None:
    text = "我们上周在杭州参加了一个关于数据库迁移的技术分享会。" * 200
    spans = cut(text, 1000)
    assert "".join(text[s:e] for s, e in spans) == text
    assert max(e - s for s, e in spans) <= 260  # the embedder reads ~256 pieces: one per ideograph


def test_cut_of_text_without_breaks_is_linear() -> None:
    """One 1,000,000-character word: no break anywhere, every cut falls at its window's end."""
    text = "a" * 1_000_000
    started = time.perf_counter()
    spans = cut(text, 1000)
    took = time.perf_counter() - started
    assert len(spans) == 1000 and "".join(text[s:e] for s, e in spans) == text
    assert took < 5  # a quadratic cut would take minutes; measured ~0.1 s here


def test_a_long_turn_is_stored_whole_and_found_by_its_middle(embedder: OnnxMiniLMEmbedder) -> None:
    store, memory = fresh()
    long = filler(12_000, seed=2) + "\n\n" + NEEDLE + "\n\n" + filler(12_000, seed=3)
    others = [TurnInput(user=f"Let's talk about topic {i}: the {w} pipeline.", turn_id=f"o{i}")
              for i, w in enumerate(("build", "deploy", "queue", "review", "render"))]
    record(memory, embedder, "s1", [*others, TurnInput(user="Here is the log of today:", agent=long, turn_id="big")])

    hits = search(memory, embedder, QUESTION)
    assert hits[0].id == "big"
    assert hits[0].span is not None and hits[0].span[0] == "agent"
    _, start, end = hits[0].span
    assert NEEDLE in long[start:end]  # the span that matched holds the fact
    assert NEEDLE in hits[0].text and len(hits[0].text) < 2_000  # the hit quotes it, not the opening
    assert hits[0].text.startswith("user: Here is the log of today:")

    # The turn row keeps the opening; the passages' rows keep the rest, and a reload joins them.
    rows = store.scan(COLL, tenant="t1")
    parts = [r for r in rows if r.kind == PASSAGE]
    assert joined((int(r.payload["n"]), r.text) for r in parts) == long
    assert all(len(r.text.encode()) < 60_000 for r in rows)
    _, again = fresh(store)
    again.load()
    assert again.session_turns("s1")[-1].agent == long
    assert search(again, embedder, QUESTION)[0].id == "big"

    # Reindexing embeds the turn and its embedded passages again.
    texts = dict((r.pk, t) for r, t in vector_texts(rows))
    assert sum(1 for r in parts if r.pk in texts) == len(parts)  # all under the 128 embedded

    # Forgetting the turn removes its passages' rows too.
    turn_keys, summary_keys = memory.turn_keys("s1", "big")
    memory.delete_keys(turn_keys, summary_keys)
    memory.drop_keys(turn_keys, summary_keys)
    assert not [r for r in store.scan(COLL, tenant="t1") if r.kind == PASSAGE]
    assert all(h.id != "big" for h in search(memory, embedder, QUESTION))


def test_passages_past_the_embedded_ones_are_found_by_their_words(embedder: OnnxMiniLMEmbedder) -> None:
    settings = EpisodicSettings(passage_vectors_max=2)
    store = InMemoryRecordStore()
    store.ensure_collection(COLL, dim=384)
    memory = EpisodicMemory("t1", store=store, collection=COLL, settings=settings)
    long = filler(20_000, seed=4) + "\n" + NEEDLE
    record(memory, embedder, "s1", [TurnInput(user="Other things entirely: gardening.", turn_id="a"),
                                    TurnInput(agent=long, turn_id="big")])
    assert len(memory.passage_texts(None, long)) == 2
    hits = search(memory, embedder, QUESTION)
    assert hits[0].id == "big" and hits[0].span is not None and NEEDLE in hits[0].text


def test_short_turns_have_no_passages(embedder: OnnxMiniLMEmbedder) -> None:
    store, memory = fresh()
    record(memory, embedder, "s1", [TurnInput(user="A short message.", agent="A short answer.")])
    assert memory.passage_texts("A short message.", "A short answer.") == []
    assert not [r for r in store.scan(COLL, tenant="t1") if r.kind == PASSAGE]
    hit = search(memory, embedder, "short message")[0]
    assert hit.span is None and hit.text == "user: A short message.\nassistant: A short answer."


def test_the_limit_is_a_million_characters_a_side() -> None:
    _, memory = fresh()
    memory.prepare("s1", [TurnInput(user="x " * 500_000)], now=NOW)  # 1,000,000: accepted
    with pytest.raises(InvalidInput, match="1000000 characters"):
        memory.prepare("s1", [TurnInput(user="x" * 1_000_001)], now=NOW)


def test_passages_written_without_vectors_are_found_by_words_then_embedded(embedder: OnnxMiniLMEmbedder) -> None:
    """The shard's path: the write gives no passage vectors; the background gives them later,
    and a reload of rows written before that still lists the turn as waiting."""
    store, memory = fresh()
    long = filler(6_000, seed=5) + "\n" + NEEDLE
    turns = memory.prepare("s1", [TurnInput(agent=long, turn_id="big")], now=NOW)
    memory.record(turns, embedder.embed([t.text for t in turns]))
    assert memory.unembedded() == ["s1/big"]
    assert search(memory, embedder, QUESTION)[0].id == "big"  # by its words meanwhile

    _, reloaded = fresh(store)
    reloaded.load()
    assert reloaded.unembedded() == ["s1/big"]  # a stop before the vectors: still waiting

    texts = memory.texts_to_embed("s1/big")
    vectors = embedder.embed(texts)
    assert memory.write_passage_vectors("s1/big", texts, vectors)
    memory.index_passage_vectors("s1/big", vectors)
    assert memory.unembedded() == [] and memory.texts_to_embed("s1/big") == []
    assert not memory.write_passage_vectors("s1/big", texts, vectors)  # has them: nothing written
    _, reloaded = fresh(store)
    reloaded.load()
    assert reloaded.unembedded() == []
    assert search(reloaded, embedder, QUESTION)[0].ranks.get("dense") == 1


def test_vectors_of_a_turn_forgotten_and_written_again_are_not_kept(embedder: OnnxMiniLMEmbedder) -> None:
    _, memory = fresh()
    turns = memory.prepare("s1", [TurnInput(agent=filler(3_000, seed=6), turn_id="t")], now=NOW)
    memory.record(turns, embedder.embed([t.text for t in turns]))
    texts = memory.texts_to_embed("s1/t")
    memory.forget_session("s1")
    turns = memory.prepare("s1", [TurnInput(agent=filler(3_000, seed=7), turn_id="t")], now=NOW)
    memory.record(turns, embedder.embed([t.text for t in turns]))
    assert not memory.write_passage_vectors("s1/t", texts, embedder.embed(texts))
    assert memory.unembedded() == ["s1/t"]


def test_too_few_passage_vectors_are_refused() -> None:
    _, memory = fresh()
    turns = memory.prepare("s1", [TurnInput(user=filler(5_000, seed=5))], now=NOW)
    with pytest.raises(ValueError, match="passage vectors"):
        memory.record(turns, np.zeros((1, 384), np.float32), np.zeros((1, 384), np.float32))


def test_cjk_text_is_limited_to_200k_characters_a_side() -> None:
    _, memory = fresh()
    memory.prepare("s1", [TurnInput(user="字" * 200_000 + "x" * 100_000)], now=NOW)  # at the limit: accepted
    with pytest.raises(InvalidInput, match="200000 CJK characters") as refused:
        memory.prepare("s1", [TurnInput(agent="字" * 200_001)], now=NOW)
    assert refused.value.details["field"] == "turns[0].agent"


class _Recording:
    """An LLM that records what it was sent and answers a valid summary (the network's far side)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def complete(self, system: str, user: str, *, json_mode: bool = False, call: object = None) -> str:
        self.sent.append(user)
        return '{"summary": "A log was shared.", "key_topics": [], "action_items": [], "user_preferences": []}'


def test_an_llm_summary_reads_the_opening_and_end_of_a_long_turn() -> None:
    llm = _Recording()
    long = "START " + filler(500_000, seed=8) + " END"
    summary = LLMSummarizer(llm).summarize([SummaryInput("user", "the log:"), SummaryInput("assistant", long)])
    assert summary.method == "llm" and len(llm.sent[0]) < 5_000
    assert "START" in llm.sent[0] and "END" in llm.sent[0] and "characters left out" in llm.sent[0]


def test_an_interaction_takes_a_side_as_long_as_a_turn_s() -> None:
    """Issue 44: every write path takes a message far above 16,000 characters; /v1/interactions
    refused one over 16,000 and the MCP tool too, while a turn took 1,000,000."""
    from pydantic import ValidationError

    from strata.limits import TURN_CHARS_MAX
    from strata.schema import InteractionIn

    long = InteractionIn(session_id="s1", user="word " * 20_000, agent="y" * TURN_CHARS_MAX)
    assert len(long.turn().user or "") == 100_000 and len(long.turn().agent or "") == TURN_CHARS_MAX
    with pytest.raises(ValidationError, match="agent"):
        InteractionIn(session_id="s1", agent="y" * (TURN_CHARS_MAX + 1))
