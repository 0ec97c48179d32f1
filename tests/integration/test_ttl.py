"""TTL: an expired item is never returned from the moment it expires, by any path,
in any layer, after a restart too; the sweeper purges it from the store without
anyone calling. Real Ray, real milvus-lite, real embeddings."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from strata.errors import NotFound
from strata.schema import LAYERS
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.integration.layers import restart_layer_actors

#: Each test runs on milvus-lite and on a Milvus server (tests/conftest.py).
STORES = ("lite", "server")
pytestmark = pytest.mark.usefixtures("ray_local")

GONE = "Tamarind-Heron"  # written with a short TTL
KEPT = "Juniper-Walrus"  # written beside it, without one
SHORT_S = 8.0


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    return settings_for(
        milvus,
        ttl={"sweep_interval_s": 1.0, "tenants": {"retained": {"episodic": SHORT_S}}},
        episodic={"raw_window": 2, "summary_threshold": 2},
    )


async def _fill(client: InClusterClient, ttl_s: float | None) -> tuple[float, float]:
    """The marker in every layer with ``ttl_s``, the control without; returns when writing started and ended."""
    start = time.time()
    await client.record_turns("s1", [
        {"user": f"The {GONE} code opens the shed.", "agent": "Noted.", "ttl_s": ttl_s},
        {"user": f"The {KEPT} code opens the garage.", "agent": "Noted too."},
    ])
    await client.add_working_items("s2", [{"role": "user", "content": f"Remember {GONE} tonight", "ttl_s": ttl_s},
                                          {"role": "user", "content": f"Remember {KEPT} tomorrow"}])
    await client.index_document(f"# Shed\n\n{GONE} Labs stores its kayaks in the shed.", doc_id="shed", ttl_s=ttl_s)
    await client.index_document(f"# Garage\n\n{KEPT} Labs stores its bikes in the garage.", doc_id="garage")
    await client.extract_skill(f"Open the {GONE} shed", [{"command": "shed unlock --code-file /etc/shed/code"}],
                               ttl_s=ttl_s)
    await client.extract_skill(f"Wax the {KEPT} surfboard", [{"command": "board wax --side bottom --coats 2"}])
    return start, time.time()


async def _found(client: InClusterClient, marker: str) -> list[str]:
    """Where any read path returns ``marker``."""
    found: list[str] = []
    for weights in (None, {"dense": 1.0}, {"lexical": 1.0}, {"graph": 1.0}):
        hits = await client.search(marker, top_k=50, weights=weights)  # type: ignore[arg-type]
        found += [f"search {weights}: {h.layer}" for h in hits.hits if marker in h.text]
    for session, task in (("s1", "planning"), ("s2", "coding")):
        ctx = await client.build_context(f"what about {marker}?", session, task_type=task, max_tokens=2000)
        found += [f"context {task}"] if marker in ctx.context else []
        working = await client.get_working(session)
        found += [f"working {session}"] if any(marker in i.content for i in working.items) else []
    skills = await client.find_skills(f"open the {marker} shed", min_success_rate=0)
    in_skills = any(marker in s.skill_name + s.description + " ".join(s.tasks) for s in skills.skills)
    found += ["skills"] if in_skills else []
    listed = (await client.find_skills()).skills
    found += ["skill list"] if any(marker in " ".join(s.tasks) for s in listed) else []
    docs = (await client.list_documents()).documents
    found += ["documents"] if any(marker in (d.title or "") + str(d.metadata) for d in docs) else []
    for doc in docs:
        text = (await client.get_document(doc.doc_id, include_text=True)).text or ""
        found += [f"document {doc.doc_id}"] if marker in text else []
    try:
        await client.entity(f"{marker} Labs")
        found.append("entity")
    except NotFound:
        pass
    return found


async def _session_state(settings: Any, tenant: str) -> dict[str, Any]:
    state: dict[str, Any] = await LayerRouter(settings).handle("episodic", tenant).session_state.remote(tenant, "s1")
    return state


async def _sleep_until(when: float) -> None:
    await asyncio.sleep(max(when - time.time(), 0) + 0.2)


async def test_expired_items_are_never_returned_and_the_rest_stays(settings: Any) -> None:
    await _fill(InClusterClient("ttl-warm", settings), ttl_s=None)  # models loaded, actors up
    client = InClusterClient("ttl-a", settings)
    start, written = await _fill(client, ttl_s=SHORT_S)
    seen = await _found(client, GONE)
    assert time.time() < start + SHORT_S, "too slow to look before the first item expired: raise SHORT_S"
    assert len(seen) >= 8, seen  # every path sees it before it expires
    before = await client.get_working("s2")
    assert [i.expires_at for i in before.items if GONE in i.content] != [None], before.items
    assert all(i.expires_at is None for i in before.items if KEPT in i.content)

    await _sleep_until(written + SHORT_S)
    assert await _found(client, GONE) == []
    kept = await _found(client, KEPT)
    assert {"skills", "document garage", "working s1", "working s2"} <= set(kept)
    assert (await client.get_working("s2")).version > before.version  # the purge is a change
    with pytest.raises(NotFound):
        await client.get_document("shed")
    history = await client._flow.audit("ttl-a", limit=1000)
    assert {e.layer for e in history.entries if e.op == "expire"} == set(LAYERS)
    assert all(e.key_id == "ttl" for e in history.entries if e.op == "expire")


async def test_sweeper_purges_the_store_without_any_call(settings: Any) -> None:
    client = InClusterClient("ttl-b", settings)
    # Twice the short TTL: the rows must still be there when the check below first looks, and on a
    # loaded machine (two xdist workers) writing them once took longer than SHORT_S.
    ttl_s = 2 * SHORT_S
    started, written = await _fill(client, ttl_s=ttl_s)
    store, names = open_store(settings)

    def rows_with(marker: str) -> int:
        collections = (names.episodic, names.semantic, names.procedural, names.state)
        return sum(marker in r.text or marker in str(r.payload)
                   for c in collections for r in store.scan(c, tenant="ttl-b", with_vectors=False))

    assert time.time() < started + ttl_s, "too slow to look before the first row expired: raise ttl_s"
    assert rows_with(GONE) >= 4
    # Nobody calls for ttl-b from now on: only the sweep (every 1 s) can remove the rows.
    deadline = written + ttl_s + 10
    while rows_with(GONE) and time.time() < deadline:
        await asyncio.sleep(0.5)
    assert rows_with(GONE) == 0
    assert rows_with(KEPT) >= 4


async def test_expiry_holds_across_a_restart_and_summaries_follow_their_turns(settings: Any) -> None:
    client = InClusterClient("ttl-c", settings)
    turns: list[dict[str, Any]] = [{"user": f"Filler turn {n} about the weather.", "agent": "ok"} for n in range(4)]
    turns[1] = {"user": f"The {GONE} code opens the shed.", "agent": "Noted.", "ttl_s": SHORT_S + 2}
    await client.record_turns("s1", turns)
    start = time.time()
    await client.record_turns("s1", [{"user": f"Later turn {n}.", "agent": "ok"} for n in range(3)])
    assert await client._flow.wait_for_summaries("ttl-c") == 0
    state = await _session_state(settings, "ttl-c")
    assert any(GONE in s["summary"] for s in state["summaries"])  # a summary was made from it

    await restart_layer_actors(settings)  # killed before it expires; it expires while they restart
    await _sleep_until(start + SHORT_S + 2)
    assert await _found(client, GONE) == []
    assert await client._flow.wait_for_summaries("ttl-c") == 0
    state = await _session_state(settings, "ttl-c")
    assert state["summaries"] and not any(GONE in s["summary"] for s in state["summaries"])
    summarised = {t for s in state["summaries"] for t in s["turn_ids"]}
    assert len(summarised) >= 4  # what remains is summarised again


@pytest.mark.stores("lite")  # not a property of the store
async def test_configured_ttl_is_a_ceiling_per_tenant(settings: Any) -> None:
    retained, other = InClusterClient("retained", settings), InClusterClient("unretained", settings)
    start = time.time()
    for client in (retained, other):
        # An item's own TTL cannot lengthen the tenant's retention.
        await client.record_turns("s1", [{"user": f"The {GONE} code opens the shed.", "agent": "ok", "ttl_s": 3600}])
    out = await retained.record_turns("s1", [{"user": "Another turn.", "agent": "ok"}])
    assert out.turns[0].expires_at is not None and out.turns[0].expires_at.timestamp() <= start + SHORT_S + 5
    await _sleep_until(start + SHORT_S + 1)
    episodic = {"layers": ["episodic"], "top_k": 20}
    assert not [h for h in (await retained.search(GONE, **episodic)).hits if GONE in h.text]  # type: ignore[arg-type]
    assert [h for h in (await other.search(GONE, **episodic)).hits if GONE in h.text]  # type: ignore[arg-type]
