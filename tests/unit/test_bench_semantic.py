"""The semantic benchmark, tiny, over the in-memory record store (no Milvus server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strata.config import ChunkingSettings, SemanticSettings
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.semantic.documents import DocumentInput
from strata.store.records import InMemoryRecordStore
from strata_bench.semantic import SEARCH_PATHS, format_report, run

README = Path(__file__).resolve().parents[2] / "README.md"
# Small chunks, so the project's README alone gives a few dozen children.
SETTINGS = SemanticSettings(
    chunking=ChunkingSettings(child_tokens=48, child_overlap=8, parent_tokens=192, parent_overlap=16)
)


def _documents() -> list[DocumentInput]:
    sections = [s for s in README.read_text().split("\n## ") if s.strip()]
    return [
        DocumentInput(text=s, doc_id=f"readme-{n}", title=s.splitlines()[0].strip("# ")) for n, s in enumerate(sections)
    ]


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    documents = _documents()
    queries = [line.strip() for line in README.read_text().splitlines() if len(line.split()) > 6][:10]
    return run(
        documents,
        queries,
        store=InMemoryRecordStore(),
        embedder=OnnxMiniLMEmbedder(threads=1),
        children_small=30,
        children_large=120,
        pool_children=40,
        settings=SETTINGS,
    )


def test_small_tenant_has_positive_stage_rates(result: dict[str, Any]) -> None:
    small = result["small"]
    assert small["children"] >= 30 and small["documents"] >= 1
    assert set(small["stages"]) == {"chunk", "extract", "prepare_other", "embed", "write", "index"}
    for key in ("chunk", "extract", "embed", "write", "index"):
        assert small["stages"][key]["seconds"] > 0
        assert small["stages"][key]["children_per_s"] > 0
    assert small["end_to_end"]["children_per_s"] > 0
    assert small["embedder_floor"]["children_per_s"] > 0
    # The stages are parts of the end-to-end time.
    assert sum(s["seconds"] for s in small["stages"].values()) <= small["end_to_end"]["seconds"] * 1.01


def test_large_tenant_is_built_from_the_pool_and_loads(result: dict[str, Any]) -> None:
    large = result["large"]
    assert large["children"] >= 120
    pool = large["pool"]
    assert 40 <= pool["children"] < large["children"]
    assert 0 < pool["distinct_texts"] <= pool["children"]
    for step in ("write", "index", "load"):
        assert large[step]["seconds"] > 0 and large[step]["children_per_s"] > 0
    assert large["load"]["scan_s"] > 0
    assert large["memory"]["retained_by_loaded_tenant_mib"] > 0
    assert large["documents"] > pool["documents"]


@pytest.mark.parametrize("size", ["small", "large"])
def test_latency_tables_cover_every_path(result: dict[str, Any], size: str) -> None:
    search = result[size]["search"]
    assert search["queries"] == 10
    assert search["query_embedding"]["p50_ms"] > 0
    for key, _, weights in SEARCH_PATHS:
        row = search[key]
        excl = row["excluding_embedding"]
        assert 0 < excl["p50_ms"] <= excl["p95_ms"] <= excl["p99_ms"]
        assert ("including_embedding" in row) == (weights is None or "dense" in weights)
        if "including_embedding" in row:
            assert row["including_embedding"]["p50_ms"] > excl["p50_ms"]
    assert search["fused"]["mean_hits"] > 0 and search["dense"]["mean_hits"] > 0


def test_report_prints_every_section(result: dict[str, Any]) -> None:
    text = format_report(result)
    for heading in ("== 1. Index throughput", "== 2. Search latency", "== 3. ", "load (fresh SemanticMemory.load)"):
        assert heading in text
    assert "lexical only" in text and "graph only" in text
