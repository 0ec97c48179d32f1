"""The key check before the body: a tiny app behind the API's four middlewares, in the API's
order, with the real key store over the in-memory record store (which counts key reads) and
a clock the test moves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import httpx
from fastapi import FastAPI, Header, Request, Response
from pydantic import BaseModel
from starlette.types import Message

from strata.access.idempotency import Claims, IdempotencyStore
from strata.access.keycache import KeyCache
from strata.access.keys import KEY_PREFIX, KeyInfo, KeyStore
from strata.config import AuthSettings, StrataSettings
from strata.errors import StoreUnavailable
from strata.schema import Health
from strata.store.records import InMemoryRecordStore, Record
from strata_cli import haproxy
from strata_serve.auth import FAILED_AUTH_HEADER, GOOD_KEY_HEADER, Authenticate, KeyGate, health_for_caller
from strata_serve.errors import install_handlers
from strata_serve.guards import BodyLimit, Deadline, Internal
from strata_serve.headers import SecurityHeaders
from strata_serve.idempotent import Idempotent
from strata_serve.usage import CountCalls

MILVUS_DOWN = "Milvus at http://10.0.0.7:19530 does not answer"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(InMemoryRecordStore):
    """The in-memory store, counting reads of the key collection (and failing them on demand)."""

    def __init__(self) -> None:
        super().__init__()
        self.key_reads = 0
        self.down = False

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]:
        if collection == "keys":
            self.key_reads += 1
            if self.down:
                raise StoreUnavailable("Milvus does not answer", retry_after_s=2)
        return super().get(collection, tenant=tenant, pks=pks)


class Note(BaseModel):
    text: str


class World:
    def __init__(self, **auth: Any) -> None:
        self.clock = Clock()
        self.store = CountingStore()
        for name in ("keys", "state"):
            self.store.ensure_collection(name, dim=4)
        self.keys = KeyStore(self.store, "keys")
        settings = StrataSettings(auth=AuthSettings(admin_key="sk-configured-admin", **auth))
        self.gate = KeyGate(settings, keys=self.keys, clock=self.clock)
        self.answers = IdempotencyStore(self.store, "state", ttl_s=60)
        self.claims = Claims(hold_s=60, wait_s=5)
        self.key = self.keys.create("acme")
        self.key_id = self.keys.lookup(self.key).key_id  # type: ignore[union-attr]
        self.store.key_reads = 0
        self.applied: list[str] = []
        self.up = True
        self.app = self._app()

    async def answers_of(self) -> tuple[IdempotencyStore, Claims]:
        return self.answers, self.claims

    def _app(self) -> FastAPI:
        app = FastAPI()
        install_handlers(app)
        gate = self.gate
        # In the API's order (serve_app/api.py): the last added runs first.
        app.add_middleware(Idempotent, replica=lambda: self.answers_of)
        app.add_middleware(BodyLimit, max_bytes=lambda: 256 * 2**20)
        app.add_middleware(Authenticate, gate=lambda: gate)
        app.add_middleware(Internal)
        app.add_middleware(Deadline, timeout_s=lambda: 30.0)

        @app.post("/v1/raw")
        async def raw(request: Request, authorization: str | None = Header(default=None)) -> dict[str, int]:
            await gate.caller(authorization, "index_document")
            return {"bytes": sum([len(chunk) async for chunk in request.stream()])}

        @app.post("/v1/sessions/{session_id}/turns", status_code=201)
        async def record_turn(
            session_id: str, body: Note, authorization: str | None = Header(default=None)
        ) -> dict[str, Any]:
            tenant = (await gate.caller(authorization, "record_turn", session=session_id)).tenant
            self.applied.append(body.text)
            return {"tenant": tenant, "applied": len(self.applied)}

        @app.get("/v1/documents")
        async def list_documents(authorization: str | None = Header(default=None)) -> dict[str, str]:
            return {"tenant": (await gate.caller(authorization, "list_documents")).tenant}

        @app.get("/healthz", response_model=Health, response_model_exclude_none=True)
        async def healthz(response: Response) -> Health:
            response.status_code = 200 if self.up else 503
            milvus = "ok" if self.up else MILVUS_DOWN
            return health_for_caller(Health(status="ok" if self.up else "down", ray="ok", milvus=milvus, layers={}))

        return app

    def client(self, address: str = "10.1.1.1") -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, client=(address, 40000))
        return httpx.AsyncClient(transport=transport, base_url="http://test")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wrong_key(n: int) -> str:
    return f"{KEY_PREFIX}never-issued-{n:06d}"


# -- refused before the body --------------------------------------------------------------


async def call_asgi(
    app: FastAPI, headers: list[tuple[bytes, bytes]], *, chunks: int, path: str = "/v1/sessions/s1/turns"
) -> tuple[int, int, bytes]:
    """POST straight over ASGI with a body of ``chunks`` MiB that ``receive`` would stream;
    returns the status, how many times ``receive`` was called, and the answer. The default
    route parses a JSON body, so without the middleware the whole body is read first."""
    received = 0
    answer: list[Message] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"x" * 2**20, "more_body": received < chunks}

    async def send(message: Message) -> None:
        answer.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"transfer-encoding", b"chunked"), *headers], "client": ("10.9.9.9", 5000),
        "server": ("test", 80),
    }
    await app(scope, receive, send)
    start = next(m for m in answer if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in answer if m["type"] == "http.response.body")
    return int(start["status"]), received, body


async def test_a_wrong_key_gets_401_before_a_byte_of_a_huge_body_is_read() -> None:
    world = World()
    for headers in ([], [(b"authorization", b"Bearer " + wrong_key(1).encode())], [(b"authorization", b"Basic x")]):
        status, received, body = await call_asgi(world.app, headers, chunks=128)  # 128 MiB behind it
        assert (status, received) == (401, 0), body
        answer = json.loads(body)
        assert answer["error"] == "Unauthorized" and set(answer) == {"error", "message"}
    assert world.store.key_reads == 1  # only the well-formed wrong key was looked up
    good = [(b"authorization", b"Bearer " + world.key.encode())]
    status, received, body = await call_asgi(world.app, good, chunks=3, path="/v1/raw")
    assert (status, received) == (200, 3) and json.loads(body) == {"bytes": 3 * 2**20}


async def test_refusals_keep_the_shape_and_headers_of_the_api() -> None:
    world = World()
    async with world.client() as client:
        missing = await client.post("/v1/sessions/s1/turns", json={"text": "hi"})
        wrong = await client.post("/v1/sessions/s1/turns", json={"text": "hi"}, headers=bearer(wrong_key(1)))
        garbage = await client.get("/v1/documents", headers=bearer("not-even-a-key"))
    assert missing.status_code == wrong.status_code == garbage.status_code == 401
    assert missing.json() == {"error": "Unauthorized", "message": "send your API key as 'Authorization: Bearer <key>'"}
    assert wrong.json() == garbage.json() == {"error": "Unauthorized", "message": "unknown API key"}
    assert wrong.headers["www-authenticate"] == "Bearer" and wrong.headers["connection"] == "close"
    assert world.applied == []


async def test_a_store_outage_is_a_503_before_the_body_and_is_not_cached() -> None:
    world = World()
    world.store.down = True
    authorization = [(b"authorization", b"Bearer " + world.key.encode())]
    status, received, body = await call_asgi(world.app, authorization, chunks=64)
    assert (status, received) == (503, 0) and json.loads(body)["error"] == "StoreUnavailable"
    world.store.down = False
    status, _, _ = await call_asgi(world.app, authorization, chunks=1, path="/v1/raw")
    assert status == 200


# -- the cache and the limit on failures ----------------------------------------------------


async def test_a_known_key_is_read_once_per_ttl() -> None:
    world = World()
    async with world.client() as client:
        for _ in range(50):
            assert (await client.get("/v1/documents", headers=bearer(world.key))).json() == {"tenant": "acme"}
        assert world.store.key_reads == 1  # and not once more in the route
        world.clock.now += 1.0
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 200
    assert world.store.key_reads == 2


async def test_a_key_in_use_is_read_again_ahead_of_time_and_never_waits_for_it() -> None:
    # On a Milvus server a key's read is strong, about 200 ms: a key in use is read again in
    # the background once half its time has passed, so no request waits for that read.
    world = World()
    async with world.client() as client:
        start = world.clock.now
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 200
        world.clock.now = start + 0.6  # past half its time: answered from the cache, read again behind it
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 200
        await asyncio.sleep(0.05)
        assert world.store.key_reads == 2
        world.store.down = True  # any read now would fail the request: none is made
        world.clock.now = start + 1.15  # the first answer has expired; the second, read at +0.6, holds
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 200
        await asyncio.sleep(0.05)  # it was due again: that read failed, quietly, and changed nothing
        assert world.store.key_reads == 3
        world.store.down = False
        KeyStore(world.store, "keys").revoke(world.key_id)
        world.clock.now = start + 1.6  # the answer read at +0.6 has expired: read now, and refused
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 401


async def test_a_wrong_key_is_remembered_as_wrong_and_read_once_at_a_time() -> None:
    world = World(failed_auth_per_s=0)  # no limit on failures: the cache alone
    async with world.client() as client:
        answers = await asyncio.gather(*(client.get("/v1/documents", headers=bearer(wrong_key(7))) for _ in range(20)))
        assert {a.status_code for a in answers} == {401}
        assert world.store.key_reads == 1  # twenty at once, one read
        for _ in range(20):
            await client.get("/v1/documents", headers=bearer(wrong_key(7)))
        assert world.store.key_reads == 1
        world.clock.now += 1.0
        await client.get("/v1/documents", headers=bearer(wrong_key(7)))
    assert world.store.key_reads == 2


async def test_a_flood_of_wrong_keys_from_one_address_gets_429_without_store_reads() -> None:
    world = World(failed_auth_per_s=1.0, failed_auth_burst=5)
    async with world.client("10.6.6.6") as flood, world.client("10.2.2.2") as other:
        assert (await flood.get("/v1/documents", headers=bearer(world.key))).status_code == 200  # cached now
        world.store.key_reads = 0
        answers = [await flood.post("/v1/raw", content=b"x" * 1000, headers=bearer(wrong_key(n))) for n in range(200)]
        assert [a.status_code for a in answers[:5]] == [401] * 5
        limited = answers[5:]
        assert {a.status_code for a in limited} == {429}
        # Each is marked for the HAProxy in front, which turns the address away at the door.
        assert all(a.headers.get(FAILED_AUTH_HEADER) == "1" for a in answers)
        assert limited[0].json()["error"] == "RateLimited" and "this address" in limited[0].json()["message"]
        assert int(limited[0].headers["retry-after"]) >= 1
        assert world.store.key_reads == 5  # nothing read once the address is over its limit
        # A key this replica knows is good still passes from there; another address is not limited.
        assert (await flood.get("/v1/documents", headers=bearer(world.key))).status_code == 200
        assert (await other.get("/v1/documents", headers=bearer(wrong_key(999)))).status_code == 401
        assert world.store.key_reads == 6
        world.clock.now += 1.0  # one failure back; the good key's entry has expired
        assert (await flood.get("/v1/documents", headers=bearer(wrong_key(1000)))).status_code == 401
        assert (await flood.get("/v1/documents", headers=bearer(wrong_key(1001)))).status_code == 429
        assert world.store.key_reads == 7
        # The good key is read again although its address is over the limit: it was good before.
        assert (await flood.get("/v1/documents", headers=bearer(world.key))).status_code == 200
        assert world.store.key_reads == 8
        # Revoked meanwhile, it is read once more, then refused as any wrong key.
        KeyStore(world.store, "keys").revoke(world.key_id)
        world.clock.now += 1.0
        assert (await flood.get("/v1/documents", headers=bearer(world.key))).status_code == 401
        assert (await flood.get("/v1/documents", headers=bearer(world.key))).status_code == 429
        assert world.store.key_reads == 9


async def test_random_keys_cannot_grow_the_cache() -> None:
    world = World(failed_auth_per_s=0, key_cache_entries=100)
    async with world.client() as client:
        for n in range(300):
            await client.get("/v1/documents", headers=bearer(wrong_key(n)))
    assert len(world.gate._cache) == 100


def test_the_cache_is_an_lru_with_a_ttl_from_the_start_of_the_read() -> None:
    clock = Clock()
    cache = KeyCache(known_ttl_s=1.0, unknown_ttl_s=0.5, max_entries=2, clock=clock)
    info = KeyInfo(key_id="a" * 12, tenant="acme", created_at="2025-01-01T00:00:00Z")  # type: ignore[arg-type]
    read_at = cache.now()
    clock.now += 0.3  # the read took 0.3 s: the entry lives 0.7 s more, not 1 s
    cache.put("d1", info, read_at=read_at)
    cache.put("d2", None, read_at=clock.now)
    assert cache.get("d1") == cache.get("d1") and cache.get("d1").info == info  # type: ignore[union-attr]
    cache.put("d3", None, read_at=clock.now)  # d2 was used least recently
    assert cache.get("d2") is None and cache.get("d3") is not None and len(cache) == 2
    clock.now += 0.5
    assert cache.get("d3") is None and cache.get("d1") is not None
    clock.now += 0.2
    assert cache.get("d1") is None
    cache.put("d1", info, read_at=clock.now)
    cache.drop(info.key_id)
    assert cache.get("d1") is None


# -- revocation ---------------------------------------------------------------------------


async def test_a_key_revoked_elsewhere_is_refused_within_the_ttl() -> None:
    world = World()
    async with world.client() as client:
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 200
        read_at = world.clock.now
        KeyStore(world.store, "keys").revoke(world.key_id)  # another replica, or `strata keys revoke`
        world.clock.now = read_at + 0.999
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 200
        world.clock.now = read_at + 1.0
        refused = await client.get("/v1/documents", headers=bearer(world.key))
    assert refused.status_code == 401 and refused.json()["message"] == "unknown API key"


async def test_a_key_revoked_or_rotated_here_is_refused_at_once() -> None:
    world = World()
    other = world.keys.create("beta")
    async with world.client() as client:
        for key in (world.key, other):
            assert (await client.get("/v1/documents", headers=bearer(key))).status_code == 200
        await world.gate.revoke(world.key_id)
        new = await world.gate.rotate(world.keys.lookup(other).key_id)  # type: ignore[union-attr]
        assert (await client.get("/v1/documents", headers=bearer(world.key))).status_code == 401
        assert (await client.get("/v1/documents", headers=bearer(other))).status_code == 401
        assert (await client.get("/v1/documents", headers=bearer(new.key))).json() == {"tenant": "beta"}


async def test_a_key_created_after_it_was_refused_works_within_the_unknown_ttl() -> None:
    world = World(failed_auth_per_s=0)
    created = world.keys.issue("acme")
    rows = world.store.scan("keys", tenant="system", session="apikey", kinds=["apikey"], with_vectors=False)
    row = [r for r in rows if r.payload["key_id"] == created.key_id]
    world.store.delete("keys", tenant="system", pks=[r.pk for r in row])  # not there yet
    async with world.client() as client:
        assert (await client.get("/v1/documents", headers=bearer(created.key))).status_code == 401
        world.store.upsert("keys", row)  # created now
        assert (await client.get("/v1/documents", headers=bearer(created.key))).status_code == 401
        world.clock.now += 1.0
        assert (await client.get("/v1/documents", headers=bearer(created.key))).status_code == 200


# -- Idempotency-Key replays are authorised as first attempts are ---------------------------


async def test_a_replay_with_a_revoked_key_is_refused() -> None:
    world = World()
    turn = {"text": "Deploys go out on Tuesdays."}
    retry = {"Idempotency-Key": "deploy-1"}
    async with world.client() as client:
        first = await client.post("/v1/sessions/s1/turns", json=turn, headers={**bearer(world.key), **retry})
        assert first.status_code == 201 and world.applied == [turn["text"]]
        again = await client.post("/v1/sessions/s1/turns", json=turn, headers={**bearer(world.key), **retry})
        assert again.headers["idempotent-replayed"] == "true" and again.json() == first.json()
        rotated = await world.gate.rotate(world.key_id)
        refused = await client.post("/v1/sessions/s1/turns", json=turn, headers={**bearer(world.key), **retry})
        assert refused.status_code == 401 and "idempotent-replayed" not in refused.headers
        # The tenant's new full key gets the answer: a retry across a rotation is still answered once.
        replayed = await client.post("/v1/sessions/s1/turns", json=turn, headers={**bearer(rotated.key), **retry})
        assert replayed.headers["idempotent-replayed"] == "true" and replayed.json() == first.json()
    assert world.applied == [turn["text"]]


async def test_a_narrower_key_is_not_answered_another_keys_write() -> None:
    world = World()
    turn = {"text": "The vault code is 4471."}
    retry = {"Idempotency-Key": "guessable-1"}
    session_key = world.keys.create("acme", session_id="s2")
    async with world.client() as client:
        first = await client.post("/v1/sessions/s1/turns", json=turn, headers={**bearer(world.key), **retry})
        assert first.status_code == 201
        other = await client.post("/v1/sessions/s1/turns", json=turn, headers={**bearer(session_key), **retry})
    assert other.status_code == 403 and "idempotent-replayed" not in other.headers
    assert "4471" not in other.text and world.applied == [turn["text"]]


# -- /healthz -----------------------------------------------------------------------------


async def test_healthz_says_up_or_down_and_shows_details_to_an_admin_key_only() -> None:
    world = World()
    admin = world.keys.issue_admin().key
    async with world.client() as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        world.up = False
        for headers in ({}, bearer(world.key), bearer(wrong_key(1)), bearer("garbage")):
            down = await client.get("/healthz", headers=headers)
            assert down.status_code == 503 and down.json() == {"status": "down"}
            assert "10.0.0.7" not in down.text and "http" not in down.text and "Milvus" not in down.text
        for key in (admin, "sk-configured-admin"):
            detailed = await client.get("/healthz", headers=bearer(key))
            assert detailed.status_code == 503 and detailed.json()["milvus"] == MILVUS_DOWN
        assert (await client.get("/openapi.json")).status_code == 200
        assert (await client.get("/docs")).status_code == 200
        assert (await client.get("/no-such-route")).status_code == 401  # no route list without a key


def test_the_api_runs_its_middlewares_in_this_order() -> None:
    from strata_serve import api

    order: list[object] = [m.cls for m in api.app.user_middleware]
    assert order == [
        SecurityHeaders, Deadline, Internal, Authenticate, CountCalls, BodyLimit, Idempotent
    ]


async def test_a_good_key_over_its_own_rate_is_not_marked_as_a_failed_authentication() -> None:
    """429 for a key's own rate says nothing against its address: HAProxy must not count it."""
    world = World(rate_limit_per_s=1.0, rate_burst=2)
    async with world.client("10.3.3.3") as client:
        answers = [await client.get("/v1/documents", headers=bearer(world.key)) for _ in range(4)]
        assert [a.status_code for a in answers] == [200, 200, 429, 429]
        assert not any(FAILED_AUTH_HEADER in a.headers for a in answers)
        assert all(a.headers.get(GOOD_KEY_HEADER) == "1" for a in answers[:2])  # HAProxy lets this key through
        refused = await client.get("/v1/documents")
        assert refused.headers[FAILED_AUTH_HEADER] == "1" and GOOD_KEY_HEADER not in refused.headers  # no key: 401
    # strata-haproxy (which must not import the API) names the same headers.
    assert (haproxy.FAILED_AUTH_HEADER, haproxy.GOOD_KEY_HEADER) == (FAILED_AUTH_HEADER, GOOD_KEY_HEADER)
