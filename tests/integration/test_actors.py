"""The layer actors on a real local Ray instance and a real milvus-lite server,
driven through the in-cluster client (the same orchestration Serve runs)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import ray

from strata.errors import InvalidInput, NotFound, StoreUnavailable, VersionConflict
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.integration.layers import until_up
from tests.llm_server import hang, llm_server

#: Each test runs on milvus-lite and on a Milvus server (tests/conftest.py).
STORES = ("lite", "server")
pytestmark = pytest.mark.usefixtures("ray_local")

T0 = datetime(2024, 3, 4, 10, 0, tzinfo=UTC)  # a Monday


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    return settings_for(milvus, actors={"working_shards": 1, "episodic_shards": 2},
                        episodic={"raw_window": 3, "summary_threshold": 2})


@pytest.fixture(scope="module")
def alice(settings: Any) -> InClusterClient:
    return InClusterClient("alice", settings)


async def test_turns_are_searchable_and_versions_increase(alice: InClusterClient) -> None:
    first = await alice.record_turn("trip", "I am flying to Oslo next month for a conference.", "Have a good trip!",
                                    timestamp=T0)
    second = await alice.record_turns("trip", [
        {"user": "My favourite food is ramen.", "timestamp": T0 + timedelta(minutes=1)},
        {"user": "The conference talk is about Ray Serve autoscaling.", "timestamp": T0 + timedelta(minutes=2)},
    ])
    assert second.versions["episodic"] > first.versions["episodic"]
    assert [t.timestamp for t in second.turns] == [T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]
    found = await alice.search("what food do I like?", layers=["episodic"])
    assert "ramen" in found.hits[0].text
    assert found.versions["episodic"] == second.versions["episodic"]


async def test_time_expression_prefers_its_range(alice: InClusterClient) -> None:
    """A range read off the query ranks its turns first; an explicit time_range filters."""
    await alice.record_turn("later", "I adopted a cat named Miso.", timestamp=T0 + timedelta(days=8))
    reference = T0 + timedelta(days=9)  # Wednesday of the following week
    yesterday = await alice.search("what happened yesterday?", layers=["episodic"], reference_time=reference)
    assert yesterday.time_range is not None and (yesterday.time_range.expression or "").lower() == "yesterday"
    assert yesterday.hits[0].session_id == "later"
    last_week = await alice.search("上周我做了什么", layers=["episodic"], reference_time=reference)
    assert last_week.hits and last_week.hits[0].session_id == "trip"
    filtered = await alice.search("what happened?", layers=["episodic"], start=T0 + timedelta(days=8),
                                  end=T0 + timedelta(days=9))
    assert [h.session_id for h in filtered.hits] == ["later"]
    nonsense = await alice.search("blorp last fnord", layers=["episodic"], reference_time=reference)
    assert nonsense.time_range is None and nonsense.hits  # falls back to plain semantic search


async def test_stale_expected_version_conflicts(alice: InClusterClient) -> None:
    state = await alice.get_working("trip")
    await alice.add_working_items("trip", [{"role": "user", "content": "note one"}], expected_version=state.version)
    with pytest.raises(VersionConflict) as info:
        await alice.add_working_items("trip", [{"role": "user", "content": "note two"}], expected_version=state.version)
    assert info.value.current_version == state.version + 1
    with pytest.raises(VersionConflict):
        await alice.record_turn("trip", "late write", expected_version=0)


@pytest.mark.stores("lite")  # not a property of the store
async def test_bad_input_is_rejected(alice: InClusterClient) -> None:
    with pytest.raises(InvalidInput):
        await alice.record_turn('bad" or 1==1', "x")
    with pytest.raises(InvalidInput):
        await alice.record_turn("trip", "dup", turn_id="same-id")
        await alice.record_turn("trip", "dup again", turn_id="same-id")
    with pytest.raises(InvalidInput):
        await alice.build_context("hi", "trip", task_type="no-such-type")


async def test_a_retried_turn_is_replayed_and_completes_working_memory(settings: Any) -> None:
    """The episodic write of a turn landed, and its caller never heard (here: the episodic actor
    is called directly, as a crashed orchestrator would have left it): the retry with the same
    id and text is answered ``replayed``, writes no second turn, and adds the turn's working
    items once; a second retry changes nothing; other text under the same id is refused."""
    bob = InClusterClient("bob-replay", settings)
    episodic = LayerRouter(settings).handle("episodic", "bob-replay")
    landed = await episodic.record_turns.remote("bob-replay", "s1", [{"user": "Remember: the gate code is 4471.",
                                                                      "turn_id": "t-1"}])
    first = await bob.record_turn("s1", "Remember: the gate code is 4471.", turn_id="t-1")
    assert first.replayed and first.versions["episodic"] == landed["version"]
    assert [t.turn_id for t in first.turns] == ["t-1"]
    working = await bob.get_working("s1")
    assert [i.content for i in working.items] == ["Remember: the gate code is 4471."]
    again = await bob.record_turn("s1", "Remember: the gate code is 4471.", turn_id="t-1")
    assert again.replayed and again.versions == first.versions
    assert len((await bob.get_working("s1")).items) == 1
    with pytest.raises(InvalidInput, match="other content"):  # an agent answer makes it another turn
        await bob.record_turn("s1", "Remember: the gate code is 4471.", "Noted.", turn_id="t-1")
    state = await episodic.session_state.remote("bob-replay", "s1")
    assert [t["turn_id"] for t in state["window"]] == ["t-1"]


async def test_tenants_never_see_each_other(settings: Any, alice: InClusterClient) -> None:
    bob = InClusterClient("bob", settings)
    await bob.record_turn("trip", "Bob's secret is the blue door.")
    mine = await alice.search("secret blue door", layers=["episodic"], top_k=50)
    assert all("Bob" not in h.text for h in mine.hits)
    with pytest.raises(NotFound):
        await bob.forget_session("later")  # alice's session id, unknown to bob
    assert (await alice.search("cat named Miso", layers=["episodic"])).hits[0].session_id == "later"


@pytest.mark.stores("lite")  # not a property of the store
async def test_context_fits_budget_and_reads_layers_concurrently(settings: Any, alice: InClusterClient) -> None:
    for budget in (64, 120, 400):
        context = await alice.build_context("Where am I flying and what is my talk about?", "trip", max_tokens=budget)
        assert context.token_count <= budget
        assert set(context.versions) <= {"working", "episodic"}
    big = await alice.build_context("Where am I flying and what is my talk about?", "trip", max_tokens=2000)
    assert "Oslo" in big.context and big.messages  # working memory of the session is included
    assert big.missing == {}
    # Started and connected first: a cold actor's start alone can pass the 2 s layer deadline
    # on a loaded 2-core machine, and this checks what the layers answer, not how fast they start.
    for handle in [*LayerRouter(settings).all_handles("semantic"), *LayerRouter(settings).all_handles("procedural")]:
        await until_up(handle)
    debugging = await alice.build_context("why does it crash", "trip", task_type="debugging")
    assert debugging.missing == {}
    # alice has no documents and no skills: both layers answer, with nothing
    assert not [s for s in debugging.sections if s.layer in ("semantic", "procedural") and s.items]


@pytest.mark.stores("lite")  # not a property of the store
async def test_summaries_cover_each_turn_once(settings: Any, alice: InClusterClient) -> None:
    turns = [{"user": f"Day {n}: I practiced piano scales for {n * 10} minutes."} for n in range(9)]
    await alice.record_turns("piano", turns)
    actor = LayerRouter(settings).handle("episodic", "alice")
    assert await actor.wait_for_summaries.remote("alice") == 0
    state = await actor.session_state.remote("alice", "piano")
    covered = [t for s in state["summaries"] for t in s["turn_ids"]]
    assert len(covered) == len(set(covered)) == 6  # 9 turns, window 3, chunks of 2
    assert len(state["window"]) == 3
    assert all(s["method"] == "extractive" and s["summary"] for s in state["summaries"])
    hits = await alice.search("how long did I practice piano", layers=["episodic"], top_k=20)
    assert any(h.kind == "summary" for h in hits.hits)


async def test_actor_restart_reloads_state_and_versions_continue(settings: Any, alice: InClusterClient) -> None:
    before = await alice.record_turn("trip", "I packed my green umbrella.")
    actor = LayerRouter(settings).handle("episodic", "alice")
    ray.kill(actor, no_restart=False)
    for _ in range(60):  # the restarted actor answers once Ray has recreated it
        try:
            found = await alice.search("what did I pack?", layers=["episodic"])
            break
        except StoreUnavailable:
            await asyncio.sleep(0.5)
    assert "umbrella" in found.hits[0].text
    after = await alice.record_turn("trip", "And a raincoat.")
    assert after.versions["episodic"] > before.versions["episodic"]


async def test_tenants_over_a_shards_cap_are_evicted_and_come_back_whole(milvus: MilvusServer) -> None:
    """One shard per layer holding at most 2 tenants: 4 tenants take turns; each finds its own
    turns after being evicted, and its versions continue without reuse."""
    settings = settings_for(milvus, actors={"working_shards": 1, "episodic_shards": 1, "semantic_shards": 1,
                                            "procedural_shards": 1, "max_resident_tenants": 2,
                                            "resident_grace_s": 0})
    names = ["ann", "bob", "cy", "dee"]
    clients = {name: InClusterClient(name, settings) for name in names}
    first = {name: await clients[name].record_turn("s", f"{name} keeps a pet called {name}pet.") for name in names}
    [episodic] = LayerRouter(settings).all_handles("episodic")
    assert (await episodic.ping.remote())["tenants_loaded"] == 2
    for name in names:  # ann and bob were evicted for cy and dee; each comes back from the store
        found = await clients[name].search("what is the pet called?", layers=["episodic"])
        assert [h.text for h in found.hits] == [f"user: {name} keeps a pet called {name}pet."]
        again = await clients[name].record_turn("s", f"{name} also has a fish.")
        assert again.versions["episodic"] == first[name].versions["episodic"] + 1
        working = await clients[name].get_working("s")
        assert [item.content for item in working.items][-2:] == [f"{name} keeps a pet called {name}pet.",
                                                                  f"{name} also has a fish."]
    assert (await episodic.ping.remote())["tenants_loaded"] == 2


async def test_forget_session_leaves_nothing(settings: Any, alice: InClusterClient) -> None:
    await alice.record_turn("forgettable", "My locker code is 4417.")
    result = await alice.forget_session("forgettable")
    assert result.removed["episodic"] >= 1 and result.removed["working"] >= 1
    hits = await alice.search("locker code 4417", layers=["episodic"], top_k=100)
    assert all(h.session_id != "forgettable" for h in hits.hits)
    store, names = open_store(settings)
    assert store.scan(names.episodic, tenant="alice", session="forgettable") == []
    assert store.scan(names.state, tenant="alice", session="forgettable") == []
    with pytest.raises(NotFound):
        await alice.forget_session("forgettable")


@pytest.mark.stores("lite")  # not a property of the store
@pytest.mark.parametrize("behaviour", ["malformed", "hanging", "refusal", "good"])
async def test_llm_summaries_fall_back_and_never_lose_turns(milvus: MilvusServer, behaviour: str) -> None:
    def script(n: int) -> Any:
        if behaviour == "malformed":
            return "this is not JSON {"
        if behaviour == "hanging":
            return hang(3.0)
        if behaviour == "refusal":
            from tests.llm_server import chat_body
            return lambda: (200, chat_body(None, refusal="I can't help with that."))
        return ('{"summary": "The user described two walks.", "key_topics": ["walks"], "action_items": [], '
                '"user_preferences": []}')

    with llm_server(script) as (url, received):
        settings = settings_for(milvus, llm={"base_url": url, "timeout_s": 0.5, "max_retries": 0},
                                episodic={"raw_window": 1, "summary_threshold": 2},
                                actors={"working_shards": 1, "episodic_shards": 1})
        client = InClusterClient(f"llm-{behaviour}", settings)
        await client.record_turns("walks", [{"user": f"Walk {n} went along the river."} for n in range(3)])
        actor = LayerRouter(settings).handle("episodic", f"llm-{behaviour}")
        started = time.monotonic()
        assert await actor.wait_for_summaries.remote(f"llm-{behaviour}") == 0
        state = await actor.session_state.remote(f"llm-{behaviour}", "walks")
        assert time.monotonic() - started < 30
    assert state["turns"] == 3  # every turn is stored whatever the LLM did
    [summary] = state["summaries"]
    assert received, "the LLM was asked"
    if behaviour == "good":
        assert summary["method"] == "llm" and summary["summary"] == "The user described two walks."
    else:
        assert summary["method"] == "extractive" and summary["fallback_reason"] and summary["summary"]


def _tiny_benchmark(tmp_path: Any) -> Any:
    """A two-session neutral-format benchmark with one question left unanswerable."""
    import json

    from strata_bench.evaluation.datasets import load_benchmark

    data = {"conversations": [{
        "id": "tiny",
        "sessions": [
            {"id": "s1", "date": "2024-03-04T10:00:00", "turns": [
                {"id": "t1", "speaker": "Ana", "text": "I adopted a grey cat called Pixel."},
                {"id": "t2", "speaker": "Ben", "text": "Nice! I am training for a marathon in Lisbon."},
            ]},
            {"id": "s2", "date": "2024-03-11T10:00:00", "turns": [
                {"id": "t3", "speaker": "Ana", "text": "My new job at the bakery starts Monday."},
                {"id": "t4", "speaker": "Ben", "text": "Error ERR_CONN_RESET broke my upload again."},
            ]},
        ],
        "questions": [
            {"id": "q1", "question": "What is the name of Ana's cat?", "evidence": ["t1"], "category": "single-hop"},
            {"id": "q2", "question": "Where is Ben's marathon?", "evidence": ["t2"], "category": "single-hop"},
            {"id": "q3", "question": "Which error broke the upload?", "evidence": ["t4"], "category": "keyword"},
            {"id": "q4", "question": "Unanswerable", "evidence": [], "category": "keyword"},
        ],
    }]}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data))
    return load_benchmark(path, "strata")


@pytest.mark.stores("lite")  # not a property of the store
def test_eval_harness_runs_strata_and_baselines_side_by_side(settings: Any, tmp_path: Any) -> None:
    """`strata eval retrieval`'s core on a tiny neutral-format benchmark, Strata included."""

    from strata.providers.embedder import make_embedder
    from strata_bench.evaluation.retrieval import evaluate, format_table

    benchmark = _tiny_benchmark(tmp_path)
    assert benchmark.skipped_questions == 1
    document = evaluate(
        benchmark, retrievers=["bm25", "dense", "rrf", "strata"], ks=[1, 2], categories=None,
        embedder=make_embedder(settings.embedding), make_client=lambda tenant: InClusterClient(tenant, settings),
    )
    strata = document["retrievers"]["strata"]
    assert strata["overall"]["questions"] == 3 and strata["overall"]["recall@2"] == 1.0
    assert set(strata["categories"]) == {"single-hop", "keyword"}
    assert strata["ingest_turns_per_s"] > 0 and strata["query_p50_ms"] > 0
    assert set(document["retrievers"]) == {"bm25", "dense", "rrf", "strata"}
    assert "strata" in format_table(document, [1, 2])


