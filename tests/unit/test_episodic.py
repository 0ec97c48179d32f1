"""Tests for EpisodicMemory over the in-memory record store.

Semantic tests embed with the real packaged MiniLM model (loaded once per
module); tests where meaning does not matter use hand-made unit vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from unittest import mock

import numpy as np
import pytest

from strata.clock import from_ms, to_ms
from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.summarize import EpisodeSummary, ExtractiveSummarizer
from strata.episodic.turns import Turn, TurnInput, summary_inputs
from strata.errors import InvalidInput, NotFound
from strata.ids import validate_id
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.store.records import InMemoryRecordStore

COLL = "episodic"
DIM = 384
NOW = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
SETTINGS = EpisodicSettings(raw_window=4, summary_threshold=3)

TOPICS = [
    ("I adopted a golden retriever puppy named Max.", "Puppies need a lot of training and walks."),
    ("My flight to Tokyo leaves on Tuesday morning.", "Remember to bring your passport to the airport."),
    ("I'm baking sourdough bread this weekend.", "Sourdough needs an active starter and a long rise."),
    ("Our team is migrating the database to Postgres.", "Plan the schema migration and test the backups."),
    ("I started learning to play the violin.", "Practising scales every day helps beginners."),
    ("My grandmother turns ninety next month.", "A family party sounds like a lovely way to celebrate."),
]


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


@pytest.fixture()
def store() -> InMemoryRecordStore:
    s = InMemoryRecordStore()
    s.ensure_collection(COLL, dim=DIM)
    return s


def make(store: InMemoryRecordStore, tenant: str = "t1", settings: EpisodicSettings = SETTINGS) -> EpisodicMemory:
    return EpisodicMemory(tenant, store=store, collection=COLL, settings=settings)


def unit(k: int, *mix: tuple[int, float]) -> np.ndarray:
    """A unit vector along axis ``k``, optionally tilted toward other axes."""
    v = np.zeros(DIM, dtype=np.float32)
    v[k] = 1.0
    for axis, weight in mix:
        v[axis] += weight
    return (v / np.linalg.norm(v)).astype(np.float32)


def add(
    memory: EpisodicMemory,
    session: str,
    inputs: Sequence[TurnInput],
    *,
    embedder: OnnxMiniLMEmbedder | None = None,
    vectors: np.ndarray | None = None,
    now: datetime = NOW,
) -> list[Turn]:
    turns = memory.prepare(session, inputs, now=now)
    if vectors is None:
        assert embedder is not None
        vectors = embedder.embed([t.text for t in turns])
    memory.record(turns, vectors)
    return turns


def plain(memory: EpisodicMemory, session: str, n: int, *, start: datetime = NOW, axis: int = 0) -> list[Turn]:
    """``n`` turns, one a minute, all with the same vector (meaning irrelevant)."""
    inputs = [TurnInput(user=f"message {k}", timestamp=start + timedelta(minutes=k)) for k in range(n)]
    return add(memory, session, inputs, vectors=np.stack([unit(axis)] * n))


def summarise(memory: EpisodicMemory, chunk: Sequence[Turn], axis: int = 1) -> None:
    content = ExtractiveSummarizer().summarize(summary_inputs(chunk))
    memory.add_summary(chunk, content, unit(axis))


def hit_keys(hits) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    return [(h.kind, h.session_id, h.id) for h in hits]


# --- prepare --------------------------------------------------------------------


def test_prepare_assigns_ids_and_seq(store: InMemoryRecordStore) -> None:
    memory = make(store)
    first = memory.prepare(
        "s1", [TurnInput(user="hi"), TurnInput(agent="hello"), TurnInput(user="a", agent="b")], now=NOW
    )
    assert [t.seq for t in first] == [0, 1, 2]
    assert len({t.turn_id for t in first}) == 3
    for t in first:
        assert validate_id(t.turn_id, field="turn_id") == t.turn_id
        assert t.session_id == "s1" and t.timestamp == NOW
    memory.record(first, np.stack([unit(0)] * 3))
    second = memory.prepare("s2", [TurnInput(user="again", turn_id="mine")], now=NOW)
    assert second[0].seq == 3 and second[0].turn_id == "mine"
    assert first[2].text == "user: a\nassistant: b"
    assert first[1].text == "assistant: hello"


def test_prepare_timestamps_and_speaker(store: InMemoryRecordStore) -> None:
    memory = make(store)
    naive = datetime(2023, 1, 2, 3, 4, 5)
    (t,) = memory.prepare(
        "s1", [TurnInput(user="hey", speaker="Caroline", timestamp=naive, metadata={"k": 1})], now=NOW
    )
    assert t.timestamp == naive.replace(tzinfo=UTC)
    assert t.text == "Caroline: hey"
    assert t.metadata == {"k": 1}
    assert from_ms(to_ms(t.timestamp)) == t.timestamp


@pytest.mark.parametrize(
    "bad",
    [TurnInput(), TurnInput(user=""), TurnInput(user="   ", agent="\n\t"), TurnInput(user=None, agent="  ")],
)
def test_prepare_rejects_empty_turns(store: InMemoryRecordStore, bad: TurnInput) -> None:
    with pytest.raises(InvalidInput):
        make(store).prepare("s1", [TurnInput(user="fine"), bad], now=NOW)


def test_prepare_rejects_duplicate_ids_in_one_batch(store: InMemoryRecordStore) -> None:
    with pytest.raises(InvalidInput, match="already exists"):
        make(store).prepare("s1", [TurnInput(user="a", turn_id="x1"), TurnInput(user="b", turn_id="x1")], now=NOW)


def test_prepare_rejects_duplicate_ids_against_existing(store: InMemoryRecordStore) -> None:
    memory = make(store)
    add(memory, "s1", [TurnInput(user="a", turn_id="x1")], vectors=unit(0)[None])
    with pytest.raises(InvalidInput, match="already exists"):
        memory.prepare("s1", [TurnInput(user="b", turn_id="x2"), TurnInput(user="c", turn_id="x1")], now=NOW)
    # The same id in another session is a different turn.
    assert memory.prepare("s2", [TurnInput(user="c", turn_id="x1")], now=NOW)[0].turn_id == "x1"


def test_replayed_turns_are_recognised_only_when_every_turn_matches(store: InMemoryRecordStore) -> None:
    memory = make(store)
    first = [TurnInput(user="a", agent="ok", turn_id="x1", speaker="Ann"), TurnInput(user="b", turn_id="x2")]
    add(memory, "s1", first, vectors=np.stack([unit(0), unit(1)]))
    # A retry of the same turns (timestamps may differ: the first attempt's are kept).
    again = memory.replayed("s1", [TurnInput(user="a", agent="ok", turn_id="x1", speaker="Ann", timestamp=NOW + DAY),
                                   TurnInput(user="b", turn_id="x2")])
    assert again is not None and [t.turn_id for t in again] == ["x1", "x2"] and again[0].timestamp == NOW
    assert memory.replayed("s1", [TurnInput(user="a", agent="ok", turn_id="x1", speaker="Ann")]) is not None
    # Not a replay: other text, another speaker, a new turn among them, no ids, another session.
    assert memory.replayed("s1", [TurnInput(user="a!", agent="ok", turn_id="x1", speaker="Ann")]) is None
    assert memory.replayed("s1", [TurnInput(user="a", agent="ok", turn_id="x1")]) is None
    assert memory.replayed("s1", [TurnInput(user="b", turn_id="x2"), TurnInput(user="c", turn_id="x3")]) is None
    assert memory.replayed("s1", [TurnInput(user="b")]) is None
    assert memory.replayed("s2", [TurnInput(user="b", turn_id="x2")]) is None
    assert memory.replayed("s1", []) is None


@pytest.mark.parametrize("session", ["", "a b", 's" or 1==1', "x" * 129, "s/1", "\u0430"])
def test_prepare_rejects_bad_session_id(store: InMemoryRecordStore, session: str) -> None:
    with pytest.raises(InvalidInput):
        make(store).prepare(session, [TurnInput(user="hi")], now=NOW)


def test_prepare_rejects_bad_turn_id(store: InMemoryRecordStore) -> None:
    with pytest.raises(InvalidInput):
        make(store).prepare("s1", [TurnInput(user="hi", turn_id='t" or 1==1')], now=NOW)


def test_prepare_takes_text_over_a_row_and_refuses_text_over_the_limit(store: InMemoryRecordStore) -> None:
    """A row holds 60,000 bytes; a turn side up to 1,000,000 characters is kept in its passages' rows."""
    memory = make(store)
    assert memory.prepare("s1", [TurnInput(user="x" * 60_001)], now=NOW)
    assert memory.prepare("s1", [TurnInput(user="字" * 20_001)], now=NOW)  # 60003 bytes of UTF-8
    assert memory.prepare("s1", [TurnInput(user="y" * 30_000, agent="z" * 30_000)], now=NOW)
    with pytest.raises(InvalidInput, match="limited to"):
        memory.prepare("s1", [TurnInput(agent="x" * 1_000_001)], now=NOW)


