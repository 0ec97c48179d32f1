"""The events development set: it loads, its labels hold, it is reproducible, and its questions
name a time the message with the answer was not said in."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from strata.retrieval.timeparse import mentioned_time, question_time
from strata_bench.evaluation.datasets import load_strata
from strata_bench.evaluation.devset_events import CATEGORIES, build, main


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return build()


def test_loads_with_the_neutral_loader_and_keeps_every_question(data: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    loaded = load_strata(path)
    assert loaded.skipped_questions == 0
    assert [c.id for c in loaded.conversations] == ["events-zh-0", "events-zh-1", "events-en-0", "events-en-1"]
    assert sum(len(c.questions) for c in loaded.conversations) >= 250
    assert {q.category for c in loaded.conversations for q in c.questions} == set(CATEGORIES)


def test_is_deterministic(data: dict[str, Any], tmp_path: Path) -> None:
    assert build() == data
    out = tmp_path / "a.json"
    assert main(["--out", str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8")) == data


def test_the_answer_was_said_days_before_the_time_the_question_names_and_speaks_of_it(data: dict[str, Any]) -> None:
    for c in data["conversations"]:
        turns = {t["id"]: (t["text"], datetime.fromisoformat(s["date"])) for s in c["sessions"] for t in s["turns"]}
        for q in c["questions"]:
            (evidence,) = q["evidence"]
            text, said = turns[evidence]
            asked = question_time(q["question"], datetime.fromisoformat(q["date"]))
            told = mentioned_time(text, said)
            assert asked is not None and told is not None, (q["question"], text)
            assert asked.start.replace(tzinfo=None) > said  # said before the time asked about...
            assert told.start == asked.start, (q["question"], text)  # ...of which it speaks
