"""Idempotency-Key: a tiny app behind the API's middleware, with the real answer store
over the in-memory record store; the app counts how often a write is applied."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI, Header, Response
from pydantic import BaseModel

from strata.access.idempotency import IDEM_KIND, IdempotencyStore
from strata.errors import Unauthorized
from strata.store.records import InMemoryRecordStore
from strata_serve.errors import BodyLimit, install_handlers
from strata_serve.idempotent import Idempotent

KEYS = {"sk-a": "tenant-a", "sk-b": "tenant-b"}


class Note(BaseModel):
    text: str


class World:
    def __init__(self) -> None:
        self.store = InMemoryRecordStore()
        self.store.ensure_collection("state", dim=4)
        self.answers = IdempotencyStore(self.store, "state", ttl_s=60)
        self.applied: list[tuple[str, str]] = []

    async def tenant_of(self, key: str | None) -> str | None:
        return KEYS.get(key or "")

    async def answers_of(self) -> IdempotencyStore:
        return self.answers


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def client(world: World) -> httpx.AsyncClient:
    app = FastAPI()
    install_handlers(app)
    app.add_middleware(Idempotent, replica=lambda: (world.tenant_of, world.answers_of))
    app.add_middleware(BodyLimit, max_bytes=lambda: 100_000)

    def tenant(authorization: str | None) -> str:
        found = KEYS.get((authorization or "").removeprefix("Bearer "))
        if found is None:
            raise Unauthorized("unknown API key")
        return found

    @app.post("/w", status_code=201)
    async def write(body: Note, response: Response, authorization: str | None = Header(default=None)) -> dict[str, object]:
        who = tenant(authorization)
        if body.text == "conflict":
            response.status_code = 409
            return {"error": "VersionConflict"}
        world.applied.append((who, body.text))
        await asyncio.sleep(0.01)
        response.headers["ETag"] = f'"{len(world.applied)}"'
        return {"tenant": who, "applied": len(world.applied), "text": body.text}

    @app.delete("/w")
    async def forget(authorization: str | None = Header(default=None)) -> dict[str, str]:
        return {"forgot": tenant(authorization)}

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def headers(key: str = "sk-a", idem: str | None = "k-1") -> dict[str, str]:
    h = {"Authorization": f"Bearer {key}"}
    return {**h, "Idempotency-Key": idem} if idem else h


async def test_a_retry_gets_the_first_answer_and_is_applied_once(client: httpx.AsyncClient, world: World) -> None:
    first = await client.post("/w", json={"text": "hello"}, headers=headers())
    again = await client.post("/w", json={"text": "hello"}, headers=headers())
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["etag"] == first.headers["etag"]
    assert again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert world.applied == [("tenant-a", "hello")]


async def test_concurrent_retries_apply_once(client: httpx.AsyncClient, world: World) -> None:
    answers = await asyncio.gather(*(client.post("/w", json={"text": "x"}, headers=headers()) for _ in range(5)))
    assert {a.json()["applied"] for a in answers} == {1} and world.applied == [("tenant-a", "x")]


async def test_the_same_key_with_another_request_is_refused(client: httpx.AsyncClient, world: World) -> None:
    assert (await client.post("/w", json={"text": "one"}, headers=headers())).status_code == 201
    other = await client.post("/w", json={"text": "two"}, headers=headers())
    assert other.status_code == 422 and "different request" in other.json()["message"]
    assert world.applied == [("tenant-a", "one")]


async def test_keys_are_per_tenant_and_without_a_key_nothing_is_kept(client: httpx.AsyncClient, world: World) -> None:
    await client.post("/w", json={"text": "same"}, headers=headers("sk-a"))
    theirs = await client.post("/w", json={"text": "same"}, headers=headers("sk-b"))
    assert theirs.json()["tenant"] == "tenant-b" and "idempotent-replayed" not in theirs.headers
    for _ in range(2):
        await client.post("/w", json={"text": "plain"}, headers=headers(idem=None))
    assert world.applied == [("tenant-a", "same"), ("tenant-b", "same"), ("tenant-a", "plain"), ("tenant-a", "plain")]


async def test_errors_are_not_kept_and_bad_keys_say_so(client: httpx.AsyncClient, world: World) -> None:
    for _ in range(2):
        assert (await client.post("/w", json={"text": "conflict"}, headers=headers(idem="k-9"))).status_code == 409
    assert world.store.scan("state", tenant="tenant-a") == []
    assert (await client.post("/w", json={"text": 1}, headers=headers(idem="k-8"))).status_code == 422
    bad = await client.post("/w", json={"text": "x"}, headers=headers(idem="no spaces please"))
    assert bad.status_code == 422 and "Idempotency-Key" in bad.json()["message"]
    unknown = await client.post("/w", json={"text": "x"}, headers=headers("sk-nobody"))
    assert unknown.status_code == 401 and world.applied == []


async def test_a_large_answer_is_kept_in_pieces_and_a_delete_drops_them(client: httpx.AsyncClient,
                                                                         world: World) -> None:
    text = "é" * 20_000  # the answer holds it: two pieces of at most 15,000 characters
    first = await client.post("/w", json={"text": text}, headers=headers(idem="big"))
    assert (await client.post("/w", json={"text": text}, headers=headers(idem="big"))).json() == first.json()
    kept = world.store.scan("state", tenant="tenant-a", kinds=[IDEM_KIND])
    assert len(kept) == 2 and len(world.applied) == 1
    assert (await client.delete("/w", headers=headers(idem="del-1"))).status_code == 200
    left = world.store.scan("state", tenant="tenant-a", kinds=[IDEM_KIND])
    assert len(left) == 1  # only the delete's own answer
    assert (await client.delete("/w", headers=headers(idem=None))).status_code == 200
    assert world.store.scan("state", tenant="tenant-a", kinds=[IDEM_KIND]) == []  # a delete without a key too