def test_prepare_honours_max_turn_chars(store: InMemoryRecordStore) -> None:
    memory = make(store, settings=EpisodicSettings(raw_window=4, summary_threshold=3, max_turn_chars=100))
    with pytest.raises(InvalidInput):
        memory.prepare("s1", [TurnInput(user="x" * 500)], now=NOW)


def test_prepare_does_not_write(store: InMemoryRecordStore) -> None:
    memory = make(store)
    memory.prepare("s1", [TurnInput(user="hi")], now=NOW)
    assert store.scan(COLL, tenant="t1") == []
    assert memory.turn_count == 0


def test_record_requires_one_vector_per_turn(store: InMemoryRecordStore) -> None:
    memory = make(store)
    turns = memory.prepare("s1", [TurnInput(user="a"), TurnInput(user="b")], now=NOW)
    with pytest.raises(ValueError):
        memory.record(turns, unit(0)[None])
    assert store.scan(COLL, tenant="t1") == [] and memory.turn_count == 0


# --- record and search ----------------------------------------------------------


def _record_topics(memory: EpisodicMemory, embedder: OnnxMiniLMEmbedder, session: str = "s1") -> list[Turn]:
    inputs = [
        TurnInput(user=u, agent=a, turn_id=f"topic{n}", timestamp=NOW + n * DAY) for n, (u, a) in enumerate(TOPICS)
    ]
    return add(memory, session, inputs, embedder=embedder)


@pytest.mark.parametrize(
    "query, expected",
    [
        ("What is the name of my dog?", "topic0"),
        ("When is my trip to Japan?", "topic1"),
        ("How do I make bread at home?", "topic2"),
        ("database schema change", "topic3"),
        ("musical instrument lessons", "topic4"),
        ("birthday of an old relative", "topic5"),
    ],
)
def test_search_returns_semantically_closest_first(
    store: InMemoryRecordStore, embedder: OnnxMiniLMEmbedder, query: str, expected: str
) -> None:
    memory = make(store)
    _record_topics(memory, embedder)
    hits = memory.search(embedder.embed([query])[0], top_k=3)
    assert len(hits) == 3
    assert hits[0].id == expected and hits[0].kind == "turn"
    assert hits[0].score > hits[1].score
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(-1.0 <= h.score <= 1.0 for h in hits)
    assert hits[0].text == memory.session_turns("s1")[int(expected[-1])].text
    assert hits[0].turn_ids == (expected,)


def test_search_top_k_and_exclusions(store: InMemoryRecordStore, embedder: OnnxMiniLMEmbedder) -> None:
    memory = make(store)
    _record_topics(memory, embedder)
    query = embedder.embed(["my puppy"])[0]
    assert len(memory.search(query, top_k=100)) == len(TOPICS)
    assert len(memory.search(query, top_k=2)) == 2
    hits = memory.search(query, top_k=3, exclude_turn_ids=frozenset({"topic0"}))
    assert "topic0" not in [h.id for h in hits] and len(hits) == 3
    assert make(store, "empty").search(query) == []


