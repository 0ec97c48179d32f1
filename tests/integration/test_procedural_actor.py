"""Procedural memory and the four-layer context on a real local Ray instance and
a real milvus-lite server, through the in-cluster client; the LLM is a loopback
OpenAI-compatible server started here."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import ray

from strata.errors import LLMError, NotFound, PreconditionRequired, VersionConflict
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.llm_server import Reply, hang, llm_server

pytestmark = pytest.mark.usefixtures("ray_local")

TRACE: list[Any] = [
    {"command": "docker build -t registry.example.com/payments:1.4.2 ."},
    {"command": "kubectl -n staging apply -f deploy/payments.yaml", "error": "error: namespace \"staging\" not found"},
    {"command": "kubectl create namespace staging"},
    {"command": "kubectl -n staging apply -f deploy/payments.yaml", "output": "deployment.apps/payments created"},
    {"tool": "http_check", "args": {"url": "https://staging.example.com/health"}, "output": "200 OK"},
]
TASK = "Deploy the payments service to the staging Kubernetes cluster"

LLM_SKILL = {
    "skill_name": "deploy-service-kubernetes",
    "description": "Build an image and deploy a service to a Kubernetes namespace",
    "trigger_conditions": ["asked to deploy a service to Kubernetes"],
    "steps": ["docker build -t {image} .", "kubectl -n {namespace} apply -f {manifest}"],
    "common_pitfalls": ["the namespace does not exist yet: create it first"],
    "success_criteria": ["the health check answers 200"],
}


async def until(check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def plain(milvus: MilvusServer) -> InClusterClient:
    return InClusterClient("team-a", settings_for(milvus, actors={"procedural_shards": 1}))


async def test_rule_extraction_search_outcomes_and_history(plain: InClusterClient) -> None:
    skill = await plain.extract_skill(TASK, TRACE, outcome="payments answers on staging")
    assert skill.version == 1 and skill.merged is False and skill.uses == 0
    assert skill.steps and any("{" in step for step in skill.steps)
    assert any("not found" in p for p in skill.common_pitfalls)
    found = await plain.find_skills("deploy a service to the staging cluster")
    assert found.skills[0].skill_id == skill.skill_id and found.skills[0].similarity is not None

    again = await plain.extract_skill("Deploy the payments service to the staging Kubernetes cluster again", TRACE)
    assert again.skill_id == skill.skill_id and again.merged is True and again.version == 2
    assert (await plain.find_skills()).total == 1

    for success in (False, False, False):
        await plain.record_outcome(skill.skill_id, success)
    # three failures out of three uses: filtered by the default 0.7, found with a lower bar
    assert (await plain.find_skills("deploy a service to the staging cluster")).skills == []
    lower = await plain.find_skills("deploy a service to the staging cluster", min_success_rate=0.0)
    assert [s.skill_id for s in lower.skills] == [skill.skill_id]

    current = await plain.get_skill(skill.skill_id)
    assert (current.uses, current.successes, current.version) == (3, 0, 5)
    with pytest.raises(PreconditionRequired):
        await plain.update_skill(skill.skill_id, {"description": "x"}, expected_version=None)  # type: ignore[arg-type]
    edited = await plain.update_skill(
        skill.skill_id, {"description": "Ship a service to a cluster"}, expected_version=5
    )
    assert edited.version == 6 and edited.description == "Ship a service to a cluster"
    with pytest.raises(VersionConflict) as info:
        await plain.update_skill(skill.skill_id, {"description": "stale"}, expected_version=5)
    assert info.value.current_version == 6
    history = await plain.skill_history(skill.skill_id)
    assert [v.change for v in history.versions] == ["created", "merged", "outcome", "outcome", "outcome", "edited"]
    assert [v.version for v in history.versions] == [1, 2, 3, 4, 5, 6]
    assert history.versions[-1].by == "in-cluster"

    deleted = await plain.delete_skill(skill.skill_id)
    assert deleted.removed == 7
    with pytest.raises(NotFound):
        await plain.get_skill(skill.skill_id)


async def test_concurrent_outcomes_lose_nothing_in_both_modes(plain: InClusterClient) -> None:
    skill = await plain.extract_skill("Rotate the TLS certificate of the ingress controller", [
        {"command": "certbot renew --cert-name ingress.example.com"},
        {"command": "kubectl -n ingress rollout restart deploy/nginx"},
    ])
    await asyncio.gather(*(plain.record_outcome(skill.skill_id, n % 2 == 0) for n in range(48)))
    atomic = await plain.get_skill(skill.skill_id)
    assert (atomic.uses, atomic.successes, atomic.version) == (48, 24, 49)

    conflicts = 0

    async def worker(updates: int) -> None:
        nonlocal conflicts
        version = (await plain.get_skill(skill.skill_id)).version
        for _ in range(updates):
            while True:
                try:
                    version = (await plain.record_outcome(skill.skill_id, True, expected_version=version)).version
                    break
                except VersionConflict as exc:
                    conflicts += 1
                    version = exc.current_version

    await asyncio.gather(*(worker(6) for _ in range(8)))
    final = await plain.get_skill(skill.skill_id)
    assert (final.uses, final.successes, final.version) == (96, 72, 97)
    assert conflicts > 0  # eight writers at once do collide; each collision was retried, none lost


async def test_interaction_learns_a_skill_in_the_background(plain: InClusterClient) -> None:
    result = await plain.post_interaction({
        "session_id": "s-learn", "user": "Please rebuild the search index", "agent": "Done, the index is rebuilt",
        "task_type": "deployment", "success": True,
        "trace": [{"command": "curl -X POST http://search.internal:9200/_reindex"}, {"action": "check the doc count"}],
    })
    assert result.skill_job is not None and result.turns[0].session_id == "s-learn"

    async def done() -> Any:
        job = await plain.skill_job(result.skill_job.job_id)  # type: ignore[union-attr]
        return job if job.status == "done" else None

    job = await until(done)
    skill = await plain.get_skill(job.skill_id)
    assert "rebuild" in skill.description.lower()
    assert (await plain.get_working("s-learn")).items  # the exchange reached working memory too

    skipped = await plain.post_interaction(
        {"session_id": "s-learn", "user": "thanks", "task_type": "general", "success": True}
    )
    assert skipped.skill_job is None and "learn_from" in skipped.learning
    failed = await plain.post_interaction({"session_id": "s-learn", "user": "it broke", "task_type": "coding",
                                           "success": False, "trace": ["make"]})
    assert failed.skill_job is None and "successful" in failed.learning


async def test_four_layer_context_stays_in_budget_and_survives_a_dead_layer(milvus: MilvusServer) -> None:
    settings = settings_for(milvus, context={"layer_timeouts": {"episodic": 0.001}})
    client = InClusterClient("team-ctx", settings)
    await client.record_turns("s1", [{"user": f"the payments deploy failed on day {n} with a namespace error",
                                      "agent": "create the namespace first"} for n in range(30)])
    await client.index_document("# Payments runbook\n\n" + "\n\n".join(
        f"Step {n}: the payments service deploys to staging with kubectl apply." for n in range(40)), doc_id="runbook")
    await client.extract_skill(TASK, TRACE)
    for budget in (120, 300, 900):
        ctx = await client.build_context("how do I deploy payments to staging?", "s1", task_type="deployment",
                                         max_tokens=budget, layers=["episodic", "semantic", "procedural"])
        assert ctx.token_count <= budget
        assert "timed out" in ctx.missing["episodic"]  # a 1 ms deadline: left out, the rest answers
        assert {s.layer for s in ctx.sections if s.items} >= {"working"}
    ctx = await client.build_context(
        "how do I deploy payments to staging?", "s1", task_type="deployment", max_tokens=1500
    )
    assert ctx.missing == {} and {"semantic", "procedural"} <= {s.layer for s in ctx.sections if s.items}
    assert "kubectl" in ctx.context

    router = LayerRouter(settings)
    ray.kill(router.handle("semantic", "team-ctx"), no_restart=True)
    broken = await client.build_context("how do I deploy payments to staging?", "s1", task_type="deployment")
    assert "semantic" in broken.missing and "Traceback" not in broken.missing["semantic"]
    assert any(s.layer == "procedural" and s.items for s in broken.sections)
    assert broken.token_count <= broken.max_tokens


# -- the LLM path ------------------------------------------------------------------


def _llm_client(milvus: MilvusServer, url: str, tenant: str, **procedural: Any) -> InClusterClient:
    settings = settings_for(
        milvus,
        llm={"base_url": url, "timeout_s": 0.6, "max_retries": 0},
        procedural={"job_retry_s": 0.2, **procedural},
        actors={"procedural_shards": 1},
    )
    return InClusterClient(tenant, settings)


async def test_llm_drafts_the_skill_and_a_failure_is_kept_and_retried(milvus: MilvusServer) -> None:
    replies: list[Reply] = [json.dumps(LLM_SKILL)]
    state = {"mode": "good"}

    def script(n: int) -> Reply:
        if state["mode"] == "garbage":
            return "this is not JSON at all"
        if state["mode"] == "hang":
            return hang(3)
        return replies[0]

    with llm_server(script) as (url, received):
        client = _llm_client(milvus, url, "team-llm", job_max_attempts=50)
        skill = await client.extract_skill(TASK, TRACE)
        assert skill.skill_name == "deploy-service-kubernetes" and skill.steps == LLM_SKILL["steps"]
        assert TASK in json.dumps(received[0])

        state["mode"] = "garbage"
        with pytest.raises(LLMError) as info:
            await client.extract_skill("Restore the orders database from last night's backup",
                                       ["pg_restore -d orders /backups/orders.dump"])
        job_id = info.value.details["job_id"]
        assert "nothing is lost" in info.value.message
        state["mode"] = "hang"
        started = time.monotonic()
        with pytest.raises(LLMError):
            await client.extract_skill("Rotate the API keys of the billing service", ["vault write billing/rotate"])
        assert time.monotonic() - started < 10

        replies[0] = json.dumps({**LLM_SKILL, "skill_name": "restore-database",
                                 "description": "Restore a database from a dump",
                                 "trigger_conditions": ["a database must be restored from backup"],
                                 "steps": ["pg_restore -d {database} {dump}"]})
        state["mode"] = "good"

        async def learned() -> Any:
            job = await client.skill_job(job_id)
            return job if job.status == "done" else None

        job = await until(learned)
        restored = await client.get_skill(job.skill_id)
        assert restored.skill_name == "restore-database"


async def test_a_pending_job_survives_the_actor_dying(milvus: MilvusServer) -> None:
    state = {"ok": False}

    def script(n: int) -> Reply:
        return json.dumps(LLM_SKILL) if state["ok"] else (lambda: (500, {"error": {"message": "down"}}))

    with llm_server(script) as (url, _):
        # Many LLM attempts allowed, slow retries: the job is still pending when the actor dies.
        client = _llm_client(milvus, url, "team-crash", job_retry_s=30.0, job_max_attempts=50)
        result = await client.post_interaction({
            "session_id": "s1", "user": "deploy payments", "agent": "deployed", "task_type": "deployment",
            "success": True, "trace": TRACE,
        })
        assert result.skill_job is not None
        router = LayerRouter(client._flow.settings)
        handle = router.handle("procedural", "team-crash")
        await asyncio.sleep(0.5)  # the first attempt fails against the 500s
        ray.kill(handle, no_restart=False)
        state["ok"] = True

        async def learned() -> Any:
            try:
                await handle.ping.remote()  # the restarted actor resumes the jobs it owned
                return (await client.find_skills()).total
            except Exception:
                return 0

        assert await until(learned) == 1
        assert (await client.find_skills()).skills[0].skill_name == "deploy-service-kubernetes"


async def test_an_over_budget_context_is_refined_by_the_llm_or_trimmed(milvus: MilvusServer) -> None:
    condensed = {"context": "Payments deploys to staging with kubectl apply; create the namespace first."}
    state = {"reply": json.dumps(condensed)}

    def script(n: int) -> Reply:
        return state["reply"]

    with llm_server(script) as (url, received):
        client = _llm_client(milvus, url, "team-refine")
        await client.index_document("# Payments runbook\n\n" + "\n\n".join(
            f"Step {n}: the payments service number {n} deploys to staging with kubectl apply -f payments-{n}.yaml."
            for n in range(60)), doc_id="runbook")
        ask = functools.partial(
            client.build_context, "how do I deploy payments to staging?", "s1", task_type="planning", max_tokens=200
        )
        refined = await ask()
        assert refined.refined is True and refined.refine_error is None
        assert "create the namespace first" in refined.context and refined.token_count <= 200
        assert any("Step" in json.dumps(r) for r in received)  # the LLM saw the items it condensed

        state["reply"] = "not json"
        trimmed = await ask()
        assert trimmed.refined is False and trimmed.refine_error and "trimmed by score" in trimmed.refine_error
        assert trimmed.token_count <= 200 and "Step" in trimmed.context
