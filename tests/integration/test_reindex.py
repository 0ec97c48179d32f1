"""Switching embedders on a populated tenant: the layer actors refuse the store until
``strata reindex`` has embedded its vectors again, then search with the new model.
Real Ray actors, real milvus-lite, real MiniLM and e5."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from strata.config import EmbeddingSettings
from strata.errors import VectorModelMismatch
from strata.reindex import reindex
from strata.store.layout import open_store
from strata.store.vector_models import VectorMarks, VectorModel
from strata_actors.client import InClusterClient
from tests.conftest import MilvusServer, settings_for

pytestmark = pytest.mark.usefixtures("ray_local")

TURNS = [
    {"user": "I moved to Lisbon last spring, near the river.", "agent": "Noted: you live in Lisbon."},
    {"user": "The deploy failed again with a database timeout.", "agent": "Let's raise the pool size."},
    {"user": "My sister is a nurse in Shanghai.", "agent": "She works at a hospital there?"},
]


async def test_switching_to_e5_needs_a_reindex(milvus: MilvusServer) -> None:
    minilm = settings_for(milvus)
    written = await InClusterClient("alice", minilm).record_turns("s1", TURNS)
    moved = written.turns[0].turn_id

    # The same store with e5, served by actors of their own (another Ray namespace).
    e5 = minilm.model_copy(update={
        "embedding": EmbeddingSettings(provider="e5"),
        "ray": minilm.ray.model_copy(update={"namespace": "test-" + uuid.uuid4().hex[:8]}),
    })
    client = InClusterClient("alice", e5)
    with pytest.raises(VectorModelMismatch) as info:
        await client.search("where do I live?", layers=["episodic"], top_k=3)
    message: Any = info.value.message
    assert "made by onnx-minilm" in message and "configured for e5" in message and "strata reindex" in message

    report = reindex(e5)
    assert report.vectors["episodic"] == len(TURNS) and not report.remaining
    store, names = open_store(e5)
    assert VectorMarks(store, names.state).of_collection(names.episodic) == VectorModel.of(e5.embedding)

    found = await client.search("where do I live?", layers=["episodic"], top_k=3)
    assert found.hits and found.hits[0].id.endswith(moved)
    # And the MiniLM stack is refused now.
    with pytest.raises(VectorModelMismatch, match="made by e5"):
        await InClusterClient("alice", minilm.model_copy(update={
            "ray": minilm.ray.model_copy(update={"namespace": "test-" + uuid.uuid4().hex[:8]}),
        })).search("where do I live?", layers=["episodic"])