def test_search_session_filter(store: InMemoryRecordStore, embedder: OnnxMiniLMEmbedder) -> None:
    memory = make(store)
    _record_topics(memory, embedder, "s1")
    add(memory, "s2", [TurnInput(user="My dog Max loves the beach.", turn_id="dog2")], embedder=embedder)
    query = embedder.embed(["Tell me about my dog"])[0]
    assert {h.session_id for h in memory.search(query, top_k=10)} == {"s1", "s2"}
    only_s2 = memory.search(query, top_k=10, session_id="s2")
    assert [h.id for h in only_s2] == ["dog2"]
    only_s1 = memory.search(query, top_k=10, session_id="s1")
    assert {h.session_id for h in only_s1} == {"s1"} and len(only_s1) == len(TOPICS)
    assert only_s1[0].id == "topic0"
    assert memory.search(query, session_id="nope") == []


def test_search_time_range_is_half_open(store: InMemoryRecordStore) -> None:
    memory = make(store)
    # Imported history: caller-given timestamps, one turn a day, recorded out of order.
    days = [3, 0, 5, 1, 4, 2]
    inputs = [TurnInput(user=f"day {d}", turn_id=f"d{d}", timestamp=NOW - 30 * DAY + d * DAY) for d in days]
    add(memory, "s1", inputs, vectors=np.stack([unit(0, (1, 0.1 * d)) for d in days]))
    q = unit(0)
    start, end = NOW - 29 * DAY, NOW - 27 * DAY  # day 1 inclusive .. day 3 exclusive
    assert {h.id for h in memory.search(q, top_k=10, start=start, end=end)} == {"d1", "d2"}
    assert {h.id for h in memory.search(q, top_k=10, start=start)} == {"d1", "d2", "d3", "d4", "d5"}
    assert {h.id for h in memory.search(q, top_k=10, end=end)} == {"d0", "d1", "d2"}
    assert memory.search(q, top_k=10, start=end, end=end + timedelta(milliseconds=1))[0].id == "d3"
    assert memory.search(q, top_k=10, start=NOW) == []
    # Naive bounds mean UTC.
    naive = [h.id for h in memory.search(q, top_k=10, start=start.replace(tzinfo=None), end=end.replace(tzinfo=None))]
    assert set(naive) == {"d1", "d2"}
    # top_k counts hits inside the range.
    assert len(memory.search(q, top_k=2, start=start)) == 2


def test_a_turn_that_speaks_of_the_asked_time_is_preferred_though_said_before_it(store: InMemoryRecordStore) -> None:
    # Told on Monday 1 April, for Wednesday 10 April; asked about on Tuesday 16 April as "last week".
    monday = datetime(2024, 4, 1, 9, tzinfo=UTC)
    inputs = [
        TurnInput(user="Tomorrow I'm going to a lecture at the Harbor Gallery.", turn_id="early",
                  timestamp=datetime(2024, 3, 1, 9, tzinfo=UTC)),
        TurnInput(user="Next month I'm moving flats.", turn_id="vague", timestamp=datetime(2024, 3, 20, tzinfo=UTC)),
        TurnInput(user="Next Wednesday I'm going to a lecture at the City Library.", turn_id="told", timestamp=monday),
        TurnInput(user="Long day, the lecture hall was cold.", turn_id="during",
                  timestamp=datetime(2024, 4, 10, 20, tzinfo=UTC)),
    ]
    vectors = np.stack([unit(0), unit(0), unit(0, (1, 0.3)), unit(0, (1, 0.5))])
    last_week = (datetime(2024, 4, 8, tzinfo=UTC), datetime(2024, 4, 15, tzinfo=UTC))
    memory = make(store)
    turns = add(memory, "s1", inputs, vectors=vectors)
    assert turns[2].mentions == (to_ms(datetime(2024, 4, 10, tzinfo=UTC)), to_ms(datetime(2024, 4, 11, tzinfo=UTC)))
    assert turns[3].mentions == ()  # speaks of no time
    ids = [h.id for h in memory.search(unit(0), top_k=4, prefer=last_week)]
    # "told" speaks of a day inside the range, "during" was said in it; "vague" speaks of all
    # of April (vaguer than a week: no preference), "early" of 2 March.
    assert ids[:2] == ["told", "during"]
    hits = {h.id: h for h in memory.search(unit(0), top_k=4, prefer=last_week)}
    assert hits["told"].speaks_of == (datetime(2024, 4, 10, tzinfo=UTC), datetime(2024, 4, 11, tzinfo=UTC))
    assert hits["during"].speaks_of is None
    off = make(InMemoryRecordStore(), settings=SETTINGS.model_copy(update={"time_mentioned": False}))
    off._store.ensure_collection(COLL, dim=DIM)
    add(off, "s1", inputs, vectors=vectors)
    assert off.search(unit(0), top_k=4, prefer=last_week)[0].id == "during"
    # The time is kept with the row: a reload prefers the same turns without reading it again.
    reloaded = make(store)
    with mock.patch("strata.episodic.turns.mentioned_time", side_effect=AssertionError("read again")):
        reloaded.load()
    assert [h.id for h in reloaded.search(unit(0), top_k=4, prefer=last_week)] == ids
    # A row written before the time was kept is read when it loads.
    legacy = replace(turns[2], mentions=None)
    assert legacy.mentioned() == turns[2].mentions
    assert "when" not in legacy.to_dict() and turns[2].to_dict()["when"] == list(turns[2].mentions)
    # Forgetting the turn forgets its time.
    memory.delete_keys(["s1/told"], [])
    memory.drop_keys(["s1/told"], [])
    assert memory.search(unit(0), top_k=4, prefer=last_week)[0].id == "during"
    assert "s1/told" not in memory._mentioned


# --- summaries ------------------------------------------------------------------