@pytest.mark.stores("lite")  # not a property of the store
def test_eval_harness_counts_llm_calls_and_tokens_per_turn(milvus: MilvusServer, tmp_path: Any) -> None:
    from strata.providers.embedder import make_embedder
    from strata_bench.evaluation.retrieval import evaluate, format_table

    reply = '{"summary": "They talked.", "key_topics": ["talk"], "action_items": [], "user_preferences": []}'
    with llm_server(lambda n: reply) as (url, received):
        settings = settings_for(milvus, llm={"base_url": url, "timeout_s": 5, "max_retries": 0},
                                episodic={"raw_window": 1, "summary_threshold": 1})
        document = evaluate(
            _tiny_benchmark(tmp_path), retrievers=["strata"], ks=[1, 2], categories=None,
            embedder=make_embedder(settings.embedding), make_client=lambda tenant: InClusterClient(tenant, settings),
            count_llm=True,
        )
    llm = document["retrievers"]["strata"]["llm"]
    assert llm["calls"] == len(received) == 2  # one summary per session: each has one turn out of its raw window
    assert llm["prompt_tokens"] == 22 and llm["completion_tokens"] == 14  # the fake server's usage, 11 + 7 a call
    assert llm["calls_per_turn"] == 0.5 and llm["tokens_per_turn"] == 9.0
    assert "0.5 calls and 9.0 tokens per turn" in format_table(document, [1, 2])


