"""Forgetting one item (a session, a document, a skill) leaves nothing of it, by any
read path, after an actor restart too; the tenant's other items and another
tenant's copies of the same items stay. Real Ray, real milvus-lite."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from strata.errors import NotFound
from strata.ids import SYSTEM_TENANT
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from tests.conftest import MilvusServer, settings_for
from tests.integration.layers import restart_layer_actors

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.asyncio(loop_scope="module")]

# One distinctive marker per item; the first of each pair is forgotten, the second is its control.
SESSION, SESSION_KEPT = "Quillfeather-Marmot", "Brindlewick-Heron"
DOC, DOC_KEPT = "Vexlamoor-Quasar", "Tollenbridge-Ocelot"
SKILL, SKILL_KEPT = "Jorvandel-Pylon", "Scarrowmint-Lynx"
FORGOTTEN = (SESSION, DOC, SKILL)
KEPT = (SESSION_KEPT, DOC_KEPT, SKILL_KEPT)
MARKERS = FORGOTTEN + KEPT
GONE = "<not found>"  # what a path that answered NotFound is noted as having seen

SESSIONS = {SESSION: "s-doomed", SESSION_KEPT: "s-kept"}
DOCS = {DOC: "doc-doomed", DOC_KEPT: "doc-kept"}
TOPICS = {DOC: "ledger", DOC_KEPT: "audit"}
TASKS = {SKILL: f"Rotate the {SKILL} signing certificates", SKILL_KEPT: f"Compact the {SKILL_KEPT} search index"}
TRACES = {
    SKILL: [{"command": "certctl rotate --issuer jorvandel-pylon --days 90"},
            {"command": "certctl verify --issuer jorvandel-pylon"}],
    SKILL_KEPT: [{"command": "indexctl compact --index scarrowmint-lynx"},
                 {"command": "indexctl stats --index scarrowmint-lynx"}],
}
QUERIES = {
    **{m: f"What is the locker code word {m}?" for m in SESSIONS},
    **{m: f"What does {m} Systems use for the {TOPICS[m]} queue?" for m in DOCS},
    **TASKS,
}
WEIGHTS: dict[str, Any] = {"fused": None, "dense": {"dense": 1.0}, "lexical": {"lexical": 1.0}, "graph": {"graph": 1.0}}
# One task type per distinct policy of configs/default.yaml (context.policies), besides working memory:
# episodic; episodic + semantic; semantic + procedural (debugging and coding read the same as deployment).
TASK_TYPES = ("general", "planning", "deployment")
ENTITIES = (f"{DOC} Systems", DOC, f"{DOC_KEPT} Systems", DOC_KEPT, "Kafka")
TURNS = 6  # raw_window 2, summary_threshold 2: two summaries per session

Seen = dict[str, set[str]]


def _markers_in(text: str) -> set[str]:
    """Markers any of whose words occur in ``text`` (summaries' key topics split them)."""
    low = text.lower()
    return {m for m in MARKERS if any(word in low for word in m.lower().split("-"))}


def _dump(value: Any) -> str:
    if value is None:
        return ""
    if hasattr(value, "model_dump_json"):
        return str(value.model_dump_json())
    return json.dumps(value, default=str)


async def _or_gone(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except NotFound:
        return GONE


@dataclass
class Tenant:
    name: str
    client: InClusterClient
    skills: dict[str, str]  # marker -> skill id

    def episodic(self) -> Any:
        return self.client._flow.router.handle("episodic", self.name)


async def _fill(tenant: str, settings: Any) -> Tenant:
    client = InClusterClient(tenant, settings)
    for marker, session in SESSIONS.items():
        await client.record_turns(session, [
            {"user": f"Turn {n}: my locker code word is {marker}; remember {marker}.",
             "agent": f"Noted, the code word {marker} is stored (turn {n})."} for n in range(TURNS)
        ])
        await client.add_working_items(session, [{"role": "user", "content": f"Keep {marker} at hand for later"}])
    for marker, doc_id in DOCS.items():
        await client.index_document(
            f"# {marker} {TOPICS[marker]}\n\n{marker} Systems uses Kafka for the {TOPICS[marker]} queue. "
            f"The {marker} {TOPICS[marker]} settles its batches.", doc_id=doc_id, title=f"{marker} handbook",
        )
    skills: dict[str, str] = {}
    for marker, task in TASKS.items():
        skill = await client.extract_skill(task, TRACES[marker], outcome=f"{marker} done")
        assert not skill.merged
        await client.record_outcome(skill.skill_id, True, notes=f"it worked for {marker}")
        skills[marker] = skill.skill_id
    assert len(set(skills.values())) == 2
    deadline = time.monotonic() + 30
    while await client.wait_for_summaries():
        assert time.monotonic() < deadline, "summaries not made in time"
        await asyncio.sleep(0.1)
    return Tenant(tenant, client, skills)


async def _sightings(t: Tenant) -> Seen:
    """Which markers every read path returns (GONE: it answered NotFound)."""
    client = t.client
    seen: Seen = {}
    slots = asyncio.Semaphore(8)

    async def limited(call: Awaitable[Any]) -> Any:
        async with slots:
            return await call

    def note(path: str, *results: Any) -> None:
        found = seen.setdefault(path, set())
        for result in results:
            found.update({GONE} if result is GONE else _markers_in(_dump(result)))
            # A layer left out of a result (e.g. past its context deadline) would hide what it holds.
            found.update(f"<{layer} missing>" for layer in getattr(result, "missing", {}) if layer != "working")

    async def by_query(query: str) -> list[tuple[str, Any]]:
        calls: list[tuple[str, Awaitable[Any]]] = [
            (f"search[{name}]", client.search(query, top_k=50, weights=w)) for name, w in WEIGHTS.items()
        ]
        for session in SESSIONS.values():
            calls.append((f"search[session]@{session}", client.search(query, top_k=50, session_id=session)))
            calls += [(f"context[{task}]@{session}", client.build_context(query, session, task_type=task,
                                                                          max_tokens=4000)) for task in TASK_TYPES]
            calls.append((f"context[all layers]@{session}", client.build_context(
                query, session, layers=["episodic", "semantic", "procedural"], max_tokens=4000)))
        calls.append(("find_skills(task)", client.find_skills(query, min_success_rate=0)))
        results = await asyncio.gather(*(limited(c) for _, c in calls))
        return [(path, r) for (path, _), r in zip(calls, results, strict=True)]

    for found in await asyncio.gather(*(by_query(q) for q in QUERIES.values())):
        for path, result in found:
            note(path, result)
    for session in SESSIONS.values():
        note(f"working@{session}", await client.get_working(session))
        note(f"episodic state@{session}", await t.episodic().session_state.remote(t.name, session))
    note("documents", await client.list_documents())
    for doc_id in DOCS.values():
        note(f"document {doc_id}", await _or_gone(client.get_document(doc_id, include_text=True)))
    for name in ENTITIES:  # the actor's whole answer, incoming relations included
        note(f"entity {name}", await _or_gone(client._flow.entity(t.name, name)))
    note("skills", await client.find_skills())
    for marker, skill_id in t.skills.items():
        note(f"skill {marker}", await _or_gone(client.get_skill(skill_id)))
        note(f"skill history {marker}", await _or_gone(client.skill_history(skill_id)))
    note("audit", await client.audit(limit=1000))
    return seen


def _homes(session: str, doc: str, skill: str) -> dict[str, set[str]]:
    """Paths that must see each item while it exists (so the checks can fail)."""
    sid, doc_id = SESSIONS[session], DOCS[doc]
    everywhere = {f"search[{name}]" for name in WEIGHTS}
    return {
        session: everywhere | {f"search[session]@{sid}", f"working@{sid}", f"episodic state@{sid}",
                               *(f"context[{task}]@{s}" for task in ("general", "planning", "all layers")
                                 for s in SESSIONS.values())},
        doc: everywhere | {"documents", f"document {doc_id}", f"entity {doc} Systems", f"entity {doc}", "entity Kafka",
                           *(f"context[{task}]@{s}" for task in ("planning", "deployment", "all layers")
                             for s in SESSIONS.values())},
        skill: {"search[fused]", "find_skills(task)", "skills", f"skill {skill}", f"skill history {skill}",
                *(f"context[{task}]@{s}" for task in ("deployment", "all layers") for s in SESSIONS.values())},
    }


HOMES = _homes(SESSION, DOC, SKILL) | _homes(SESSION_KEPT, DOC_KEPT, SKILL_KEPT)


def _assert_all_layers_answered(seen: Seen) -> None:
    assert {path: sorted(f for f in found if f.endswith(" missing>")) for path, found in seen.items()
            if any(f.endswith(" missing>") for f in found)} == {}


def _assert_seen_at_home(seen: Seen, markers: tuple[str, ...]) -> None:
    _assert_all_layers_answered(seen)
    missing = {m: sorted(p for p in HOMES[m] if m not in seen.get(p, set())) for m in markers}
    assert {m: paths for m, paths in missing.items() if paths} == {}


def _assert_forgotten(before: Seen, after: Seen) -> None:
    _assert_all_layers_answered(after)
    leaks = {path: sorted(found & set(FORGOTTEN)) for path, found in after.items() if found & set(FORGOTTEN)}
    assert leaks == {}
    # Controls are seen wherever they were seen before.
    lost = {path: sorted((before[path] & set(KEPT)) - after[path]) for path in before
            if (before[path] & set(KEPT)) - after[path]}
    assert lost == {}
    for path in (f"skill {SKILL}", f"skill history {SKILL}", f"document {DOCS[DOC]}", f"entity {DOC} Systems",
                 f"entity {DOC}"):
        assert after[path] == {GONE}, path
    for path in (f"skill {SKILL_KEPT}", f"skill history {SKILL_KEPT}", f"document {DOCS[DOC_KEPT]}",
                 f"entity {DOC_KEPT} Systems", "entity Kafka"):
        assert GONE not in after[path], path


@dataclass
class World:
    settings: Any
    acme: Tenant  # forgets one of each
    globex: Tenant  # the same items, untouched
    before: Seen
    after: Seen
    other_before: Seen
    other_after: Seen


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    # Summaries after a few turns; a context layer deadline no loaded 2-CPU machine misses
    # (a layer left out would hide its items: _sightings notes it as "<layer missing>").
    return settings_for(milvus, episodic={"raw_window": 2, "summary_threshold": 2}, context={"layer_timeout_s": 30.0})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(settings: Any) -> World:
    acme, globex = await _fill("acme", settings), await _fill("globex", settings)
    for t in (acme, globex):
        for marker, session in SESSIONS.items():
            state = await t.episodic().session_state.remote(t.name, session)
            assert len(state["summaries"]) == (TURNS - 2) // 2 and marker in json.dumps(state["summaries"])
    before, other_before = await _sightings(acme), await _sightings(globex)

    forgot = await acme.client.forget_session(SESSIONS[SESSION])
    assert set(forgot.removed) == {"working", "episodic"} and all(forgot.removed.values())
    assert (await acme.client.delete_document(DOCS[DOC])).removed > 0
    assert (await acme.client.delete_skill(acme.skills[SKILL])).removed >= 3  # the skill and two history rows
    return World(settings, acme, globex, before, await _sightings(acme), other_before, await _sightings(globex))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def restarted(world: World) -> tuple[Seen, Seen]:
    """Every layer actor killed and restarted: their state comes back from the store only."""
    handles = await restart_layer_actors(world.settings)
    assert [(await h.ping.remote())["tenants_loaded"] for h in handles] == [0] * len(handles)  # memory is gone
    return await _sightings(world.acme), await _sightings(world.globex)


async def test_every_path_sees_every_item_before(world: World) -> None:
    """The checks can fail: before forgetting, each item is seen by each of its paths, in both tenants."""
    _assert_seen_at_home(world.before, MARKERS)
    _assert_seen_at_home(world.other_before, MARKERS)
    assert world.before["audit"] == world.other_before["audit"] == set()  # the audit never holds content


async def test_no_path_finds_forgotten_items(world: World) -> None:
    """Right after forgetting: no search, context, listing, get or history returns a forgotten item;
    gets of the forgotten document, skill and the document's own entities answer NotFound."""
    _assert_forgotten(world.before, world.after)
    assert world.after[f"working@{SESSIONS[SESSION]}"] == set()
    assert world.after[f"episodic state@{SESSIONS[SESSION]}"] == set()


async def test_still_nothing_after_restart(world: World, restarted: tuple[Seen, Seen]) -> None:
    """After every layer actor restarts (state reloaded from Milvus), the same holds."""
    after_restart, _ = restarted
    _assert_forgotten(world.before, after_restart)
    state = await world.acme.episodic().session_state.remote("acme", SESSIONS[SESSION])
    assert (state["window"], state["summaries"], state["turns"]) == ([], [], 0)
    assert (await world.acme.client.get_working(SESSIONS[SESSION])).items == []


async def test_controls_and_other_tenant_intact(world: World, restarted: tuple[Seen, Seen]) -> None:
    """The tenant's control items are still seen at all their paths, and the other tenant,
    which forgot nothing, sees exactly what it saw before, before and after the restart."""
    after_restart, other_after_restart = restarted
    _assert_seen_at_home(world.after, KEPT)
    _assert_seen_at_home(after_restart, KEPT)
    assert world.other_after == world.other_before
    assert other_after_restart == world.other_before
    ops = {(e.op, e.record_id) for e in (await world.acme.client.audit(limit=1000)).entries}
    assert {("forget_session", SESSIONS[SESSION]), ("delete_document", DOCS[DOC]),
            ("delete_skill", world.acme.skills[SKILL])} <= ops


async def test_store_rows_hold_no_forgotten_content(world: World, restarted: tuple[Seen, Seen]) -> None:
    """No durable row of the tenant (nor any skill job) holds a forgotten item's content or belongs
    to it; version counters and content-free audit rows are all that may name them."""
    store, names = open_store(world.settings)
    rows = {c: store.scan(c, tenant="acme", with_vectors=False)
            for c in (names.episodic, names.semantic, names.procedural, names.state)}
    rows[f"{names.state} (system)"] = store.scan(names.state, tenant=SYSTEM_TENANT, with_vectors=False)
    leaking = [(c, r.pk) for c, found in rows.items() for r in found
               if _markers_in(r.text + json.dumps(r.payload, default=str)) & set(FORGOTTEN)]
    assert leaking == []
    forgotten_ids = {SESSIONS[SESSION], DOCS[DOC], world.acme.skills[SKILL]}
    assert [r.pk for found in rows.values() for r in found if r.session in forgotten_ids] == []
    assert {r.kind for r in rows[names.state]} == {"version", "audit", "working"}
    # The scan does see content: the controls' rows, and the other tenant's copies of the forgotten items.
    for collection, marker in ((names.episodic, SESSION_KEPT), (names.semantic, DOC_KEPT),
                               (names.procedural, SKILL_KEPT), (names.state, SESSION_KEPT)):
        assert any(marker in _markers_in(r.text + json.dumps(r.payload)) for r in rows[collection]), collection
        theirs = store.scan(collection, tenant="globex", with_vectors=False)
        assert set(FORGOTTEN) & {m for r in theirs for m in _markers_in(r.text + json.dumps(r.payload))}, collection