def test_pending_summaries_are_chunks_outside_the_window(store: InMemoryRecordStore) -> None:
    memory = make(store)
    turns = plain(memory, "s1", 10)
    pending = memory.pending_summaries("s1")
    assert [[t.turn_id for t in c] for c in pending] == [
        [t.turn_id for t in turns[0:3]],
        [t.turn_id for t in turns[3:6]],
    ]
    assert memory.pending_summaries() == pending
    assert memory.raw_window("s1") == turns[6:]
    assert memory.pending_summaries("other") == []


def test_pending_waits_for_a_full_chunk(store: InMemoryRecordStore) -> None:
    memory = make(store)
    turns = plain(memory, "s1", 6)  # two outside the window: not a chunk yet
    assert memory.pending_summaries("s1") == []
    plain(memory, "s1", 1, start=NOW + timedelta(minutes=6))  # the next minute's turn
    assert memory.pending_summaries("s1") == [turns[0:3]]


def test_summarised_turns_are_never_pending_again(store: InMemoryRecordStore) -> None:
    memory = make(store)
    turns = plain(memory, "s1", 10)
    for chunk in memory.pending_summaries("s1"):
        summarise(memory, chunk)
    assert memory.pending_summaries("s1") == []
    more = plain(memory, "s1", 3, start=NOW + DAY)
    all_turns = turns + more
    assert [t.turn_id for t in memory.session_turns("s1")] == [t.turn_id for t in all_turns]
    assert memory.pending_summaries("s1") == [all_turns[6:9]]
    summarise(memory, all_turns[6:9])
    assert memory.pending_summaries("s1") == []
    summaries = memory.summaries("s1")
    covered = [tid for s in summaries for tid in s.turn_ids]
    assert len(covered) == len(set(covered)) == 9  # each turn in at most one summary
    assert set(covered) == {t.turn_id for t in all_turns[:9]}
    assert [(s.first_seq, s.last_seq) for s in summaries] == [(0, 2), (3, 5), (6, 8)]
    assert summaries[0].start == all_turns[0].timestamp and summaries[0].end == all_turns[2].timestamp


def test_a_write_looks_for_pending_summaries_in_the_sessions_it_changed_not_in_every_session(
    store: InMemoryRecordStore,
) -> None:
    """Every write asks the tenant for pending summaries: reading every session there made a
    tenant of one-turn sessions quadratic (4,000 of them: 301 ms a write). Only sessions written
    to, or whose summary was dropped, are read again, and nothing pending is missed."""
    memory = make(store)
    for k in range(50):
        plain(memory, f"one{k}", 1)
    turns = plain(memory, "long", 7)
    assert [[t.turn_id for t in c] for c in memory.pending_summaries()] == [[t.turn_id for t in turns[0:3]]]
    summarise(memory, turns[0:3])
    assert memory.pending_summaries() == []
    read: list[str] = []
    def session_turns(self: EpisodicMemory, session: str) -> list[Turn]:  # as the real one reads them, recorded
        read.append(session)
        return [self._turns[key] for _, key in self._order.get(session, ())]

    with mock.patch.object(EpisodicMemory, "session_turns", autospec=True, side_effect=session_turns):
        assert memory.pending_summaries() == []
        assert read == []
        more = plain(memory, "long", 3, start=NOW + DAY)
        assert memory.pending_summaries() == [(turns + more)[3:6]]
        assert read == ["long"]
        summarise(memory, (turns + more)[3:6])
        gone, summaries = memory.turn_keys("long", turns[0].turn_id)  # takes the first summary
        memory.drop_keys(gone, summaries)
        read.clear()
        assert memory.pending_summaries() == []  # turns 1 and 2 are not a chunk yet
        assert read == ["long"]
        last = plain(memory, "long", 1, start=NOW + 2 * DAY)
        assert memory.pending_summaries() == [[*turns[1:3], turns[6]]]
        assert read == ["long", "long"]
    sessions, total, _ = memory.sessions_page(limit=2)
    assert [s.session_id for s in sessions] == ["long", "one0"] and total == 51
    assert sessions[0].turns == 10 and sessions[0].last_at == last[0].timestamp


def test_summaries_are_stored_and_searchable(store: InMemoryRecordStore) -> None:
    memory = make(store)
    turns = plain(memory, "s1", 10, axis=0)
    content = EpisodeSummary(summary="they talked about messages", key_topics=("messages",))
    record = memory.add_summary(turns[0:3], content, unit(1))
    rows = store.scan(COLL, tenant="t1", kinds=["summary"])
    assert len(rows) == 1 and rows[0].session == "s1" and rows[0].text == content.summary
    hits = memory.search(unit(1), top_k=1)
    assert hit_keys(hits) == [("summary", "s1", record.summary_id)]
    assert hits[0].turn_ids == tuple(t.turn_id for t in turns[0:3])
    assert hits[0].timestamp == turns[0].timestamp and hits[0].end == turns[2].timestamp
    assert hits[0].score == pytest.approx(1.0)
    assert all(h.kind == "turn" for h in memory.search(unit(1), top_k=5, include_summaries=False))


def test_summary_matches_overlapping_time_range(store: InMemoryRecordStore) -> None:
    memory = make(store)
    turns = plain(memory, "s1", 10)  # one a minute from NOW
    record = memory.add_summary(turns[0:3], EpisodeSummary(summary="first three"), unit(1))

    def summary_ids(start: datetime, end: datetime) -> list[str]:
        return [h.id for h in memory.search(unit(1), top_k=20, start=start, end=end) if h.kind == "summary"]

    minute = timedelta(minutes=1)
    assert summary_ids(NOW + 1 * minute, NOW + 2 * minute) == [record.summary_id]  # inside
    assert summary_ids(NOW - minute, NOW + timedelta(seconds=1)) == [record.summary_id]  # overlaps start
    assert summary_ids(NOW + 2 * minute, NOW + 9 * minute) == [record.summary_id]  # touches its end
    assert summary_ids(NOW - minute, NOW) == []  # ends where the summary starts
    assert summary_ids(NOW + 2 * minute + timedelta(milliseconds=1), NOW + 9 * minute) == []


