"""Two API replicas share one key's rate limit and apply one ``Idempotency-Key`` once (issue 40).

Each replica is a Ray actor of its own (a process) that builds what the ingress builds for a
request: :class:`~strata_serve.auth.Authenticate` with a :class:`~strata_serve.auth.KeyGate`
of its own (its own key cache), the :class:`~strata_serve.idempotent.Idempotent` middleware
with its own connection to the store, and :class:`~strata_actors.limits.SharedLimits` for the
rate limits and claims, over a real milvus-lite. Its one route is named as the API's
``index_document`` and counts the writes it applies. Serve itself is not started: what is
shared is the limits actor and the store, not Serve's routing, and a real Serve app with two
replicas costs the embedding deployment and ~20 s on 2 cores for nothing this proves.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from typing import Any

import cloudpickle  # type: ignore[import-untyped]  # ships no type information
import httpx
import pytest
import ray
from fastapi import FastAPI, Header
from pydantic import BaseModel

from strata.access.idempotency import IdempotencyStore
from strata.access.keys import open_keys
from strata.config import StrataSettings
from strata.store.layout import open_store
from strata_actors.limits import SharedLimits, limits_actor_name
from strata_serve.auth import Authenticate, KeyGate
from strata_serve.errors import install_handlers
from strata_serve.idempotent import Idempotent
from tests.conftest import MilvusServer, settings_for

BURST = 10


class Note(BaseModel):
    text: str


class HttpReplica:
    """One API replica's middleware and a route that counts the writes it applies."""

    def __init__(self, settings: dict[str, Any], delay_s: float) -> None:
        s = StrataSettings.from_dict(settings)
        shared = SharedLimits(s)
        store, names = open_store(s)
        gate = KeyGate(s, limits=shared.grant)
        answers = IdempotencyStore(store, names.state, ttl_s=60)
        self.applied = 0

        async def parts() -> tuple[IdempotencyStore, SharedLimits]:
            return answers, shared

        app = FastAPI()
        install_handlers(app)
        app.add_middleware(Idempotent, replica=lambda: parts)
        app.add_middleware(Authenticate, gate=lambda: gate)

        @app.post("/v1/documents", status_code=201)
        async def index_document(body: Note, authorization: str | None = Header(default=None)) -> dict[str, Any]:
            who = (await gate.caller(authorization, "index_document")).tenant
            self.applied += 1
            await asyncio.sleep(delay_s)
            return {"tenant": who, "text": body.text, "applied": self.applied}

        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica")

    async def post(self, key: str, text: str, idem: str | None = None) -> tuple[int, dict[str, Any], bool]:
        headers = {"Authorization": f"Bearer {key}", **({"Idempotency-Key": idem} if idem else {})}
        answer = await self._client.post("/v1/documents", json={"text": text}, headers=headers)
        return answer.status_code, answer.json(), answer.headers.get("idempotent-replayed") == "true"

    async def applied_writes(self) -> int:
        return self.applied


@pytest.fixture(scope="module")
def stack(milvus: MilvusServer, ray_local: None) -> Iterator[tuple[StrataSettings, list[Any], str]]:
    settings = settings_for(
        milvus, auth={"rate_limit_per_s": 0.001, "rate_burst": BURST, "rate_lease": 3},
        serve={"idempotency_wait_s": 10.0},
    )
    store, names = open_store(settings)
    key = open_keys(store, names).create("acme")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import tests/
    remote: Any = ray.remote(HttpReplica)
    replicas = [remote.options(max_concurrency=64).remote(settings.to_dict(), 0.5) for _ in range(2)]
    ray.get([r.applied_writes.remote() for r in replicas], timeout=120)
    yield settings, replicas, key
    for replica in replicas:
        ray.kill(replica)
    ray.kill(ray.get_actor(limits_actor_name(0), namespace=settings.ray.namespace))


def test_two_replicas_share_one_keys_burst(stack: tuple[StrataSettings, list[Any], str]) -> None:
    """Per-replica buckets accepted 2 x BURST of 30 requests here; the shared one accepts BURST."""
    _, replicas, key = stack
    before = sum(ray.get([r.applied_writes.remote() for r in replicas]))
    sent = [replicas[n % 2].post.remote(key, f"r{n}") for n in range(30)]
    codes = [code for code, _, _ in ray.get(sent, timeout=120)]
    assert codes.count(201) == BURST and codes.count(429) == 30 - BURST
    by_replica = [codes[n::2].count(201) for n in (0, 1)]
    assert all(by_replica), by_replica  # both replicas accepted some: the burst is split, not doubled
    assert sum(ray.get([r.applied_writes.remote() for r in replicas])) - before == BURST


def test_one_idempotency_key_sent_to_both_replicas_at_once_is_applied_once(
    stack: tuple[StrataSettings, list[Any], str],
) -> None:
    """Before the shared claims, each replica locked the key in its own memory: both applied it."""
    settings, replicas, _ = stack
    store, names = open_store(settings)
    key = open_keys(store, names).create("globex")  # a tenant with a fresh allowance
    sent = [replicas[n % 2].post.remote(key, "once", "idem-1") for n in range(4)]
    answers = ray.get(sent, timeout=120)
    assert {code for code, _, _ in answers} == {201}
    assert len({repr(body) for _, body, _ in answers}) == 1  # one answer, four times
    assert sum(replayed for _, _, replayed in answers) == 3
    applied = [ray.get(r.applied_writes.remote()) for r in replicas]
    # The rate test applied BURST writes of acme's before this one.
    assert sum(applied) == BURST + 1


def test_a_restarted_limits_actor_forgets_its_claims_but_a_kept_answer_is_still_replayed(
    stack: tuple[StrataSettings, list[Any], str],
) -> None:
    settings, replicas, _ = stack
    store, names = open_store(settings)
    key = open_keys(store, names).create("initech")
    assert ray.get(replicas[0].post.remote(key, "kept", "idem-2"), timeout=60)[0] == 201
    before = sum(ray.get([r.applied_writes.remote() for r in replicas]))
    ray.kill(ray.get_actor(limits_actor_name(0), namespace=settings.ray.namespace), no_restart=False)
    deadline = time.monotonic() + 60
    while True:  # 503 while the actor restarts (no write runs unclaimed), then the kept answer
        code, body, replayed = ray.get(replicas[1].post.remote(key, "kept", "idem-2"), timeout=60)
        if code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (code, replayed, body["text"]) == (201, True, "kept")
    assert sum(ray.get([r.applied_writes.remote() for r in replicas])) == before
