"""Tests for strata_bench.evaluation: loaders, metrics, turn-level baselines and the chart."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from strata.providers.embedder import OnnxMiniLMEmbedder
from strata_bench.evaluation import (
    LOCOMO_CATEGORIES,
    BM25Retriever,
    DenseRetriever,
    EvalConversation,
    EvalQuestion,
    EvalSession,
    EvalTurn,
    Retriever,
    RRFRetriever,
    Scoreboard,
    any_at_k,
    load_benchmark,
    load_locomo,
    load_strata,
    parse_locomo_datetime,
    plot_k,
    plot_results,
    recall_at_k,
    reference_time,
    turn_document,
    words_and_bigrams,
)

BENCH = Path("/work/shared/bench")
LOCOMO_PATH = BENCH / "locomo10.json"
MEMSIM_PATH = BENCH / "memsim-roles.json"


def _write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _turn(dia_id: str, speaker: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


# ----------------------------------------------------------------- LoCoMo loader

LOCOMO_SAMPLE: list[dict[str, Any]] = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                _turn("D1:1", "Ann", "Hi Bob!"),
                _turn("D1:2", "Bob", "Look at my cat.", blip_caption="a photo of a cat", img_url=["x"]),
            ],
            # Numeric order: session_10 comes after session_2, not before it.
            "session_10_date_time": "9:00 am on 1 June, 2023",
            "session_10": [_turn("D10:1", "Ann", "A month later.")],
            "session_2_date_time": "sometime in spring",
            "session_2": [_turn("D2:1", "Bob", "Back again.")],
            "session_3_date_time": "1:00 pm on 20 May, 2023",
            "session_3": [],
            # More date keys than sessions, as in some real samples.
            "session_4_date_time": "2:00 pm on 21 May, 2023",
        },
        "qa": [
            {"question": "q0 int answer", "answer": 3, "evidence": ["D1:1"], "category": 1},
            {"question": "q1 joined", "answer": "a", "evidence": ["D1:2; D10:1"], "category": 2},
            {"question": "q2 lone D", "answer": "b", "evidence": ["D"], "category": 3},
            {"question": "q3 colon", "answer": "c", "evidence": ["D:11:26", "D2:1"], "category": 4},
            {"question": "q4 ghost", "answer": "d", "evidence": ["D9:99", "D1:05"], "category": 4},
            {"question": "q5 adversarial", "adversarial_answer": "trap", "evidence": ["D1:2"], "category": 5},
            {"question": "q6 spaces, commas, repeats", "answer": "e", "evidence": ["D2:1 D1:1,D1:1", "D2:1"],
             "category": 4},
            {"question": "q7 no evidence", "answer": "f", "evidence": [], "category": 3},
        ],
    },
    {
        "sample_id": "conv-y",
        "conversation": {
            "session_1_date_time": "10:04am on 19 December 2023",
            "session_1": [_turn("D1:1", "Cy", "Same id as in conv-x is fine.")],
        },
        "qa": [{"question": "other conversation", "answer": "g", "evidence": ["D1:1", "D1:2"], "category": 4}],
    },
]


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    return _write(tmp_path, "mini-locomo.json", LOCOMO_SAMPLE)


def test_locomo_sessions_turns_and_dates(locomo_file: Path) -> None:
    bench = load_locomo(locomo_file)
    assert bench.name == "mini-locomo"
    x, y = bench.conversations
    assert x.id == "conv-x" and y.id == "conv-y"
    assert [s.id for s in x.sessions] == ["session_1", "session_2", "session_10"]
    assert [s.date for s in x.sessions] == [
        datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        None,
        datetime(2023, 6, 1, 9, 0, tzinfo=UTC),
    ]
    assert y.sessions[0].date == datetime(2023, 12, 19, 10, 4, tzinfo=UTC)
    assert [t.id for t in x.turns] == ["D1:1", "D1:2", "D2:1", "D10:1"]
    assert x.turns[1] == EvalTurn("D1:2", "Bob", "Look at my cat.", "a photo of a cat")
    assert x.turns[0].image_caption is None


def test_locomo_questions(locomo_file: Path) -> None:
    bench = load_locomo(locomo_file)
    x, y = bench.conversations
    by_id = {q.id: q for q in x.questions}
    # q2 ("D"), q4 (ghost ids only, "D1:05" is not "D1:5") and q7 (no evidence) are skipped.
    assert sorted(by_id) == ["conv-x-q0", "conv-x-q1", "conv-x-q3", "conv-x-q5", "conv-x-q6"]
    assert bench.skipped_questions == 3
    assert by_id["conv-x-q0"].answer == "3"
    assert by_id["conv-x-q1"].evidence == ("D1:2", "D10:1")
    assert by_id["conv-x-q3"].evidence == ("D2:1",)
    assert by_id["conv-x-q6"].evidence == ("D2:1", "D1:1")
    assert by_id["conv-x-q5"].answer is None
    assert [by_id[i].category for i in sorted(by_id)] == [
        "multi-hop", "temporal", "single-hop", "adversarial", "single-hop",
    ]
    assert all(q.date is None for q in x.questions)
    # Evidence is checked against the question's own conversation.
    assert y.questions[0].evidence == ("D1:1",)
    assert dict(LOCOMO_CATEGORIES) == {
        1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial",
    }


def test_locomo_rejects_unknown_category_and_duplicate_turn(tmp_path: Path) -> None:
    bad_category = [{"sample_id": "s", "conversation": {"session_1": [_turn("D1:1", "A", "hi")]},
                     "qa": [{"question": "?", "answer": "x", "evidence": ["D1:1"], "category": 9}]}]
    with pytest.raises(ValueError, match="category"):
        load_locomo(_write(tmp_path, "a.json", bad_category))
    duplicate = [{"sample_id": "s", "conversation": {"session_1": [_turn("D1:1", "A", "hi"), _turn("D1:1", "B", "yo")]},
                  "qa": []}]
    with pytest.raises(ValueError, match="D1:1"):
        load_locomo(_write(tmp_path, "b.json", duplicate))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("10:04 am on 19 December, 2023", datetime(2023, 12, 19, 10, 4, tzinfo=UTC)),
        ("12:05 am on 1 January, 2023", datetime(2023, 1, 1, 0, 5, tzinfo=UTC)),
        ("12:30 pm on 1 Jan 2023", datetime(2023, 1, 1, 12, 30, tzinfo=UTC)),
        ("1:56pm on 8 May 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("1:56 P.M. on May 8th, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("  13:56 on 8 may, 2023 ", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("9 pm on 3 Sept, 2022", datetime(2022, 9, 3, 21, 0, tzinfo=UTC)),
        ("8 May, 2023", datetime(2023, 5, 8, tzinfo=UTC)),
        ("2023-05-08T13:56:00", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("2023-05-08T13:56:00+02:00", datetime(2023, 5, 8, 13, 56, tzinfo=timezone(timedelta(hours=2)))),
        ("", None),
        ("sometime in spring", None),
        ("1:56 pm on 30 February, 2023", None),
        ("13:56 pm on 8 May, 2023", None),
    ],
)
def test_parse_locomo_datetime(text: str, expected: datetime | None) -> None:
    parsed = parse_locomo_datetime(text)
    assert parsed == expected
    if parsed is not None:
        assert parsed.utcoffset() is not None


# ----------------------------------------------------------------- neutral format

STRATA_SAMPLE: dict[str, Any] = {
    "conversations": [
        {
            "id": "c1",
            "sessions": [
                {"id": "s1", "date": "2024-04-01T08:39:00", "turns": [
                    {"id": "t1", "speaker": "user", "text": "我的上司只有高中学历。"},
                    {"id": "t2", "speaker": "user", "text": "photo", "image_caption": "a red bike"},
                ]},
                {"id": "s2", "date": None, "turns": [{"id": "t3", "speaker": "assistant", "text": "ok"}]},
                {"id": "s3", "date": "2024-04-03T10:00:00+08:00", "turns": [
                    {"id": "t4", "speaker": "user", "text": "later"},
                ]},
            ],
            "questions": [
                {"id": "q1", "question": "学历?", "answer": "高中", "evidence": ["t1", "ghost"],
                 "category": "simple", "date": "2024-04-05T11:59:00Z"},
                {"id": "q2", "question": "bike?", "evidence": ["t2", "t2"], "category": "image"},
                {"id": "q3", "question": "nothing", "answer": "x", "evidence": ["ghost"], "category": "simple"},
                {"id": "q4", "question": "empty", "answer": "x", "evidence": [], "category": "simple"},
            ],
        }
    ]
}


def test_load_strata(tmp_path: Path) -> None:
    bench = load_strata(_write(tmp_path, "neutral.json", STRATA_SAMPLE))
    assert bench.name == "neutral"
    assert bench.skipped_questions == 2
    (conversation,) = bench.conversations
    s1, s2, s3 = conversation.sessions
    assert s1.date == datetime(2024, 4, 1, 8, 39, tzinfo=UTC)
    assert s2.date is None
    assert s3.date == datetime(2024, 4, 3, 10, 0, tzinfo=timezone(timedelta(hours=8)))
    assert s1.turns[1].image_caption == "a red bike" and s1.turns[0].image_caption is None
    q1, q2 = conversation.questions
    assert q1 == EvalQuestion("q1", "学历?", "高中", ("t1",), "simple", datetime(2024, 4, 5, 11, 59, tzinfo=UTC))
    assert q2.answer is None and q2.date is None and q2.evidence == ("t2",)


def test_load_strata_rejects_duplicate_turn_ids(tmp_path: Path) -> None:
    data = json.loads(json.dumps(STRATA_SAMPLE))
    data["conversations"][0]["sessions"][1]["turns"][0]["id"] = "t1"
    with pytest.raises(ValueError, match="duplicate turn id 't1'"):
        load_strata(_write(tmp_path, "dup.json", data))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("sessions", 0, "date"), "not a date"),
        (("sessions", 0, "turns", 0, "text"), 5),
        (("questions", 0, "evidence"), "t1"),
    ],
)
def test_load_strata_validates_fields(tmp_path: Path, path: tuple[Any, ...], value: Any) -> None:
    data = json.loads(json.dumps(STRATA_SAMPLE))
    target = data["conversations"][0]
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(ValueError, match=str(path[-1])):
        load_strata(_write(tmp_path, "bad.json", data))


def test_load_benchmark_detects_and_dispatches(tmp_path: Path) -> None:
    locomo = _write(tmp_path, "l.json", LOCOMO_SAMPLE)
    neutral = _write(tmp_path, "n.json", STRATA_SAMPLE)
    assert load_benchmark(locomo) == load_locomo(locomo)
    assert load_benchmark(neutral) == load_strata(neutral)
    assert load_benchmark(str(neutral), "strata") == load_strata(neutral)
    with pytest.raises(ValueError, match="format"):
        load_benchmark(neutral, "csv")
    with pytest.raises(ValueError, match="cannot tell"):
        load_benchmark(_write(tmp_path, "x.json", {"samples": []}))
    with pytest.raises(ValueError):
        load_benchmark(neutral, "locomo")


def test_reference_time() -> None:
    may, june = datetime(2023, 5, 8, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC)
    sessions = (EvalSession("a", june, ()), EvalSession("b", may, ()), EvalSession("c", None, ()))
    conversation = EvalConversation("c", sessions, ())
    undated = EvalQuestion("q", "?", None, ("t",), "x")
    dated = EvalQuestion("q", "?", None, ("t",), "x", datetime(2024, 1, 1, tzinfo=UTC))
    assert reference_time(conversation, dated) == dated.date
    assert reference_time(conversation, undated) == june
    assert reference_time(EvalConversation("c", (EvalSession("a", None, ()),), ()), undated) is None


# ----------------------------------------------------------------- real data


def test_real_locomo_counts() -> None:
    if not LOCOMO_PATH.is_file():
        pytest.skip(f"{LOCOMO_PATH} is not present")
    bench = load_benchmark(LOCOMO_PATH)
    conversations = bench.conversations
    assert len(conversations) == 10
    assert sum(len(c.sessions) for c in conversations) == 272
    assert sum(len(c.turns) for c in conversations) == 5882
    assert all(s.date is not None for c in conversations for s in c.sessions)
    questions = [q for c in conversations for q in c.questions]
    # The README: 1,540 questions in categories 1-4, 1,535 with valid evidence. The five
    # lost: four open-domain questions with no evidence, one temporal whose only id is "D30:05".
    assert sum(q.category != "adversarial" for q in questions) == 1535
    assert bench.skipped_questions == 5
    assert len(questions) + bench.skipped_questions == 1986
    by_id = {q.id: q for q in questions}
    assert "D10:19" not in by_id["conv-42-q58"].evidence
    assert by_id["conv-47-q38"].evidence == ("D18:1", "D18:7")
    assert "conv-50-q69" not in by_id


def test_real_memsim_counts() -> None:
    if not MEMSIM_PATH.is_file():
        pytest.skip(f"{MEMSIM_PATH} is not present")
    bench = load_benchmark(MEMSIM_PATH)
    assert len(bench.conversations) == 6
    assert sum(len(c.turns) for c in bench.conversations) == 4368
    assert sum(len(c.questions) for c in bench.conversations) == 600
    assert bench.skipped_questions == 0
    assert all(q.date is not None and q.date.tzinfo is not None for c in bench.conversations for q in c.questions)


# ----------------------------------------------------------------- metrics


def test_recall_and_any_at_k() -> None:
    evidence = ["a", "b"]
    assert recall_at_k(evidence, ["x", "a", "y", "b"], 1) == 0.0
    assert recall_at_k(evidence, ["x", "a", "y", "b"], 2) == 0.5
    assert recall_at_k(evidence, ["x", "a", "y", "b"], 4) == 1.0
    assert recall_at_k(evidence, ["a"], 10) == 0.5
    assert recall_at_k(evidence, [], 10) == 0.0
    # A repeated id counts once and uses up its slots.
    assert recall_at_k(evidence, ["a", "a", "b"], 2) == 0.5
    assert recall_at_k(["a", "a"], ["a"], 1) == 1.0
    assert any_at_k(evidence, ["x", "b"], 1) == 0.0
    assert any_at_k(evidence, ["x", "b"], 2) == 1.0
    with pytest.raises(ValueError):
        recall_at_k([], ["a"], 1)
    with pytest.raises(ValueError):
        any_at_k(["a"], ["a"], 0)


def test_scoreboard_report() -> None:
    board = Scoreboard()
    board.add("temporal", ["a", "b"], ["a", "x", "b"])
    board.add("multi-hop", ["c"], ["x", "c"])
    board.add("temporal", ["d"], ["x"])
    report = board.report((2, 1))
    assert list(report) == ["overall", "categories"]
    assert list(report["categories"]) == ["multi-hop", "temporal"]
    assert report["overall"] == {
        "recall@1": pytest.approx((0.5 + 0 + 0) / 3),
        "any@1": pytest.approx(1 / 3),
        "recall@2": pytest.approx((0.5 + 1 + 0) / 3),
        "any@2": pytest.approx(2 / 3),
        "questions": 3,
    }
    assert report["categories"]["temporal"] == {
        "recall@1": 0.25, "any@1": 0.5, "recall@2": 0.25, "any@2": 0.5, "questions": 2,
    }
    assert report["categories"]["multi-hop"]["recall@2"] == 1.0
    assert len(board) == 3
    assert Scoreboard().report([5]) == {"overall": {"recall@5": 0.0, "any@5": 0.0, "questions": 0}, "categories": {}}
    with pytest.raises(ValueError):
        board.add("x", [], ["a"])


# ----------------------------------------------------------------- baselines

CORPUS = [
    EvalTurn("t1", "Sam", "The deploy failed again with ERR_CONN_RESET from the payment gateway."),
    EvalTurn("t2", "Ana", "I adopted a little puppy from the shelter yesterday."),
    EvalTurn("t3", "Sam", "We should book the train tickets for the Lisbon trip."),
    EvalTurn("t4", "user", "我的上司的邮箱地址是zhao@example.com。"),
    EvalTurn("t5", "user", "我表弟今年三十六岁了。"),
    EvalTurn("t6", "Ana", "Look at this!", "a photo of a violin on a stage"),
]
IDS = [t.id for t in CORPUS]
DOCS = [turn_document(t) for t in CORPUS]


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


@pytest.fixture(scope="module")
def bm25() -> BM25Retriever:
    pytest.importorskip("bm25s", reason="bm25s is an evaluation dependency")
    retriever = BM25Retriever()
    retriever.index(IDS, DOCS)
    return retriever


@pytest.fixture(scope="module")
def dense(embedder: OnnxMiniLMEmbedder) -> DenseRetriever:
    retriever = DenseRetriever(embedder, batch_size=4)  # several batches
    retriever.index(IDS, DOCS)
    return retriever


def test_turn_document() -> None:
    assert turn_document(CORPUS[0]) == (
        'Sam said, "The deploy failed again with ERR_CONN_RESET from the payment gateway."'
    )
    assert turn_document(CORPUS[5]) == 'Ana said, "Look at this!" [shared an image: a photo of a violin on a stage]'


def test_words_and_bigrams() -> None:
    assert words_and_bigrams("Hello ERR_CONN_RESET a 世 上司的邮箱abc") == [
        "hello", "err_conn_reset", "世", "上司", "司的", "的邮", "邮箱", "abc",
    ]


def test_bm25_exact_term(bm25: BM25Retriever) -> None:
    assert isinstance(bm25, Retriever)
    assert bm25.search("what was ERR_CONN_RESET about?", 3)[0] == "t1"
    assert bm25.search("violin", 3) == ["t6"]  # the caption is indexed
    # Nothing shared (stop words only, or unseen words): no arbitrary zero-score hits.
    assert bm25.search("the of and", 5) == []
    assert bm25.search("who got a new dog", 5) == []
    assert bm25.search("ERR_CONN_RESET", 0) == []


def test_bm25_chinese_bigrams(bm25: BM25Retriever) -> None:
    assert bm25.search("我上司的邮箱是什么？", 3)[0] == "t4"
    assert bm25.search("表弟多大了", 3)[0] == "t5"


def test_bm25_empty_corpus_and_length_mismatch() -> None:
    pytest.importorskip("bm25s", reason="bm25s is an evaluation dependency")
    retriever = BM25Retriever()
    retriever.index([], [])
    assert retriever.search("anything", 5) == []
    with pytest.raises(ValueError):
        retriever.index(["a"], [])


def test_dense_paraphrase(dense: DenseRetriever) -> None:
    assert isinstance(dense, Retriever)
    hits = dense.search("Who got a new dog?", 3)
    assert hits[0] == "t2"
    assert len(dense.search("anything", 100)) == len(CORPUS)
    empty = DenseRetriever(dense._embedder)
    empty.index([], [])
    assert empty.search("anything", 3) == []


def test_rrf_combines_both_paths(bm25: BM25Retriever, dense: DenseRetriever) -> None:
    fused = RRFRetriever([bm25, dense])
    assert isinstance(fused, Retriever)
    # BM25 alone cannot see the paraphrase; fusion keeps dense's find and BM25's exact term.
    assert "t2" not in bm25.search("ERR_CONN_RESET and a new dog", 10)
    top = fused.search("ERR_CONN_RESET and a new dog", 2)
    assert set(top) == {"t1", "t2"}


class _Fixed:
    """A retriever with a canned ranking, to check the fusion arithmetic."""

    def __init__(self, name: str, ranking: list[str]) -> None:
        self.name = name
        self.ranking = ranking
        self.asked: list[int] = []
        self.indexed: list[str] = []

    def index(self, turn_ids: Any, texts: Any) -> None:
        self.indexed = list(turn_ids)

    def search(self, query: str, k: int) -> list[str]:
        self.asked.append(k)
        return self.ranking[:k]


def test_rrf_arithmetic() -> None:
    a, b = _Fixed("a", ["x", "y"]), _Fixed("b", ["y", "z"])
    fused = RRFRetriever([a, b])
    fused.index(["x", "y", "z"], ["1", "2", "3"])
    assert a.indexed == b.indexed == ["x", "y", "z"]
    # y: 1/61 + 1/62 beats x: 1/61 beats z: 1/62.
    assert fused.search("q", 3) == ["y", "x", "z"]
    assert a.asked == [100] and b.asked == [100]
    fused.search("q", 150)
    assert a.asked[-1] == 150
    # Weight 0 silences b: x 1/61, y 1/62, z 0.
    assert RRFRetriever([a, b], weights=[1.0, 0.0]).search("q", 3) == ["x", "y", "z"]
    # Ties keep the order in which turns were first seen.
    assert RRFRetriever([_Fixed("c", ["p"]), _Fixed("d", ["q"])]).search("q", 2) == ["p", "q"]
    with pytest.raises(ValueError):
        RRFRetriever([a, b], weights=[1.0])
    with pytest.raises(ValueError):
        RRFRetriever([])


# ----------------------------------------------------------------- plot


def _report(recall10: float) -> dict[str, Any]:
    section = {"recall@5": recall10 / 2, "recall@10": recall10, "recall@20": 0.9, "questions": 4}
    return {"overall": section, "categories": {"temporal": section, "multi-hop": dict(section, **{"recall@10": 0.1})}}


def test_plot_results_writes_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is an evaluation dependency")
    results = {"retrievers": {"bm25": _report(0.5), "dense": _report(0.4), "rrf": _report(0.6)}}
    out = tmp_path / "recall.png"
    plot_results(results, out)
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5_000


def test_plot_k_choice() -> None:
    def results(*ks: int) -> dict[str, Any]:
        return {"retrievers": {"r": {"overall": {f"recall@{k}": 0.5 for k in ks}, "categories": {}}}}

    assert plot_k(results(1, 5, 10, 20)) == 10
    assert plot_k(results(1, 5, 20)) == 5
    assert plot_k(results(20, 50)) == 50
    with pytest.raises(ValueError):
        plot_k({"retrievers": {}})