@pytest.mark.parametrize("narrow", ["session", "time"])
def test_summary_filters_apply_before_top_k(store: InMemoryRecordStore, narrow: str) -> None:
    memory = make(store)
    # Session "a" and "b": turns orthogonal to the query, summaries close to it,
    # a's closer than b's; b's history is a week later.
    a = plain(memory, "a", 7, axis=0)
    b = plain(memory, "b", 7, axis=0, start=NOW + 7 * DAY)
    memory.add_summary(a[0:3], EpisodeSummary(summary="a"), unit(1))
    wanted = memory.add_summary(b[0:3], EpisodeSummary(summary="b"), unit(1, (2, 1.0)))
    if narrow == "session":
        hits = memory.search(unit(1), top_k=1, session_id="b")
    else:
        hits = memory.search(unit(1), top_k=1, start=NOW + 6 * DAY)
    assert hit_keys(hits) == [("summary", "b", wanted.summary_id)]


# --- reload -----------------------------------------------------------------------


def test_load_restores_turns_search_and_summaries(store: InMemoryRecordStore, embedder: OnnxMiniLMEmbedder) -> None:
    memory = make(store)
    topics = _record_topics(memory, embedder)
    extra = add(
        memory,
        "s1",
        [TurnInput(user=f"Follow-up number {n} about the plans.") for n in range(4)],
        embedder=embedder,
        now=NOW + 10 * DAY,
    )
    add(memory, "s2", [TurnInput(user="A different session about chess openings.")], embedder=embedder)
    chunks = memory.pending_summaries("s1")
    assert [[t.turn_id for t in c] for c in chunks] == [["topic0", "topic1", "topic2"], ["topic3", "topic4", "topic5"]]
    first = chunks[0]
    content = ExtractiveSummarizer().summarize(summary_inputs(first))
    memory.add_summary(first, content, embedder.embed([content.summary])[0])

    reloaded = make(store)
    reloaded.load()
    assert reloaded.turn_count == memory.turn_count == len(topics) + len(extra) + 1
    for session in ("s1", "s2"):
        assert reloaded.session_turns(session) == memory.session_turns(session)
    assert reloaded.summaries() == memory.summaries()
    assert reloaded.summaries("s1")[0].content == content
    # Already-summarised turns are not pending again; the rest still is.
    assert [[t.turn_id for t in c] for c in reloaded.pending_summaries()] == [["topic3", "topic4", "topic5"]]
    for query in ("my dog", "flight to Tokyo", "chess", "plans"):
        q = embedder.embed([query])[0]
        before, after = memory.search(q, top_k=5), reloaded.search(q, top_k=5)
        assert hit_keys(after) == hit_keys(before)
        np.testing.assert_allclose([h.score for h in after], [h.score for h in before], atol=1e-6)
    # New turns continue the sequence and cannot reuse a stored id.
    assert reloaded.prepare("s1", [TurnInput(user="next")], now=NOW)[0].seq == memory.turn_count
    with pytest.raises(InvalidInput):
        reloaded.prepare("s1", [TurnInput(user="dup", turn_id="topic0")], now=NOW)


def test_load_of_empty_store(store: InMemoryRecordStore) -> None:
    memory = make(store)
    memory.load()
    assert memory.turn_count == 0 and memory.pending_summaries() == [] and memory.search(unit(0)) == []


# --- forget -----------------------------------------------------------------------


def test_forget_session_removes_turns_and_summaries(store: InMemoryRecordStore) -> None:
    memory = make(store)
    gone = plain(memory, "gone", 10, axis=0)
    kept = plain(memory, "kept", 10, axis=0)
    for chunk in memory.pending_summaries():
        summarise(memory, chunk, axis=1)
    assert len(memory.summaries("gone")) == 2
    removed = memory.forget_session("gone")
    assert removed == 10 + 2
    assert store.scan(COLL, tenant="t1", session="gone") == []
    assert memory.session_turns("gone") == [] and memory.summaries("gone") == []
    hits = memory.search(unit(0), top_k=100) + memory.search(unit(1), top_k=100)
    assert {h.session_id for h in hits} == {"kept"}
    assert memory.session_turns("kept") == kept
    assert len(memory.summaries("kept")) == 2
    assert memory.pending_summaries("gone") == []
    with pytest.raises(NotFound):
        memory.forget_session("gone")
    fresh = make(store)
    fresh.load()
    assert fresh.session_turns("gone") == [] and len(fresh.session_turns("kept")) == 10
    # The session id and its turn ids can be used again, and the index still grows.
    add(memory, "gone", [TurnInput(user="reused id", turn_id=gone[0].turn_id)], vectors=unit(2)[None])
    plain(memory, "gone", 39, axis=2)
    assert len(memory.search(unit(2), top_k=100, session_id="gone", include_summaries=False)) == 40
    assert len(memory.search(unit(0), top_k=100, session_id="kept", include_summaries=False)) == 10


def test_forget_unknown_session_raises(store: InMemoryRecordStore) -> None:
    memory = make(store)
    plain(memory, "s1", 2)
    with pytest.raises(NotFound):
        memory.forget_session("never")
    with pytest.raises(InvalidInput):
        memory.forget_session("bad id")
    assert memory.turn_count == 2


def test_forget_only_the_last_session_then_reuse(store: InMemoryRecordStore) -> None:
    memory = make(store)
    plain(memory, "only", 3)
    assert memory.forget_session("only") == 3
    assert memory.search(unit(0)) == [] and memory.turn_count == 0
    plain(memory, "only", 2, axis=3)
    assert [h.score for h in memory.search(unit(3))] == pytest.approx([1.0, 1.0])


# --- tenants -------------------------------------------------------------------------


