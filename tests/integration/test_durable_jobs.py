"""Background work that outlives its actor (issue 42, durable jobs): a document indexed with
``wait=false`` whose semantic shard dies mid-run is indexed by the restarted shard; a skill job
whose tenant moves to another procedural shard (the layer scaled 1 → 2) is learned there, and
a read of the job answers from the new owner. Real Ray (the session's ``ray_local``), real
milvus-lite, the packaged embedding model; the LLM is a loopback server started here."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import ray

from strata.errors import StrataError
from strata.store.jobs import JobRows
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from strata_actors.placement import owner_shard
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.integration.test_procedural_actor import LLM_SKILL, TRACE
from tests.llm_server import Reply, llm_server

pytestmark = pytest.mark.usefixtures("ray_local")


async def until(check: Callable[[], Awaitable[Any]], timeout_s: float = 180.0) -> Any:
    """``check()`` once it is truthy; store and actor errors while a shard restarts are retried."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = await check()
        except (StrataError, ray.exceptions.RayError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.2)


async def test_a_background_document_is_indexed_after_its_shard_dies(milvus: MilvusServer) -> None:
    settings = settings_for(milvus, actors={"semantic_shards": 1})
    client = InClusterClient("jobs-doc", settings)
    text = "\n\n".join(f"## Part {n}\n\nService {n} keeps its audit logs in bucket vault-{n}." for n in range(400))
    submitted = await client.index_document(text, doc_id="manual", wait=False)
    assert submitted.status == "indexing"
    ray.kill(LayerRouter(settings).handle("semantic", "jobs-doc"), no_restart=False)  # mid-run: nothing written yet

    async def reported() -> Any:
        return await client.get_document("manual")

    first = await until(reported)  # the row answers while the restarted shard takes the job up
    assert first.status in ("indexing", "ready")

    async def ready() -> Any:
        doc = await client.get_document("manual")
        return doc if doc.status == "ready" else None

    doc = await until(ready)
    assert doc.version == 1
    found = await client.search("bucket vault-399", layers=["semantic"], weights={"lexical": 1}, top_k=1)
    assert "vault-399" in found.hits[0].text
    store, names = open_store(settings)
    rows = JobRows(store, names.state, "semantic").all()
    assert [(r.status, r.parts) for r in rows] == [("done", 0)]  # the ended row keeps no copy of the text


async def test_a_skill_job_is_learned_by_the_tenants_new_owner(milvus: MilvusServer) -> None:
    tenant = next(f"jobs-mover-{n}" for n in range(100) if owner_shard(f"jobs-mover-{n}", 2) == 1)
    state = {"ok": False}

    def script(n: int) -> Reply:
        return json.dumps(LLM_SKILL) if state["ok"] else (lambda: (500, {"error": {"message": "down"}}))

    with llm_server(script) as (url, _):
        settings = settings_for(
            milvus,
            llm={"base_url": url, "timeout_s": 0.6, "max_retries": 0},
            procedural={"job_retry_s": 0.5, "job_max_attempts": 50},
            actors={"procedural_shards": 1},
        )
        client = InClusterClient(tenant, settings)
        result = await client.post_interaction({
            "session_id": "s1", "user": "deploy payments", "agent": "deployed", "task_type": "deployment",
            "success": True, "trace": TRACE,
        })
        assert result.skill_job is not None
        job_id = result.skill_job.job_id
        router = LayerRouter(settings)
        placement = await router.directory.scale("procedural", 2)  # the tenant moves to shard 1
        assert placement.shards == 2
        state["ok"] = True

        async def learned() -> Any:
            job = await client.skill_job(job_id)
            return job if job.status == "done" else None

        job = await until(learned)
        skill = await client.get_skill(job.skill_id)
        assert skill.skill_name == LLM_SKILL["skill_name"]
        assert (await client.find_skills()).total == 1  # learned once, by one shard
        new_owner = router.shard_handle("procedural", 1)
        assert (await new_owner.ping.remote())["tenants_loaded"] >= 1
        await router.directory.scale("procedural", 1)
