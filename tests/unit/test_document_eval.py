"""The document retrieval set made from a conversation benchmark, its scoring,
and a tiny run of the chunking evaluation and the path ablation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from strata.config import SemanticSettings
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata_bench.evaluation.chunking import (
    format_ablation_table,
    format_chunking_table,
    run_chunking_eval,
    run_path_ablation,
)
from strata_bench.evaluation.datasets import Benchmark, EvalConversation, EvalQuestion, EvalSession, EvalTurn
from strata_bench.evaluation.documents import PassageBoard, document_set, score_passages, session_document

TURNS_1 = (
    EvalTurn("D1:1", "Ann", "I adopted a grey cat called Pixel last week."),
    EvalTurn("D1:2", "Bob", "Lovely!\nDoes she get along\n\nwith your dog?"),
    EvalTurn("D1:3", "Ann", "Mostly. Here they are.", image_caption="a cat and a dog on a sofa"),
)
TURNS_2 = (
    EvalTurn("D2:1", "Bob", "I ran the Berlin marathon in three hours and ten minutes."),
    EvalTurn("D2:2", "Ann", "That is fast. Did you train with the running club?"),
    EvalTurn("D2:3", "Bob", "Yes, every Sunday morning at the lake."),
)
TOY = Benchmark(
    "toy",
    (
        EvalConversation(
            "conv-toy",
            (
                EvalSession("session_1", datetime(2023, 5, 8, 13, 56, tzinfo=UTC), TURNS_1),
                EvalSession("session_2", None, TURNS_2),
            ),
            (
                EvalQuestion("q1", "What is the name of Ann's cat?", "Pixel", ("D1:1",), "single-hop"),
                EvalQuestion("q2", "Which marathon did Bob run?", "Berlin", ("D2:1",), "single-hop"),
                EvalQuestion("q3", "Where does the running club train?", "lake", ("D2:2", "D2:3"), "multi-hop"),
                EvalQuestion("q4", "What is Ann's dog called?", None, ("D1:3",), "adversarial"),
            ),
        ),
    ),
)


def test_session_document_spans_are_exact() -> None:
    conversation = TOY.conversations[0]
    doc = session_document(conversation, conversation.sessions[0], 1)
    assert doc.doc_id == "session_1"
    assert doc.title == "Ann and Bob, session 1 (8 May 2023, 13:56)"
    assert doc.text.startswith("# Ann and Bob, session 1 (8 May 2023, 13:56)\n\n**Ann**: I adopted")
    assert doc.text[slice(*doc.spans["D1:1"])] == "**Ann**: I adopted a grey cat called Pixel last week."
    # Line breaks inside a turn would split its paragraph: they become spaces.
    assert doc.text[slice(*doc.spans["D1:2"])] == "**Bob**: Lovely! Does she get along with your dog?"
    assert doc.text[slice(*doc.spans["D1:3"])] == "**Ann**: Mostly. Here they are. [image: a cat and a dog on a sofa]"
    paragraphs = doc.text.strip().split("\n\n")
    assert len(paragraphs) == 4 and all(doc.text[slice(*span)] in paragraphs for span in doc.spans.values())
    undated = session_document(conversation, conversation.sessions[1], 2)
    assert undated.title == "Ann and Bob, session 2"
    for turn in TURNS_2:
        assert turn.text in undated.text[slice(*undated.spans[turn.id])]


def test_document_set_skips_adversarial_and_maps_evidence() -> None:
    documents = document_set(TOY)
    (corpus,) = documents.corpora
    assert [d.doc_id for d in corpus.documents] == ["session_1", "session_2"]
    assert [q.id for q in corpus.queries] == ["q1", "q2", "q3"]
    doc_id, start, end = corpus.span("D2:3")
    assert doc_id == "session_2"
    assert corpus.documents[1].text[start:end].endswith("every Sunday morning at the lake.")
    assert [q.id for q in document_set(TOY, categories={"adversarial"}).corpora[0].queries] == ["q4"]


def test_score_passages_on_hand_made_hits() -> None:
    evidence = [("a", 10, 20), ("b", 0, 5)]
    passages = [
        ("b", 5, 50),  # touches b's end only: no overlap
        ("a", 0, 11),  # one character of the first turn
        ("c", 0, 100),  # another document
        ("b", 4, 6),
    ]
    scores = score_passages(evidence, passages, [1, 2, 4])
    assert scores == {
        "recall@1": 0.0, "any@1": 0.0,
        "recall@2": 0.5, "any@2": 1.0,
        "recall@4": 1.0, "any@4": 1.0,
        "rr": 0.5,
    }
    # The first covering passage below the deepest k does not count for MRR.
    assert score_passages(evidence, passages[:1] * 3 + [("a", 12, 13)], [1, 3])["rr"] == 0.0
    assert score_passages([("a", 0, 1)], [], [1])["recall@1"] == 0.0
    with pytest.raises(ValueError):
        score_passages([], passages, [1])


def test_passage_board_means_and_tokens() -> None:
    board = PassageBoard([1, 2], tokens_k=2)
    board.add(
        "x", [("a", 0, 5)], [("a", 0, 5), ("a", 9, 12)], texts=["one two", "three", "four"],
        count=lambda t: len(t.split()),
    )
    board.add("y", [("a", 0, 5), ("b", 0, 5)], [("b", 1, 2)], texts=["five"], count=lambda t: len(t.split()))
    report = board.report()
    assert report["categories"]["x"] == {"recall@1": 1.0, "any@1": 1.0, "recall@2": 1.0, "any@2": 1.0,
                                         "tokens@2": 3.0, "mrr": 1.0, "questions": 1}
    overall = report["overall"]
    assert overall["recall@1"] == pytest.approx(0.75) and overall["mrr"] == 1.0 and overall["tokens@2"] == 2.0
    assert overall["questions"] == 2


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(threads=1)


def test_end_to_end_two_strategies_and_ablation(embedder: OnnxMiniLMEmbedder) -> None:
    settings = SemanticSettings()
    result = run_chunking_eval(TOY, ["fixed", "parent_child"], [1, 2], settings, embedder, progress=False)
    assert list(result["strategies"]) == ["fixed", "parent_child"]
    assert result["questions"] == 3 and result["documents"] == 2
    for r in result["strategies"].values():
        assert r["overall"]["questions"] == 3
        assert r["index"]["children"] == 2 and r["index"]["parents"] == 2  # each short session is one chunk
        # Two documents, two passages: everything is found by k = 2.
        assert r["overall"]["recall@2"] == 1.0
        assert r["overall"]["recall@1"] >= 2 / 3
        assert r["overall"]["tokens@5"] > 20
    table = format_chunking_table(result)
    assert "parent_child" in table and "single-hop" in table and "overall" in table

    ablation = run_path_ablation(TOY, [1, 2], settings, embedder, progress=False)
    assert list(ablation["rows"]) == ["dense", "lexical", "graph", "fusion"]
    assert ablation["rows"]["fusion"]["weights"] == settings.fusion_weights
    assert ablation["rows"]["lexical"]["overall"]["recall@1"] == 1.0  # Pixel, Berlin, club: words of the turns
    assert "fusion" in format_ablation_table(ablation)