def test_tenants_never_see_each_other(store: InMemoryRecordStore, embedder: OnnxMiniLMEmbedder) -> None:
    a, b = make(store, "a"), make(store, "b")
    add(a, "s1", [TurnInput(user="Tenant A's secret project is called Bluebird.", turn_id="x")], embedder=embedder)
    add(b, "s1", [TurnInput(user="Tenant B is planning a garden party.", turn_id="x")], embedder=embedder)
    q = embedder.embed(["secret project Bluebird garden party"])[0]
    assert [h.text for h in a.search(q, top_k=10)] == ["user: Tenant A's secret project is called Bluebird."]
    assert [h.text for h in b.search(q, top_k=10)] == ["user: Tenant B is planning a garden party."]
    assert {r.tenant for r in store.scan(COLL, tenant="a")} == {"a"}
    texts = {
        "a": "user: Tenant A's secret project is called Bluebird.",
        "b": "user: Tenant B is planning a garden party.",
    }
    for tenant, text in texts.items():
        fresh = make(store, tenant)
        fresh.load()
        assert [t.text for t in fresh.session_turns("s1")] == [text]
        assert [h.text for h in fresh.search(q, top_k=10)] == [text]
    # Forgetting in one tenant leaves the other alone.
    a.forget_session("s1")
    assert len(store.scan(COLL, tenant="b", session="s1")) == 1
    assert len(b.search(q)) == 1
    with pytest.raises(NotFound):
        a.forget_session("s1")


def test_bad_tenant_rejected(store: InMemoryRecordStore) -> None:
    with pytest.raises(InvalidInput):
        make(store, 'a" or tenant != "')


def test_imported_history_is_ordered_by_its_timestamps(store: InMemoryRecordStore) -> None:
    """Turns imported out of order: the window and the summaries follow their timestamps."""
    memory = make(store)
    late = [TurnInput(user=f"late {n}", timestamp=NOW + timedelta(hours=n)) for n in range(4)]
    early = [TurnInput(user=f"early {n}", timestamp=NOW - timedelta(days=1, hours=-n)) for n in range(4)]
    add(memory, "s1", late, vectors=np.stack([unit(n % DIM) for n in range(4)]))
    add(memory, "s1", early, vectors=np.stack([unit(n % DIM) for n in range(4)]))
    ordered = [t.user for t in memory.session_turns("s1")]
    assert ordered == [f"early {n}" for n in range(4)] + [f"late {n}" for n in range(4)]
    assert [t.user for t in memory.raw_window("s1")] == [f"late {n}" for n in range(4)]
    [chunk] = memory.pending_summaries("s1")
    assert [t.user for t in chunk] == ["early 0", "early 1", "early 2"]


def test_graph_path_finds_turns_naming_the_querys_entities(store: InMemoryRecordStore) -> None:
    settings = EpisodicSettings(fusion_graph_weight=1.0, fusion_dense_weight=0.0, fusion_lexical_weight=0.0)
    memory = make(store, settings=settings)
    turns = add(memory, "s1", [
        TurnInput(user="We moved the billing jobs to Kubernetes last spring."),
        TurnInput(user="Kubernetes depends on Calico for networking here."),
        TurnInput(user="Lunch was great today."),
    ], vectors=np.stack([unit(0), unit(1), unit(2)]))
    assert turns[0].entities is not None  # extracted at write, stored with the turn
    hits = memory.search(unit(3), query_text="what runs on Calico?", top_k=3)
    assert [h.id for h in hits][:2] == [turns[1].turn_id, turns[0].turn_id]  # Calico, then one hop to Kubernetes
    assert all("graph" in h.ranks for h in hits[:2])
    reloaded = make(store, settings=settings)
    reloaded.load()
    assert [h.id for h in reloaded.search(unit(3), query_text="Calico", top_k=1)] == [turns[1].turn_id]
    memory.forget_session("s1")
    assert memory.search(unit(3), query_text="Calico Kubernetes", top_k=3) == []


@pytest.mark.parametrize(("weight", "window", "boosted"), [(0.4, 4, True), (0.0, 4, False), (0.4, 1, False)])
def test_lexical_context_finds_the_turn_next_to_the_named_fact(
    store: InMemoryRecordStore, weight: float, window: int, boosted: bool
) -> None:
    """"Where does the one who finished high school work?": the turn that says where
    shares only "works" with it, its session neighbour (two turns away) the rest."""
    settings = EpisodicSettings(
        fusion_dense_weight=0.0, lexical_context_weight=weight, lexical_context_window=window
    )
    memory = make(store, settings=settings)
    cousin = add(memory, "s1", [
        TurnInput(user="My cousin has a doctorate."),
        TurnInput(user="My cousin works in Hangzhou."),
    ], vectors=np.stack([unit(0)] * 2))
    boss = add(memory, "s2", [
        TurnInput(user="My boss only finished high school."),
        TurnInput(user="My boss likes hiking."),
        TurnInput(user="My boss works in Shenzhen."),
    ], vectors=np.stack([unit(0)] * 3), now=NOW + DAY)
    hits = [h.id for h in memory.search(unit(1), query_text="where the one who finished high school works", top_k=5)]
    assert hits[0] == boss[0].turn_id
    shenzhen, hangzhou = hits.index(boss[2].turn_id), hits.index(cousin[1].turn_id)
    assert (shenzhen < hangzhou) is boosted


@pytest.mark.parametrize(("weight", "window", "lifted"), [(0.4, 2, True), (0.0, 2, False), (0.4, 1, False)])
def test_dense_context_finds_the_turn_near_the_one_that_matches(
    store: InMemoryRecordStore, weight: float, window: int, lifted: bool
) -> None:
    """A turn two places from the one that matches the query's meaning comes before an
    equally weak turn with no such neighbour, when (and only when) it is within the window."""
    settings = EpisodicSettings(context_neighbour_weight=0.0, dense_context_weight=weight, dense_context_window=window)
    memory = make(store, settings=settings)
    near = add(memory, "s1", [TurnInput(user="alpha"), TurnInput(user="beta"), TurnInput(user="gamma")],
               vectors=np.stack([unit(0), unit(2), unit(1, (0, 0.2))]))
    alone = add(memory, "s2", [TurnInput(user="delta"), TurnInput(user="epsilon")],
                vectors=np.stack([unit(3), unit(1, (0, 0.25))]), now=NOW + DAY)
    hits = memory.search(unit(0), query_text="zeta", top_k=5, include_summaries=False)
    ids = [h.id for h in hits]
    assert ids[0] == near[0].turn_id
    assert (ids.index(near[2].turn_id) < ids.index(alone[1].turn_id)) is lifted
    # Relevance stays the turn's own cosine: the share moves the rank, not what the hit claims.
    by_id = {h.id: h for h in hits}
    assert by_id[near[2].turn_id].relevance < by_id[alone[1].turn_id].relevance


