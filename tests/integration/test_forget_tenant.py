"""Forgetting a whole tenant leaves nothing, by any path, after a restart too;
and nothing of another tenant goes with it. Real Ray, real milvus-lite."""

from __future__ import annotations

from typing import Any

import pytest

from strata.access.audit import AuditLog
from strata.errors import InvalidInput, NotFound
from strata.schema import LAYERS
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from tests.conftest import MilvusServer, settings_for
from tests.integration.layers import restart_layer_actors

#: Each test runs on milvus-lite and on a Milvus server (tests/conftest.py).
STORES = ("lite", "server")
pytestmark = pytest.mark.usefixtures("ray_local")

SECRET = "Zanzibar-Orchid"  # the content that must be gone


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    return settings_for(milvus)


async def _fill(client: InClusterClient) -> None:
    await client.record_turns("s1", [{"user": f"The vault phrase is {SECRET}.", "agent": "Noted."},
                                     {"user": "Unrelated chatter about lunch.", "agent": "ok"}])
    await client.add_working_items("s2", [{"role": "user", "content": f"Remember {SECRET} for later"}])
    await client.index_document(f"# Vault\n\n{SECRET} Systems uses Kafka for the vault queue.", doc_id="vault")
    await client.extract_skill(f"Open the {SECRET} vault", [{"command": "vault unseal --key-file /etc/vault/key"}])


async def _traces(client: InClusterClient) -> list[str]:
    """Everything any read path returns for the secret."""
    found: list[str] = []
    for weights in (None, {"dense": 1.0}, {"lexical": 1.0}, {"graph": 1.0}):
        hits = await client.search(SECRET, top_k=50, weights=weights)  # type: ignore[arg-type]
        found += [h.text for h in hits.hits if SECRET in h.text]
    for session in ("s1", "s2"):
        ctx = await client.build_context(f"what is {SECRET}?", session, task_type="planning", max_tokens=2000)
        found += [ctx.context] if SECRET in ctx.context else []
        working = await client.get_working(session)
        found += [i.content for i in working.items if SECRET in i.content]
    found += [s.description for s in (await client.find_skills(f"open the {SECRET} vault", min_success_rate=0)).skills]
    found += [d.doc_id for d in (await client.list_documents()).documents]
    try:
        await client.entity(f"{SECRET} Systems")
        found.append("entity")
    except NotFound:
        pass
    return found


async def test_forgetting_a_tenant_leaves_nothing_and_spares_the_others(settings: Any) -> None:
    doomed, other = InClusterClient("doomed", settings), InClusterClient("spared", settings)
    await _fill(doomed)
    await _fill(other)
    assert len(await _traces(doomed)) >= 6  # the check finds the secret by every path before

    removed = await doomed._flow.forget_tenant("doomed")
    assert set(removed) == set(LAYERS) and all(n > 0 for n in removed.values())
    assert await _traces(doomed) == []

    # restart every layer actor: nothing comes back from the store either
    await restart_layer_actors(settings)
    assert await _traces(doomed) == []
    store, names = open_store(settings)
    for collection in (names.episodic, names.semantic, names.procedural):
        assert store.scan(collection, tenant="doomed", with_vectors=False) == []
    left = store.scan(names.state, tenant="doomed", with_vectors=False)
    # Only version counters and the audit trail stay: no content, and versions are never reused.
    assert {r.kind for r in left} == {"version", "audit"} and all(SECRET not in str(r.payload) for r in left)

    assert len(await _traces(other)) >= 6
    with pytest.raises(InvalidInput):
        await doomed._flow.forget_tenant("system")


async def test_leaving_the_client_writes_the_audit_entries_it_still_holds(settings: Any) -> None:
    """Entries wait up to audit.flush_interval_s for their batch (60 s here: none is written in
    the background during the test); leaving ``async with`` the client writes them."""
    slow = settings.model_copy(update={"audit": settings.audit.model_copy(update={"flush_interval_s": 60.0})})
    async with InClusterClient("closing", slow) as client:
        await client.record_turn("s1", "a turn whose write is audited")
        held = client._flow._audit
        assert held is not None and held.pending == 1
    store, names = open_store(slow)
    entries, _ = AuditLog(store, names.state).page("closing")
    assert [(e.op, e.layer, e.record_id) for e in entries] == [("record_turns", "episodic", "s1")]
    assert held.pending == 0


async def test_every_change_is_in_the_audit_history_without_its_content(settings: Any) -> None:
    client = InClusterClient("audited", settings)
    await _fill(client)
    skill = (await client.find_skills(f"open the {SECRET} vault", min_success_rate=0)).skills[0]
    await client.record_outcome(skill.skill_id, True)
    await client.delete_document("vault")
    await client.forget_session("s1")
    history = await client._flow.audit("audited")
    ops = [(e.op, e.layer, e.record_id) for e in history.entries]
    assert ops[:4] == [("record_turns", "episodic", "s1"), ("add_working_items", "working", "s2"),
                       ("index_document", "semantic", "vault"), ("extract_skill", "procedural", skill.skill_id)]
    assert ("record_outcome", "procedural", skill.skill_id) in ops and ("delete_document", "semantic", "vault") in ops
    assert {("forget_session", "episodic", "s1"), ("forget_session", "working", "s1")} <= set(ops)
    assert all(e.key_id == "in-cluster" and e.version for e in history.entries)
    assert SECRET not in history.model_dump_json()
    assert (await client._flow.audit("someone-else")).entries == []
