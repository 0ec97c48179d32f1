"""Relevance: in [0, 1], made of what the paths measured, comparable across queries,
and the floor the context keeps items above."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from strata.config import EmbeddingSettings, StrataSettings
from strata.context.assemble import assemble_context
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.providers.embedder import make_embedder
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.lexical import LexicalIndex
from strata.retrieval.relevance import combined, dense_relevance
from strata.schema import ContextItem
from strata.store.records import InMemoryRecordStore

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def test_cosines_are_placed_on_the_span_and_clipped() -> None:
    placed = dense_relevance(np.array([-0.2, 0.1, 0.35, 0.6, 0.9]), (0.1, 0.6))
    assert placed.tolist() == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.0])


def test_either_path_vouches_and_both_count_more() -> None:
    assert combined(0.0, 0.0) == 0.0
    assert combined(0.6, None) == pytest.approx(0.6)
    assert combined(None, 0.6) == pytest.approx(0.6)
    assert combined(0.5, 0.5) == pytest.approx(0.75)
    assert combined(1.0, 0.2) == 1.0


def test_lexical_relevance_is_the_share_of_the_querys_weight_matched() -> None:
    index = LexicalIndex()
    index.add("a", "the staging deploy failed with ERR_CONN_RESET")
    index.add("b", "we booked a quiet hotel near the river")
    index.add("c", "the deploy went fine this time")
    index.add("d", "lunch was a vegetarian curry")
    found = index.relevance("deploy ERR_CONN_RESET", ["a", "b", "c"])
    assert 0.8 <= found["a"] <= 1.0  # every term of the query, at about average length
    assert 0 < found["c"] < found["a"]  # the common term only
    assert found["b"] == 0.0
    # A term memory never saw is part of the query's weight: nothing matches it all.
    assert index.relevance("deploy ERR_CONN_RESET kubernetes", ["a"])["a"] < found["a"]
    assert index.relevance("", ["a"]) == {"a": 0.0}
    assert LexicalIndex().relevance("deploy", ["a"]) == {"a": 0.0}


@pytest.fixture(scope="module")
def memory() -> tuple[EpisodicMemory, StrataSettings]:
    settings = StrataSettings()
    embedder = make_embedder(settings.embedding)
    memory = EpisodicMemory("t", store=InMemoryRecordStore(), collection="e", settings=settings.episodic)
    said = [
        "I'm vegetarian and my sister is allergic to peanuts.",
        "We want a quiet hotel in Alfama with a view of the river.",
        "The deploy script fails with ERR_CONN_RESET when it uploads to the staging bucket.",
        "Raising the upload timeout to 120 seconds fixed the deploy.",
    ]
    turns = memory.prepare("s", [TurnInput(user=u, timestamp=T0 + timedelta(minutes=n)) for n, u in enumerate(said)],
                           now=T0)
    memory.index(turns, embedder.embed([t.text for t in turns]))
    return memory, settings


def _search(memory: EpisodicMemory, settings: StrataSettings, query: str) -> list[tuple[str, float, float]]:
    vector = make_embedder(settings.embedding).embed_query([query])[0]
    return [(h.text, h.score, h.relevance) for h in memory.search(vector, query_text=query, top_k=4)]


def test_relevance_tells_a_match_from_the_best_of_nothing(memory: tuple[EpisodicMemory, StrataSettings]) -> None:
    """Both queries' best hits have a high fused score (1.0 and 0.6: the unrelated query
    shares no word, so only the dense path ranks); only relevance says that one query
    found what it asked for and the other the least unrelated turn."""
    asked = _search(*memory, "What fixed the deploy error?")
    unrelated = _search(*memory, "Which football team won the league last season?")
    assert asked[0][1] > 0.9 and unrelated[0][1] >= 0.5
    assert "deploy" in asked[0][0] or "timeout" in asked[0][0]
    assert asked[0][2] > 0.6
    assert unrelated[0][2] < 0.3
    for _, _, relevance in asked + unrelated:
        assert 0.0 <= relevance <= 1.0


def test_the_context_keeps_only_items_above_the_floor() -> None:
    items = [
        ContextItem(layer="episodic", kind="turn", id="strong", text="raising the timeout fixed it", score=1.0,
                    relevance=0.8, timestamp=T0),
        ContextItem(layer="episodic", kind="turn", id="weak", text="we booked a hotel", score=0.98,
                    relevance=0.1, timestamp=T0),
        ContextItem(layer="episodic", kind="turn", id="unknown", text="no relevance given", score=0.97,
                    timestamp=T0),
    ]
    out = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=2000,
                           counter=TiktokenCounter(), min_relevance=0.3)
    kept = [i.id for s in out.sections for i in s.items]
    assert kept == ["strong", "unknown"]
    everything = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=2000,
                                  counter=TiktokenCounter())
    assert len([i for s in everything.sections for i in s.items]) == 3


def test_the_cjk_dense_weight_and_the_span_follow_the_embedder() -> None:
    minilm = StrataSettings()
    assert minilm.episodic.fusion_dense_weight_cjk == 0.05
    assert minilm.semantic.fusion_dense_weight_cjk == 0.05
    assert minilm.episodic.cosine_span == minilm.embedding.relevance_span
    e5 = StrataSettings(embedding=EmbeddingSettings(provider="e5"))
    assert e5.episodic.fusion_dense_weight_cjk == e5.episodic.fusion_dense_weight
    assert e5.semantic.fusion_dense_weight_cjk == e5.semantic.fusion_weights["dense"]
    assert e5.procedural.cosine_span == e5.embedding.relevance_span != minilm.embedding.relevance_span
    explicit = StrataSettings.model_validate(
        {"embedding": EmbeddingSettings(provider="e5"), "episodic": {"fusion_dense_weight_cjk": 0.2}}
    )
    assert explicit.episodic.fusion_dense_weight_cjk == 0.2
    told = StrataSettings(embedding=EmbeddingSettings(multilingual=True, cosine_span=(0.2, 0.7)))
    assert told.episodic.fusion_dense_weight_cjk == told.episodic.fusion_dense_weight
    assert told.episodic.cosine_span == (0.2, 0.7)
    # Shipped to an actor and rebuilt, the settings say the same.
    assert StrataSettings.from_dict(e5.to_dict()) == e5


def test_a_span_that_is_not_two_ordered_cosines_is_refused() -> None:
    with pytest.raises(ValueError, match="cosine_span"):
        EmbeddingSettings(cosine_span=(0.7, 0.2))


def test_skill_thresholds_set_on_minilms_scale_keep_their_meaning_on_another_span() -> None:
    from strata.retrieval.relevance import MINILM_SPAN, on_span

    assert on_span(0.3, MINILM_SPAN) == pytest.approx(0.3)
    e5 = StrataSettings(embedding=EmbeddingSettings(provider="e5")).embedding.relevance_span
    # e5's unrelated texts reach 0.78: MiniLM's floor 0.3 must not let them all through,
    # and its merge threshold 0.9 must sit above e5's answering pairs (0.88).
    assert on_span(0.3, e5) > e5[0]
    assert on_span(0.9, e5) > e5[1]
