"""The newest fact first (strata.episodic.updates): with the real MiniLM embedder and the
episodic layer in process, a later turn that restates a changed value outranks the earlier one,
which is marked, and turns about other things are left where they were."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from strata.config import EpisodicSettings
from strata.context.assemble import assemble_context
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.episodic.updates import says_changed
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.providers.tokens import TiktokenCounter
from strata.schema import ContextItem
from strata.store.records import InMemoryRecordStore

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
WEEK = timedelta(days=7)


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


def _memory(
    embedder: OnnxMiniLMEmbedder, said: list[tuple[int, str]], settings: EpisodicSettings | None = None
) -> EpisodicMemory:
    store = InMemoryRecordStore()
    store.ensure_collection("e", dim=384)
    memory = EpisodicMemory("t", store=store, collection="e", settings=settings or EpisodicSettings())
    inputs = [TurnInput(user=text, timestamp=T0 + weeks * WEEK, turn_id=f"w{weeks}") for weeks, text in said]
    turns = memory.prepare("s", inputs, now=T0)
    memory.record(turns, embedder.embed([t.text for t in turns]))
    return memory


def _ask(memory: EpisodicMemory, embedder: OnnxMiniLMEmbedder, question: str) -> list:  # type: ignore[type-arg]
    return memory.search(embedder.embed_query([question])[0], query_text=question, top_k=5, include_summaries=False)


HISTORY = [
    (0, "The dashboard API answers in 900 milliseconds on the staging cluster, which is far too slow for us."),
    (1, "I baked a lemon cake for my sister's birthday party on Saturday."),
    (3, "The dashboard API now answers in 250 milliseconds on the staging cluster."),
    (4, "We should plan the hiking trip to the lakes for next month."),
]


def test_the_later_value_outranks_the_earlier_which_is_marked(embedder: OnnxMiniLMEmbedder) -> None:
    question = "How fast does the dashboard API answer on the staging cluster, far too slow?"
    hits = _ask(_memory(embedder, HISTORY), embedder, question)
    ids = [h.id for h in hits]
    assert ids.index("w3") < ids.index("w0")
    earlier = next(h for h in hits if h.id == "w0")
    assert earlier.superseded_by == "w3"
    assert next(h for h in hits if h.id == "w3").superseded_by is None
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_off_it_ranks_by_match_alone(embedder: OnnxMiniLMEmbedder) -> None:
    question = "How fast does the dashboard API answer on the staging cluster, far too slow?"
    hits = _ask(_memory(embedder, HISTORY, EpisodicSettings(supersede_cosine=0)), embedder, question)
    assert hits[0].id == "w0" and all(h.superseded_by is None for h in hits)


def test_turns_about_other_things_are_not_superseded(embedder: OnnxMiniLMEmbedder) -> None:
    said = [
        (0, "I adopted a golden retriever puppy named Max last spring."),
        (2, "My flight to Tokyo leaves on Tuesday morning from gate 12."),
        (3, "Max the golden retriever learned to fetch the newspaper."),
    ]
    hits = _ask(_memory(embedder, said), embedder, "What is my golden retriever called?")
    assert all(h.superseded_by is None for h in hits)


def test_the_context_shows_the_earlier_turn_as_earlier() -> None:
    items = [
        ContextItem(layer="episodic", kind="turn", id="w0", text="user: it answers in 900 ms", score=1.0,
                    timestamp=T0, superseded_by="w3"),
        ContextItem(layer="episodic", kind="turn", id="w3", text="user: it now answers in 250 ms", score=0.9,
                    timestamp=T0 + 3 * WEEK),
    ]
    text = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=500,
                            counter=TiktokenCounter("cl100k_base")).text
    assert "(earlier; a later turn covers this) user: it answers in 900 ms" in text
    assert "] user: it now answers in 250 ms" in text


@pytest.mark.parametrize(("later", "changed"), [
    ("It now answers in 250 ms.", True),
    ("I moved to Munich last month.", True),
    ("我现在住在上海。", True),
    ("The deadline is March 17.", False),  # other numbers alone: MemSim holds two bosses' birthdays
    ("The support group was so powerful.", False),
    ("It is well known.", False),  # "now" inside a word is no word of change
])
def test_a_later_turn_says_it_changed_by_a_word_of_change(later: str, changed: bool) -> None:
    assert says_changed(later) is changed


def test_the_same_thing_said_twice_without_a_change_is_not_superseded(embedder: OnnxMiniLMEmbedder) -> None:
    said = [
        (0, "I went to the LGBTQ support group yesterday and it was so powerful."),
        (2, "The LGBTQ support group was so powerful again yesterday, I loved it."),
    ]
    hits = _ask(_memory(embedder, said), embedder, "What did I think of the LGBTQ support group?")
    assert all(h.superseded_by is None for h in hits)