def test_dense_context_lifts_no_turn_past_one_that_matches_as_well(store: InMemoryRecordStore) -> None:
    """A turn said again in a session of related talk does not outrank the same words said
    alone: the share is how far a neighbour matches better, and neither copy has one that
    does. The words only the lone one holds decide (read-your-writes of `strata bench`)."""
    memory = make(store, settings=EpisodicSettings(context_neighbour_weight=0.0))
    said = "Night trains are quiet, punctual and cheaper than flying across the continent"
    talk = add(memory, "s1", [TurnInput(user="We compared ways to travel"), TurnInput(user=said),
                              TurnInput(user="Sleeper cabins sell out early")],
               vectors=np.stack([unit(0, (1, 0.5)), unit(0), unit(0, (1, 0.5))]))
    alone = add(memory, "s2", [TurnInput(user=f"{said} (ref7731)")], vectors=np.stack([unit(0)]), now=NOW + DAY)
    hits = memory.search(unit(0), query_text=f"{said} (ref7731)", top_k=3, include_summaries=False)
    assert [h.id for h in hits][:2] == [alone[0].turn_id, talk[1].turn_id]


def test_neighbour_rows_follow_inserts_out_of_order_and_forgetting(store: InMemoryRecordStore) -> None:
    """The dense share read from the kept rows equals one computed from the sessions' time
    order, after turns arrive out of order and after some are forgotten."""
    rng = np.random.default_rng(7)
    memory = make(store, settings=EpisodicSettings(dense_context_window=2))
    for k in rng.permutation(24):
        session = f"s{k % 3}"
        vector = rng.standard_normal(DIM).astype(np.float32)
        add(memory, session, [TurnInput(user=f"m{k}", timestamp=NOW + timedelta(minutes=int(k)))],
            vectors=(vector / np.linalg.norm(vector))[None, :])

    def expected(scores: np.ndarray) -> np.ndarray:
        index = memory._turn_index
        out = np.zeros(len(index), dtype=np.float32)
        for order in memory._order.values():
            rows = [index.position(key) for _, key in order]
            for i, row in enumerate(rows):
                near = [scores[r] for j, r in enumerate(rows) if j != i and abs(j - i) <= 2]
                out[row] = max(near, default=-np.inf)
        return out

    scores = rng.standard_normal(24).astype(np.float32)
    assert np.allclose(memory._near_scores(scores), expected(scores))
    key = memory._order["s1"][3][1]
    gone, summaries = memory.turn_keys("s1", key.split("/")[1])
    memory.drop_keys(gone, summaries)
    scores = rng.standard_normal(23).astype(np.float32)
    assert np.allclose(memory._near_scores(scores), expected(scores))
    add(memory, "s1", [TurnInput(user="late", timestamp=NOW)], vectors=unit(5)[None, :])
    scores = rng.standard_normal(24).astype(np.float32)
    assert np.allclose(memory._near_scores(scores), expected(scores))


@pytest.mark.parametrize(("mode", "first"), [("theoretical", "far"), ("minmax", "far"), ("rrf", "barely")])
def test_score_fusion_lets_a_hit_far_ahead_on_one_path_win(store: InMemoryRecordStore, mode: str, first: str) -> None:
    """Two turns each first on one path: "barely" leads the dense path by a hair,
    "far" leads BM25 by three query terms to one. Ranks (RRF) call it for the
    heavier dense path; scores see that "far" is nearly as close in meaning too."""
    memory = make(store, settings=EpisodicSettings.model_validate({"fusion_mode": mode}))
    assert EpisodicSettings().fusion_mode == "theoretical"
    barely = add(memory, "s1", [TurnInput(user="Notes on the cluster.")], vectors=np.stack([unit(0)]))
    far = add(memory, "s2", [TurnInput(user="We deploy the staging cluster on Fridays.")],
              vectors=np.stack([unit(0, (1, 0.15))]), now=NOW + DAY)
    add(memory, "s3", [TurnInput(user="Lunch was great today."), TurnInput(user="The printer jammed again.")],
        vectors=np.stack([unit(2), unit(3)]), now=NOW + 2 * DAY)
    hits = memory.search(unit(0), query_text="deploy the staging cluster", top_k=2, include_summaries=False)
    assert hits[0].ranks == ({"dense": 2, "lexical": 1} if first == "far" else {"dense": 1, "lexical": 2})
    assert hits[0].id == {"far": far, "barely": barely}[first][0].turn_id
    assert 0 < hits[1].score < hits[0].score <= 1


