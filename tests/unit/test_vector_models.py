"""Which embedder made a collection's vectors: the mark, the check, and a reindex, on the
in-memory reference store (the integration test runs the same on milvus-lite)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from strata.config import EmbeddingSettings, StrataSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.errors import VectorModelMismatch
from strata.providers.embedder import make_embedder
from strata.reindex import reindex_store
from strata.store.layout import Collections
from strata.store.records import InMemoryRecordStore
from strata.store.vector_models import UNMARKED, VectorMarks, VectorModel, check_collection, check_tenant

MINILM = VectorModel.of(EmbeddingSettings())
E5 = VectorModel.of(EmbeddingSettings(provider="e5"))


@pytest.fixture
def world() -> tuple[InMemoryRecordStore, Collections]:
    store, names = InMemoryRecordStore(), Collections.for_settings(StrataSettings())
    for name in (names.episodic, names.semantic, names.procedural, names.state):
        store.ensure_collection(name, dim=384)
    return store, names


def _record(store: InMemoryRecordStore, names: Collections, tenant: str, texts: list[str]) -> EpisodicMemory:
    memory = EpisodicMemory(tenant, store=store, collection=names.episodic, settings=StrataSettings().episodic)
    turns = memory.prepare("s1", [TurnInput(user=t) for t in texts], now=datetime.now(UTC))
    memory.record(turns, make_embedder(EmbeddingSettings()).embed([t.text for t in turns]))
    return memory


def test_unmarked_rows_are_minilm(world: tuple[InMemoryRecordStore, Collections]) -> None:
    store, names = world
    _record(store, names, "alice", ["I moved to Lisbon"])
    assert UNMARKED == MINILM
    with pytest.raises(VectorModelMismatch) as info:
        check_collection(store, names.state, names.episodic, E5)
    message = info.value.message
    assert names.episodic in message and "made by onnx-minilm" in message and "configured for e5" in message
    assert "strata reindex" in message
    check_collection(store, names.state, names.episodic, MINILM)  # and now marked
    assert VectorMarks(store, names.state).of_collection(names.episodic) == MINILM


def test_an_empty_collection_takes_the_configured_model(world: tuple[InMemoryRecordStore, Collections]) -> None:
    store, names = world
    check_collection(store, names.state, names.semantic, E5)
    assert VectorMarks(store, names.state).of_collection(names.semantic) == E5
    with pytest.raises(VectorModelMismatch, match="made by e5"):
        check_collection(store, names.state, names.semantic, MINILM)


def test_reindex_one_tenant_then_all(world: tuple[InMemoryRecordStore, Collections]) -> None:
    store, names = world
    _record(store, names, "alice", ["I moved to Lisbon", "the deploy failed on a timeout"])
    _record(store, names, "bob", ["my cat is called Miso"])
    e5 = make_embedder(EmbeddingSettings(provider="e5"))
    report = reindex_store(store, names, e5, E5, tenant="alice")
    assert report.vectors["episodic"] == 2 and report.remaining == {names.episodic: ["bob"]}
    check_tenant(store, names.state, "alice", names.episodic, E5)
    with pytest.raises(VectorModelMismatch, match="tenant 'alice'"):
        check_tenant(store, names.state, "alice", names.episodic, MINILM)
    with pytest.raises(VectorModelMismatch):  # bob is still MiniLM's
        check_collection(store, names.state, names.episodic, E5)

    report = reindex_store(store, names, e5, E5)
    assert report.vectors["episodic"] == 1 and not report.remaining  # alice was done already
    check_collection(store, names.state, names.episodic, E5)
    check_tenant(store, names.state, "alice", names.episodic, E5)
    row = next(r for r in store.scan(names.episodic, tenant="bob") if r.kind == "turn")
    assert row.vector is not None
    np.testing.assert_allclose(row.vector, e5.embed([row.text])[0], atol=1e-5)