@pytest.mark.stores("lite")  # not a property of the store
async def test_concurrent_reads_of_a_shard_share_actor_calls_and_keep_their_own_answers(settings: Any) -> None:
    """Searches asked for together go to their shard in one actor call; each caller gets its
    own tenant's hits, its own error, and a tenant the shard must load first is read alone."""
    router = LayerRouter(settings)
    names = [f"batch-{n}" for n in range(40)]
    tenants = [t for t in names if router.shard_of("episodic", t) == 0][:4]
    assert len(tenants) == 4
    clients = {t: InClusterClient(t, settings) for t in tenants}
    for t, client in clients.items():
        await client.record_turn("pets", f"{t} keeps a parrot named Kiwi.", timestamp=T0)
    vector = clients[tenants[0]]._embedder.embed_query(["what bird do I keep?"])[0]
    batcher = router._owner("episodic", tenants[0])[1]

    async def search(tenant: str) -> Any:
        return await router.episodic(tenant).search(tenant, query="what bird do I keep?", vector=vector, top_k=3)

    for t in tenants:  # each tenant loaded, one call each
        await search(t)
    calls, reads = batcher.calls, batcher.reads
    found = await asyncio.gather(*(search(t) for t in tenants))
    assert (batcher.calls - calls, batcher.reads - reads) == (1, 4)  # four reads, one actor call
    for t, answer in zip(tenants, found, strict=True):
        assert [h["text"] for h in answer["hits"]] == [f"user: {t} keeps a parrot named Kiwi."]  # its own tenant's

    # A tenant out of memory is loaded and read on its own; the others do not wait for it.
    assert await router.handle("episodic", tenants[1]).evict.remote(tenants[1])
    calls = batcher.calls
    found = await asyncio.gather(*(search(t) for t in tenants))
    assert batcher.calls - calls == 2
    assert [h["text"] for h in found[1]["hits"]] == [f"user: {tenants[1]} keeps a parrot named Kiwi."]

    # One read's error is its own: a tenant id that is no id fails alone, with its own message.
    answers = await asyncio.gather(search("../etc"), *(search(t) for t in tenants), return_exceptions=True)
    assert isinstance(answers[0], InvalidInput)
    assert all(isinstance(a, dict) and a["hits"] for a in answers[1:])

    # A method that is not a batched read is refused, not run.
    [(status, error)] = await router.handle("episodic", tenants[0]).reads.remote(
        [("forget_tenant", (tenants[0],), {})])
    assert status == "error" and "not a read" in str(error)
    assert (await search(tenants[0]))["hits"]  # nothing was forgotten


