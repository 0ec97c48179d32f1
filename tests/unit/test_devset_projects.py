"""The long project-conversation development set: it loads, its labels hold, it is reproducible."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from strata_bench.evaluation.datasets import Benchmark, load_strata
from strata_bench.evaluation.devset_projects import CATEGORIES, build, main, statistics


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return build()


@pytest.fixture(scope="module")
def benchmark(data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Benchmark:
    path = tmp_path_factory.mktemp("devset") / "projects.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return load_strata(path)


def _order(conversation: dict[str, Any]) -> dict[str, int]:
    return {t["id"]: n for n, t in enumerate(t for s in conversation["sessions"] for t in s["turns"])}


def test_loads_with_the_neutral_loader_and_keeps_every_question(data: dict[str, Any], benchmark: Benchmark) -> None:
    assert benchmark.skipped_questions == 0
    assert len(benchmark.conversations) == len(data["conversations"]) >= 6
    for raw, loaded in zip(data["conversations"], benchmark.conversations, strict=True):
        # The loader drops evidence ids that are not turns: every id survives.
        assert [list(q.evidence) for q in loaded.questions] == [q["evidence"] for q in raw["questions"]]
        assert all(s.date is not None for s in loaded.sessions)
        assert [s.date for s in loaded.sessions] == sorted(s.date for s in loaded.sessions if s.date)


def test_ids_are_unique(data: dict[str, Any]) -> None:
    conversations = [c["id"] for c in data["conversations"]]
    questions = [q["id"] for c in data["conversations"] for q in c["questions"]]
    assert len(set(conversations)) == len(conversations)
    assert len(set(questions)) == len(questions)
    for c in data["conversations"]:
        turns = [t["id"] for s in c["sessions"] for t in s["turns"]]
        assert len(set(turns)) == len(turns)


def test_is_deterministic(data: dict[str, Any], tmp_path: Path) -> None:
    assert build() == data
    out = tmp_path / "a.json"
    assert main(["--out", str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8")) == data


def test_shape_and_size_targets(data: dict[str, Any]) -> None:
    stats = statistics(data)
    assert 150 <= stats["questions"] <= 250
    assert set(stats["categories"]) == set(CATEGORIES)
    for c in data["conversations"]:
        turns = [t for s in c["sessions"] for t in s["turns"]]
        assert 8 <= len(c["sessions"]) <= 15, c["id"]
        assert 40 <= len(turns) <= 90, c["id"]
        assert {t["speaker"] for t in turns} == {"user", "assistant"}
    assert 1_200 <= stats["assistant_median_chars"] <= 2_000
    assert stats["p90_chars"] >= 3_000
    assert stats["over_100k"] >= 2
    lengths = [len(t["text"]) for c in data["conversations"] for s in c["sessions"] for t in s["turns"]]
    assert sum(5_000 <= n <= 60_000 for n in lengths) >= 12
    assert max(lengths) <= 1_000_000  # what Strata accepts in one turn


def test_long_message_questions_point_at_long_messages(data: dict[str, Any]) -> None:
    for c in data["conversations"]:
        length = {t["id"]: len(t["text"]) for s in c["sessions"] for t in s["turns"]}
        for q in c["questions"]:
            if q["category"] == "long-message":
                assert all(length[e] > 5_000 for e in q["evidence"]), q["id"]
            if q["category"] == "multi-hop":
                assert len(set(q["evidence"])) == 2, q["id"]
            else:
                assert len(q["evidence"]) == 1, q["id"]


def test_every_update_has_an_older_previous_value(data: dict[str, Any]) -> None:
    updates = 0
    for c in data["conversations"]:
        order = _order(c)
        by_id = {q["id"]: q for q in c["questions"]}
        for q in c["questions"]:
            if q["category"] != "update":
                continue
            updates += 1
            previous = by_id[q["id"].replace("-update-", "-previous-value-", 1)]
            assert previous["category"] == "previous-value"
            assert order[previous["evidence"][0]] < order[q["evidence"][0]], q["id"]
    assert updates >= 20
