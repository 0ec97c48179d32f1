"""A cold tenant's store reads run at once, not one after another (actors/shard.py ``_load``).

On a Milvus server every one of them is a strong read that waits for the server's next time
tick (~200 ms by default): a cold context cost three ticks in the episodic layer and two in the
working layer (measured 570-600 ms against one), while milvus-lite answers at once and
hides it. Here the reads meet at a rendezvous: each waits until all the reads a cold load
makes are in flight together, so reads made one after another never get past it. No Ray: the
real shard classes over the in-memory reference store, with the packaged embedding model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from strata.config import StrataSettings
from strata.providers.embedder import make_embedder
from strata.store.layout import Collections
from strata.store.records import InMemoryRecordStore, Record
from strata.store.versions import VersionStore
from strata.working.sessions import WorkingSessions
from strata_actors.episodic import EpisodicShard
from strata_actors.semantic import SemanticShard
from strata_actors.shard import LayerShard
from strata_actors.working import WorkingShard

T = "tenant-a"
QUESTION = "where did Ann hike?"
_S = TypeVar("_S", bound=LayerShard[Any])
SETTINGS = StrataSettings.from_dict({})


class _Rendezvous(InMemoryRecordStore):
    """Once armed with ``parties``, the next that many reads (``get`` or ``scan``) each wait
    until all of them are in flight; reads made one after another break the barrier."""

    def __init__(self) -> None:
        super().__init__()
        self._barrier: threading.Barrier | None = None
        self._left = 0
        self._lock_arm = threading.Lock()
        self.reads: list[str] = []

    def arm(self, parties: int) -> None:
        self._barrier, self._left = threading.Barrier(parties, timeout=5), parties
        self.reads.clear()

    def _meet(self, what: str) -> None:
        with self._lock_arm:
            barrier = self._barrier if self._left > 0 else None
            self._left -= 1
            self.reads.append(what)
        if barrier is not None:
            barrier.wait()

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]:
        self._meet(f"get {pks[0].split('/')[1]}")
        return super().get(collection, tenant=tenant, pks=pks)

    def scan(self, collection: str, **kwargs: Any) -> list[Record]:
        self._meet(f"scan {collection}")
        return super().scan(collection, **kwargs)


def _backend(store: _Rendezvous) -> Any:
    collections = Collections.for_settings(SETTINGS)
    for name in (collections.state, collections.episodic, collections.semantic):
        store.ensure_collection(name, dim=collections.dim)

    async def backend(self: Any) -> Any:
        return store, collections, VersionStore(store, collections.state)

    return backend


@pytest.fixture
def store() -> _Rendezvous:
    return _Rendezvous()


@pytest.fixture
def shard(store: _Rendezvous, monkeypatch: pytest.MonkeyPatch) -> Callable[[type[_S]], _S]:
    """A new shard of the class given over ``store``: called twice, a writer, then the same
    shard restarted (the tenant in the store only)."""

    def make(cls: type[_S]) -> _S:
        monkeypatch.setattr(cls, "_backend", _backend(store))
        return cls(SETTINGS.model_dump(mode="json"), 0)

    return make


def _question_vector() -> Any:
    return make_embedder(SETTINGS.embedding).embed_query([QUESTION])[0]


async def test_a_cold_episodic_search_reads_model_mark_rows_and_version_at_once(
    store: _Rendezvous, shard: Callable[[type[EpisodicShard]], EpisodicShard]
) -> None:
    turns = [{"user": f"I hiked the ridge trail number {n} with my sister", "speaker": "Ann"} for n in range(5)]
    await shard(EpisodicShard).record_turns(T, "s1", turns, now=datetime(2026, 5, 1, tzinfo=UTC))
    vector = _question_vector()

    cold = shard(EpisodicShard)
    store.arm(4)
    found = await cold.search(T, query=QUESTION, vector=vector, top_k=3)
    names = Collections.for_settings(SETTINGS)
    # The fourth: the tenant's forget tombstones (actors/forgetting.py), read beside the rest.
    assert sorted(store.reads[:4]) == [
        "get vector_model", "get version", f"scan {names.episodic}", f"scan {names.state}"]
    assert len(found["hits"]) == 3 and found["version"] == 1


async def test_a_cold_working_session_reads_its_rows_and_version_at_once(
    store: _Rendezvous, shard: Callable[[type[WorkingShard]], WorkingShard]
) -> None:
    await shard(WorkingShard).add_items(T, "s1", [{"role": "user", "content": f"note {n}"} for n in range(3)])

    cold = shard(WorkingShard)
    store.arm(3)
    view = await cold.get(T, "s1", budget_tokens=200)
    state = Collections.for_settings(SETTINGS).state
    assert sorted(store.reads[:3]) == ["get version", f"scan {state}", f"scan {state}"]  # rows, tombstones
    assert [m["content"] for m in view["messages"]] == ["note 0", "note 1", "note 2"] and view["version"] == 1


async def test_a_cold_semantic_search_reads_model_mark_documents_and_chunks_at_once(
    store: _Rendezvous, shard: Callable[[type[SemanticShard]], SemanticShard]
) -> None:
    text = "# Trails\n\nAnn hiked the ridge trail in May with her sister. " * 10
    await shard(SemanticShard).index_document(T, {"text": text, "doc_id": "trails", "title": "Trails"})
    vector = _question_vector()

    cold = shard(SemanticShard)
    store.arm(4)
    found = await cold.search(T, query=QUESTION, vector=vector, top_k=2)
    names = Collections.for_settings(SETTINGS)
    assert sorted(store.reads[:4]) == [
        "get vector_model", f"scan {names.semantic}", f"scan {names.semantic}", f"scan {names.state}"]
    assert found["hits"] and found["hits"][0]["source"]["doc_id"] == "trails"


async def test_a_cold_session_with_expired_items_is_read_without_waiting_on_its_own_lock(
    shard: Callable[[type[WorkingShard]], WorkingShard],
) -> None:
    """The purge of expired items takes the tenant's lock unless the task asking holds it:
    run from a task of its own beside the version read, it waited for the lock its own
    caller held (a hang seen in tests/integration/test_ttl.py)."""
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "gone soon", "ttl_s": 0.05},
        {"role": "user", "content": "stays"},
    ]
    await shard(WorkingShard).add_items(T, "s1", items)
    await asyncio.sleep(0.2)

    view = await asyncio.wait_for(shard(WorkingShard).get(T, "s1", budget_tokens=200), timeout=10)
    assert [m["content"] for m in view["messages"]] == ["stays"]


async def test_a_warm_sessions_messages_are_read_on_the_loop_with_no_store_read(
    store: _Rendezvous, shard: Callable[[type[WorkingShard]], WorkingShard], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A context reads the session's messages on every call: once the session is in memory
    that is a dict lookup, not a store read nor a hop to a worker thread and back; and the
    messages come without the items, which a context does not read."""
    working = shard(WorkingShard)
    await working.add_items(T, "s1", [{"role": "user", "content": f"note {n}"} for n in range(3)])
    whole = await working.get(T, "s1", budget_tokens=200)
    threads: list[str] = []
    real = WorkingSessions.session

    def session(self: WorkingSessions, session_id: str) -> Any:
        threads.append(threading.current_thread().name)
        return real(self, session_id)

    monkeypatch.setattr(WorkingSessions, "session", session)
    store.reads.clear()
    found = await working.messages(T, "s1", budget_tokens=200)
    assert found == {"messages": whole["messages"], "version": whole["version"]}
    assert store.reads == [] and threads and set(threads) == {threading.main_thread().name}