@pytest.mark.stores("lite")  # what the ingress and the shard embed, whatever the store
async def test_a_query_naming_a_speaker_is_embedded_once_with_its_speakerless_twin(settings: Any) -> None:
    """The flow keeps a tenant's speakers from its episodic answers and sends the vector of the
    query without their names (one model call with the query's): the shard embeds nothing. A
    speaker it does not know yet costs the shard's own embedding once, and the hits are the same."""
    client = InClusterClient("speakers-twin", settings)
    await client.record_turns("s1", [
        {"user": "I painted a sunrise over the lake last week.", "speaker": "Caroline", "timestamp": T0},
        {"user": "I ran a marathon in Boston.", "speaker": "Melanie", "timestamp": T0 + timedelta(minutes=1)},
    ])
    shard = LayerRouter(settings).episodic("speakers-twin")

    async def embeds() -> int:
        return int((await shard.ping())["query_embeds"])

    question = "What did Caroline paint?"
    before = await embeds()
    first = await client.search(question, layers=["episodic"])  # no speakers known yet: the shard embeds
    assert await embeds() == before + 1
    again = await client.search(question, layers=["episodic"])
    ctx = await client.build_context("Where did Melanie run a marathon?", "s1", task_type="planning")
    assert await embeds() == before + 1  # neither embedded in the shard
    assert [h.id for h in again.hits] == [h.id for h in first.hits] and "sunrise" in first.hits[0].text
    assert "Boston" in ctx.context

    await client.record_turn("s2", "I adopted a dog called Rex.", speaker="Jon", timestamp=T0 + timedelta(days=1))
    found = await client.search("What did Jon adopt?", layers=["episodic"])  # Jon not known here yet
    assert await embeds() == before + 2 and "Rex" in found.hits[0].text
    found = await client.search("Which dog did Jon adopt?", layers=["episodic"])
    assert await embeds() == before + 2 and "Rex" in found.hits[0].text
    assert "speakers-twin" in client._flow._speakers
    await client._flow.forget_tenant("speakers-twin")
    assert "speakers-twin" not in client._flow._speakers  # no name of a forgotten tenant kept