def test_a_summary_is_merged_on_the_turns_scale_and_never_outranks_the_turn_that_matches_better(
    store: InMemoryRecordStore,
) -> None:
    """Turns and summaries are each scored against their own best hit; merged as they were, the
    best summary of any search scored about 1, above a turn holding every word of the query and a
    term nothing else has. On one scale the summary falls below that turn, and the turns keep
    their order."""
    memory = make(store)
    old = add(memory, "s0", [TurnInput(user=f"alpha beta gamma, note {k}") for k in range(3)],
              vectors=np.stack([unit(0, (1, 0.3))] * 3))
    memory.add_summary(old, EpisodeSummary(summary="alpha beta gamma, alpha beta gamma, notes"), unit(0, (1, 0.3)))
    decoy = add(memory, "s1", [TurnInput(user="Lunch was great today.")], vectors=np.stack([unit(0)]), now=NOW + DAY)
    fresh = add(memory, "s2", [TurnInput(user="alpha beta gamma zzqx")], vectors=np.stack([unit(0, (1, 0.3))]),
                now=NOW + 2 * DAY)
    hits = memory.search(unit(0), query_text="alpha beta gamma zzqx", top_k=10)
    assert (hits[0].kind, hits[0].id) == ("turn", fresh[0].turn_id)
    summary = next(h for h in hits if h.kind == "summary")
    assert 0 < summary.score < hits[0].score
    turns = [h.id for h in hits if h.kind == "turn"]
    alone = [
        h.id for h in memory.search(unit(0), query_text="alpha beta gamma zzqx", top_k=10, include_summaries=False)
    ]
    assert turns == alone[: len(turns)] and decoy[0].turn_id in turns


def test_forgetting_one_turn_takes_the_summaries_that_cover_it_and_nothing_else(store: InMemoryRecordStore) -> None:
    memory = make(store)
    turns = plain(memory, "s1", 7)
    other = plain(memory, "s2", 3)
    covering = memory.add_summary(turns[0:3], EpisodeSummary(summary="first three"), unit(1))
    memory.add_summary(turns[3:6], EpisodeSummary(summary="next three"), unit(1))
    gone, summaries = memory.turn_keys("s1", turns[1].turn_id)
    assert gone == [f"s1/{turns[1].turn_id}"] and summaries == [f"s1/{covering.summary_id}"]
    assert memory.delete_keys(gone, summaries) == 2
    memory.drop_keys(gone, summaries)
    left = {(r.kind, r.session, r.text) for r in store.scan(COLL, tenant="t1")}
    assert ("turn", "s1", turns[1].text) not in left and ("summary", "s1", "first three") not in left
    assert ("summary", "s1", "next three") in left and len(left) == 6 + 3 + 1
    hits = memory.search(unit(0), top_k=20)
    assert turns[1].turn_id not in {h.id for h in hits} and {t.turn_id for t in other} <= {h.id for h in hits}
    with pytest.raises(NotFound, match="no turn"):
        memory.turn_keys("s1", turns[1].turn_id)
    with pytest.raises(InvalidInput):
        memory.turn_keys("s1", "../s2")


def test_forgetting_turns_leaves_the_index_a_fresh_load_of_what_remains_would_build(store: InMemoryRecordStore) -> None:
    """Forgetting re-indexes only the turns next to the forgotten ones; whatever is forgotten
    (one turn, a run of them, the first or last of a session, a whole session, several at
    once as an expiry sweep does) the dense vectors, the neighbour rows and the hits are those
    of a memory loaded from the rows that remain."""
    rng = np.random.default_rng(11)
    settings = EpisodicSettings(dense_context_window=2)
    memory = make(store, settings=settings)
    for k in rng.permutation(60):
        vector = rng.standard_normal(DIM).astype(np.float32)
        add(memory, f"s{k % 4}", [TurnInput(user=f"m{k} w{k % 7}", timestamp=NOW + timedelta(minutes=int(k)))],
            vectors=(vector / np.linalg.norm(vector))[None, :])

    def keys(session: str) -> list[str]:
        return [key for _, key in memory._order[session]]

    def forget(gone: list[str]) -> None:
        memory.delete_keys(gone, [])
        memory.drop_keys(gone, [])
        fresh = make(store, settings=settings)
        fresh.load()
        assert sorted(fresh._turn_index.ids) == sorted(memory._turn_index.ids)
        ids = fresh._turn_index.ids
        assert np.allclose(memory._turn_index.vectors(ids), fresh._turn_index.vectors(ids), atol=1e-6)
        by_key = dict(zip(ids, rng.standard_normal(len(ids)).astype(np.float32), strict=True))
        mine = memory._turn_index.ids
        near = dict(zip(mine, memory._near_scores(np.array([by_key[k] for k in mine])), strict=True))
        near_fresh = dict(zip(ids, fresh._near_scores(np.array([by_key[k] for k in ids])), strict=True))
        assert near == near_fresh
        query = rng.standard_normal(DIM).astype(np.float32)
        assert hit_keys(memory.search(query, query_text="m3 w2", top_k=12)) == hit_keys(
            fresh.search(query, query_text="m3 w2", top_k=12))

    forget([keys("s1")[5]])  # one turn
    forget(keys("s2")[3:7])  # a run
    forget([keys("s0")[0], keys("s3")[-1]])  # the first of one session, the last of another
    forget(keys("s3"))  # a whole session
    forget([keys("s0")[2], keys("s0")[4], keys("s1")[0], keys("s2")[-2]])  # scattered, as an expiry sweep


def test_a_session_is_read_a_page_at_a_time_in_either_order_and_after_any_of_its_turns(
    store: InMemoryRecordStore,
) -> None:
    memory = make(store)
    plain(memory, "s1", 7, start=NOW + DAY)
    plain(memory, "s1", 4)  # arrive later, belong earlier
    plain(memory, "other", 3)
    for newest_first in (False, True):
        expected = [t.turn_id for t in memory.session_turns("s1")][:: -1 if newest_first else 1]
        for limit in (1, 3, 11, 50):
            seen, after, more = [], None, True
            while more:
                page, total, more = memory.turns_page("s1", after=after, limit=limit, newest_first=newest_first)
                assert total == 11 and 0 < len(page) <= limit
                seen += [t.turn_id for t in page]
                after = page[-1].turn_id
            assert seen == expected, (newest_first, limit)
    with pytest.raises(NotFound):
        memory.turns_page("nobody")
    with pytest.raises(InvalidInput, match="start again without after"):
        memory.turns_page("s1", after="no-such-turn")
    assert [t.turn_id for t in memory.raw_window("s1")] == [t.turn_id for t in memory.session_turns("s1")][-4:]
    assert memory.session_length("s1") == len(memory.session_turns("s1"))
