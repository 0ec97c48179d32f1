"""The semantic layer's actors on a real local Ray instance and a real
milvus-lite server, through the in-cluster client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

from strata.errors import InvalidInput, NotFound, VersionConflict
from strata.layers import RetrievalPath
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.integration.layers import until_up

pytestmark = pytest.mark.usefixtures("ray_local")

#: Search weights that run one retrieval path each.
ONE_PATH_EACH: list[dict[RetrievalPath, float]] = [{"dense": 1}, {"lexical": 1}, {"graph": 1}]

GUIDE = """# Ingest pipeline guide

## Failures

When the uploader fails with ERR_CONN_RESET, the proxy closed an idle
connection. Set keepalive_timeout to 120 s on the proxy.

## Limits

The partner API answers HTTP 429 above 50 requests per second; the client
backs off exponentially.

## Dependencies

The uploader uses Kafka for its queue. Kafka depends on ZooKeeper in the old
clusters.
"""


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    return settings_for(
        milvus,
        actors={"semantic_shards": 2},
        semantic={"chunking": {"child_tokens": 48, "child_overlap": 8, "parent_tokens": 120, "parent_overlap": 10}},
    )


@pytest.fixture(scope="module")
def alice(settings: Any) -> InClusterClient:
    return InClusterClient("alice", settings)


async def test_index_search_and_versions(alice: InClusterClient) -> None:
    doc = await alice.index_document(GUIDE, doc_id="guide", title="Ingest guide", metadata={"team": "data"})
    assert (doc.status, doc.version, doc.title, doc.metadata) == ("ready", 1, "Ingest guide", {"team": "data"})
    assert doc.children and doc.parents and doc.strategy == "parent_child"
    found = await alice.search("uploader connection reset", layers=["semantic"], top_k=3)
    top = found.hits[0]
    assert top.layer == "semantic" and "ERR_CONN_RESET" in top.text
    assert top.source is not None and top.source.doc_id == "guide" and top.source.title == "Ingest guide"
    assert GUIDE[top.source.start : top.source.end] == top.text
    exact = await alice.search("HTTP 429", layers=["semantic"], top_k=1, weights={"lexical": 1})
    assert "429" in exact.hits[0].text and set(exact.hits[0].ranks) == {"lexical"}

    again = await alice.index_document(GUIDE + "\nRetries are capped at 5.", doc_id="guide", expected_version=1)
    assert again.version == 2
    with pytest.raises(VersionConflict) as info:
        await alice.index_document(GUIDE, doc_id="guide", expected_version=1)
    assert info.value.current_version == 2
    fetched = await alice.get_document("guide", include_text=True)
    assert fetched.version == 2 and fetched.text is not None and fetched.text.rstrip().endswith("capped at 5.")
    entity = await alice.entity("kafka")
    assert entity.name == "Kafka" and entity.sources >= 1


async def test_background_indexing_reports_progress(alice: InClusterClient) -> None:
    text = "\n\n".join(f"## Part {n}\n\nThe service number {n} writes its logs to bucket logs-{n}." for n in range(60))
    submitted = await alice.index_document(text, doc_id="big", wait=False)
    assert submitted.status in ("indexing", "ready")
    seen: list[str] = []
    for _ in range(600):
        doc = await alice.get_document("big")
        seen.append(doc.status)
        if doc.status == "ready":
            break
        assert doc.progress is not None
        await asyncio.sleep(0.05)
    assert doc.status == "ready" and doc.version == 1 and doc.children
    hits = await alice.search("bucket logs-42", layers=["semantic"], weights={"lexical": 1}, top_k=1)
    assert "logs-42" in hits.hits[0].text


async def test_reindex_is_atomic_for_concurrent_searches(alice: InClusterClient) -> None:
    def version_text(marker: str) -> str:
        return "\n\n".join(
            f"## Section {n}\n\nParagraph {n} of the {marker} edition, marker {marker}." for n in range(40)
        )

    await alice.index_document(version_text("alphamark"), doc_id="atomic")
    mixed: list[set[str]] = []
    stop = False

    async def searcher() -> None:
        while not stop:
            found = await alice.search("edition marker paragraph", layers=["semantic"], top_k=20,
                                       weights={"lexical": 1}, doc_ids=["atomic"])
            markers = {m for h in found.hits for m in ("alphamark", "betamark") if m in h.text}
            mixed.append(markers)

    task = asyncio.ensure_future(searcher())
    await alice.index_document(version_text("betamark"), doc_id="atomic")
    await asyncio.sleep(0.2)
    stop = True
    await task
    assert mixed and all(len(m) <= 1 for m in mixed)
    assert mixed[-1] == {"betamark"}


async def test_delete_leaves_nothing_in_any_store_or_path(settings: Any, alice: InClusterClient) -> None:
    await alice.index_document(GUIDE, doc_id="doomed", title="Doomed guide")
    deleted = await alice.delete_document("doomed")
    assert deleted.removed > 0
    store, names = open_store(settings)
    assert store.scan(names.semantic, tenant="alice", session="doomed") == []
    for weights in [*ONE_PATH_EACH, None]:
        found = await alice.search("ZooKeeper Kafka ERR_CONN_RESET", layers=["semantic"], top_k=20, weights=weights)
        assert all(h.source is None or h.source.doc_id != "doomed" for h in found.hits)
    with pytest.raises(NotFound):
        await alice.get_document("doomed")
    with pytest.raises(NotFound):
        await alice.delete_document("doomed")
    # ... and after the actors restart, from the durable rows:
    router = LayerRouter(settings)
    for handle in router.all_handles("semantic"):
        ray.kill(handle, no_restart=False)
    await asyncio.sleep(1.0)
    for weights in ONE_PATH_EACH:
        found = await _retrying(
            lambda w=weights: alice.search("ZooKeeper Kafka", layers=["semantic"], top_k=20, weights=w)
        )
        assert all(h.source is None or h.source.doc_id != "doomed" for h in found.hits)
    kept = await alice.get_document("guide")
    assert kept.version == 2  # restarted actors reload the other documents, versions intact
    assert (await alice.entity("ZooKeeper")).sources >= 1


async def test_tenants_and_bad_input(settings: Any, alice: InClusterClient) -> None:
    bob = InClusterClient("bob", settings)
    assert (await bob.search("ERR_CONN_RESET", layers=["semantic"])).hits == []
    with pytest.raises(NotFound):
        await bob.get_document("guide")
    with pytest.raises(NotFound):
        await bob.delete_document("guide")
    with pytest.raises(InvalidInput):
        await bob.get_document('guide" or 1==1')
    listing = await alice.list_documents(limit=2)
    assert listing.total >= 3 and len(listing.documents) == 2 and listing.next_after is not None
    rest = await alice.list_documents(after=listing.next_after)
    assert not {d.doc_id for d in rest.documents} & {d.doc_id for d in listing.documents}


async def test_context_for_debugging_reads_semantic_memory(settings: Any, alice: InClusterClient) -> None:
    # The other layers' actors start here: let them come up first, or the first call may pass
    # the layers' 2 s deadline on a loaded machine (seen once in CI: working memory missing).
    await asyncio.gather(*(until_up(h) for h in LayerRouter(settings).every_handle()))
    ctx = await alice.build_context("the uploader fails with ERR_CONN_RESET, what now?", "s1", task_type="debugging",
                                    max_tokens=600)
    assert ctx.token_count <= 600
    semantic = next(s for s in ctx.sections if s.layer == "semantic")
    assert semantic.items and "keepalive_timeout" in ctx.context
    assert ctx.missing == {} and ctx.budgets["semantic"] > 0


async def _retrying(call: Any, tries: int = 20) -> Any:
    for attempt in range(tries):
        try:
            return await call()
        except Exception:
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.5)
