"""Idempotency-Key: a tiny app behind the API's middlewares, in the API's order, with the real
key store, key gate and answer store over the in-memory record store; its routes carry the
names of the API's (``ROUTES`` in serve_app/auth.py says what each does) and count how often
a write is applied."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import httpx
from fastapi import FastAPI, Header, Response
from pydantic import BaseModel

from strata.access.idempotency import IDEM_KIND, Claim, Claims, IdempotencyStore
from strata.access.keys import KeyStore
from strata.access.ratelimit import RateLimiter
from strata.config import AuthSettings, StrataSettings
from strata.errors import StoreUnavailable
from strata.store.records import InMemoryRecordStore
from strata_serve.auth import Authenticate, KeyGate
from strata_serve.errors import install_handlers
from strata_serve.guards import BodyLimit, Deadline, Internal
from strata_serve.idempotent import Idempotent


class Note(BaseModel):
    text: str


class Query(BaseModel):
    query: str
    session_id: str | None = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class World:
    """One API replica over a store; :meth:`replica` makes another over the same store, claims
    and shared rate limits, as the API's replicas share them through ``strata_actors.limits``."""

    def __init__(self, *, wait_s: float = 5.0, delay_s: float = 0.01, **auth: Any) -> None:
        self.clock = Clock()
        self.store = InMemoryRecordStore()
        for name in ("keys", "state"):
            self.store.ensure_collection(name, dim=4)
        self.keys = KeyStore(self.store, "keys")
        self.settings = StrataSettings(auth=AuthSettings(**auth))
        self.gate = KeyGate(self.settings, keys=self.keys, clock=self.clock)
        self.answers = IdempotencyStore(self.store, "state", ttl_s=60)
        self.claims: Any = Claims(hold_s=60, wait_s=wait_s)
        self.central = RateLimiter(
            per_s=self.settings.auth.rate_limit_per_s, burst=self.settings.auth.rate_burst, clock=self.clock
        )
        self.delay_s = delay_s
        self.applied: list[tuple[str, str]] = []
        self.searched = 0
        self.a, self.b = self.keys.create("tenant-a"), self.keys.create("tenant-b")
        self.client = self._client(self.gate)

    def replica(self) -> httpx.AsyncClient:
        """Another replica: its own gate, key cache and middleware, limits taken from :attr:`central`."""

        async def grant(tenant: str, key_id: str, want: int) -> int:
            return self.central.grant(key_id, want)

        return self._client(KeyGate(self.settings, keys=self.keys, limits=grant, clock=self.clock))

    def _client(self, gate: KeyGate) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self._app(gate)), base_url="http://test")

    async def answers_of(self) -> tuple[IdempotencyStore, Any]:
        return self.answers, self.claims

    def kept(self, tenant: str = "tenant-a") -> int:
        return len(self.store.scan("state", tenant=tenant, kinds=[IDEM_KIND]))

    def _app(self, gate: KeyGate) -> FastAPI:
        app = FastAPI()
        install_handlers(app)
        app.add_middleware(Idempotent, replica=lambda: self.answers_of)
        app.add_middleware(BodyLimit, max_bytes=lambda: 100_000)
        app.add_middleware(Authenticate, gate=lambda: gate)
        app.add_middleware(Internal)
        app.add_middleware(Deadline, timeout_s=lambda: 30.0)

        @app.post("/v1/documents", status_code=201)
        async def index_document(
            body: Note, response: Response, authorization: str | None = Header(default=None)
        ) -> dict[str, object]:
            who = (await gate.caller(authorization, "index_document")).tenant
            if body.text == "conflict":
                response.status_code = 409
                return {"error": "VersionConflict"}
            self.applied.append((who, body.text))
            await asyncio.sleep(self.delay_s)
            response.headers["ETag"] = f'"{len(self.applied)}"'
            return {"tenant": who, "applied": len(self.applied), "text": body.text}

        @app.post("/v1/sessions/{session_id}/turns", status_code=201)
        async def record_turn(
            session_id: str, body: Note, authorization: str | None = Header(default=None)
        ) -> dict[str, object]:
            who = (await gate.caller(authorization, "record_turn", session=session_id)).tenant
            self.applied.append((who, body.text))
            return {"tenant": who, "applied": len(self.applied), "text": body.text}

        @app.delete("/v1/documents/{doc_id}")
        async def delete_document(doc_id: str, authorization: str | None = Header(default=None)) -> dict[str, str]:
            return {"forgot": (await gate.caller(authorization, "delete_document")).tenant}

        @app.post("/v1/search")
        async def search(body: Query, authorization: str | None = Header(default=None)) -> dict[str, object]:
            info, layers = await gate.reader(authorization, "search", session=body.session_id, asked=None)
            self.searched += 1
            return {"tenant": info.tenant, "searched": self.searched, "layers": layers}

        return app


def headers(key: str, idem: str | None = "k-1") -> dict[str, str]:
    h = {"Authorization": f"Bearer {key}"}
    return {**h, "Idempotency-Key": idem} if idem else h


async def test_a_retry_gets_the_first_answer_and_is_applied_once() -> None:
    w = World()
    first = await w.client.post("/v1/documents", json={"text": "hello"}, headers=headers(w.a))
    again = await w.client.post("/v1/documents", json={"text": "hello"}, headers=headers(w.a))
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["etag"] == first.headers["etag"]
    assert again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert w.applied == [("tenant-a", "hello")]


async def test_concurrent_retries_apply_once() -> None:
    w = World()
    answers = await asyncio.gather(
        *(w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a)) for _ in range(5))
    )
    assert {a.json()["applied"] for a in answers} == {1} and w.applied == [("tenant-a", "x")]


async def test_the_same_key_with_another_request_is_refused() -> None:
    w = World()
    assert (await w.client.post("/v1/documents", json={"text": "one"}, headers=headers(w.a))).status_code == 201
    other = await w.client.post("/v1/documents", json={"text": "two"}, headers=headers(w.a))
    assert other.status_code == 422 and "different request" in other.json()["message"]
    assert w.applied == [("tenant-a", "one")]


async def test_keys_are_per_tenant_and_without_a_key_nothing_is_kept() -> None:
    w = World()
    await w.client.post("/v1/documents", json={"text": "same"}, headers=headers(w.a))
    theirs = await w.client.post("/v1/documents", json={"text": "same"}, headers=headers(w.b))
    assert theirs.json()["tenant"] == "tenant-b" and "idempotent-replayed" not in theirs.headers
    for _ in range(2):
        await w.client.post("/v1/documents", json={"text": "plain"}, headers=headers(w.a, idem=None))
    assert w.applied == [("tenant-a", "same"), ("tenant-b", "same"), ("tenant-a", "plain"), ("tenant-a", "plain")]


async def test_errors_are_not_kept_and_bad_keys_say_so() -> None:
    w = World()
    for _ in range(2):
        conflict = await w.client.post("/v1/documents", json={"text": "conflict"}, headers=headers(w.a, idem="k-9"))
        assert conflict.status_code == 409
    assert w.kept() == 0
    assert (await w.client.post("/v1/documents", json={"text": 1}, headers=headers(w.a, idem="k-8"))).status_code == 422
    bad = await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a, idem="no spaces please"))
    assert bad.status_code == 422 and "Idempotency-Key" in bad.json()["message"]
    unknown = await w.client.post("/v1/documents", json={"text": "x"}, headers=headers("sk-strata-nobody"))
    assert unknown.status_code == 401 and w.applied == []


async def test_a_large_answer_is_kept_in_pieces_and_a_delete_drops_them() -> None:
    w = World()
    text = "é" * 20_000  # the answer holds it: two pieces of at most 15,000 characters
    first = await w.client.post("/v1/documents", json={"text": text}, headers=headers(w.a, idem="big"))
    again = await w.client.post("/v1/documents", json={"text": text}, headers=headers(w.a, idem="big"))
    assert again.json() == first.json() and w.kept() == 2 and len(w.applied) == 1
    assert (await w.client.delete("/v1/documents/d1", headers=headers(w.a, idem="del-1"))).status_code == 200
    assert w.kept() == 1  # only the delete's own answer
    assert (await w.client.delete("/v1/documents/d1", headers=headers(w.a, idem=None))).status_code == 200
    assert w.kept() == 0  # a delete without a key too


# -- what is never kept -------------------------------------------------------------------


async def test_read_routes_are_not_kept() -> None:
    """/v1/search and /v1/context answers were kept 24 h, whatever the TTL of what they showed."""
    w = World()
    answers = [
        await w.client.post("/v1/search", json={"query": "q"}, headers=headers(w.a, idem="s-1")) for _ in range(2)
    ]
    assert [a.json()["searched"] for a in answers] == [1, 2]  # each one searched afresh
    assert all("idempotent-replayed" not in a.headers for a in answers) and w.kept() == 0


async def test_a_read_only_key_stores_nothing() -> None:
    w = World()
    reader = w.keys.create("tenant-a", read_only=True)
    searched = await w.client.post("/v1/search", json={"query": "q"}, headers=headers(reader, idem="r-1"))
    assert searched.status_code == 200
    refused = await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(reader, idem="r-2"))
    assert refused.status_code == 403 and "read-only" in refused.json()["message"]
    assert w.kept() == 0 and w.applied == []


# -- a replay is authorised and rate-limited as a first attempt ----------------------------


async def test_a_narrower_key_gets_a_403_not_another_keys_kept_answer() -> None:
    w = World()
    first = await w.client.post("/v1/documents", json={"text": "The vault code is 4471."}, headers=headers(w.a))
    assert first.status_code == 201
    for narrower in (
        w.keys.create("tenant-a", session_id="s1"),
        w.keys.create("tenant-a", shared=False),
        w.keys.create("tenant-a", read_only=True),
    ):
        other = await w.client.post(
            "/v1/documents", json={"text": "The vault code is 4471."}, headers=headers(narrower)
        )
        assert other.status_code == 403 and "idempotent-replayed" not in other.headers and "4471" not in other.text
    assert len(w.applied) == 1


async def test_a_key_narrowed_since_its_first_attempt_is_refused_on_replay() -> None:
    """The kept answer is in the key's own slot, but its scope no longer covers the route: the
    middleware checks the scope before it replays (the route never runs on a replay)."""
    w = World()
    key = w.keys.create("tenant-a", session_id="s1")
    turn = {"text": "mine"}
    assert (await w.client.post("/v1/sessions/s1/turns", json=turn, headers=headers(key))).status_code == 201
    assert (await w.client.post("/v1/sessions/s1/turns", json=turn, headers=headers(key))).headers[
        "idempotent-replayed"
    ] == "true"
    rows = w.store.scan("keys", tenant="system", with_vectors=False)
    row = next(r for r in rows if r.payload["session_id"] == "s1")
    w.store.upsert("keys", [replace(row, payload={**row.payload, "session_id": "s2"})])  # narrowed in the store
    w.clock.now += 1.0  # the replica's cached lookup expires
    replay = await w.client.post("/v1/sessions/s1/turns", json=turn, headers=headers(key))
    assert replay.status_code == 403 and "idempotent-replayed" not in replay.headers
    assert "'s2'" in replay.json()["message"] and w.applied == [("tenant-a", "mine")]


async def test_a_revoked_key_is_refused_on_replay() -> None:
    w = World()
    assert (await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a))).status_code == 201
    await w.gate.revoke(w.keys.lookup(w.a).key_id)  # type: ignore[union-attr]
    replay = await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a))
    assert replay.status_code == 401 and "idempotent-replayed" not in replay.headers


async def test_replays_take_from_the_rate_limit() -> None:
    w = World(rate_limit_per_s=0.001, rate_burst=2)
    answers = [await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a)) for _ in range(3)]
    assert [a.status_code for a in answers] == [201, 201, 429]
    assert answers[1].headers["idempotent-replayed"] == "true" and len(w.applied) == 1


# -- two replicas: one key is applied once over both ---------------------------------------


async def test_one_key_sent_to_two_replicas_at_once_is_applied_once() -> None:
    """Before the claims, each replica locked the key in its own memory: both applied it."""
    w = World(delay_s=0.05)
    other = w.replica()
    answers = await asyncio.gather(*(
        client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a))
        for client in (w.client, other, w.client, other)
    ))
    assert [a.status_code for a in answers] == [201] * 4 and w.applied == [("tenant-a", "x")]
    assert {a.json()["applied"] for a in answers} == {1}
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == 3


async def test_a_key_in_flight_on_another_replica_gets_409_after_the_wait() -> None:
    w = World(wait_s=0.05, delay_s=0.3)
    other = w.replica()
    slow = asyncio.ensure_future(w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a)))
    await asyncio.sleep(0.1)
    busy = await other.post("/v1/documents", json={"text": "x"}, headers=headers(w.a))
    assert busy.status_code == 409 and busy.json()["field"] == "Idempotency-Key"
    assert 1 <= int(busy.headers["Retry-After"]) <= 60
    different = await other.post("/v1/documents", json={"text": "y"}, headers=headers(w.a))
    assert different.status_code == 422 and "different request" in different.json()["message"]
    assert (await slow).status_code == 201
    later = await other.post("/v1/documents", json={"text": "x"}, headers=headers(w.a))
    assert later.headers["idempotent-replayed"] == "true" and w.applied == [("tenant-a", "x")]


async def test_a_lost_claim_does_not_apply_a_kept_answer_again() -> None:
    """The claims' actor restarted empty: the store, read after the claim, still answers."""
    w = World()
    assert (await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a))).status_code == 201
    w.claims = Claims(hold_s=60, wait_s=5.0)
    again = await w.replica().post("/v1/documents", json={"text": "x"}, headers=headers(w.a))
    assert again.headers["idempotent-replayed"] == "true" and len(w.applied) == 1


class Unanswering:
    async def claim(self, tenant: str, key: str, *, fingerprint: str, holder: str) -> Claim:
        raise StoreUnavailable("the claims do not answer", retry_after_s=2)

    async def release(self, tenant: str, key: str, *, holder: str) -> None:
        raise AssertionError("nothing was claimed")


async def test_without_claims_a_write_with_a_key_is_refused_not_run_unclaimed() -> None:
    w = World()
    w.claims = Unanswering()
    refused = await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a))
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "2" and w.applied == []
    plain = await w.client.post("/v1/documents", json={"text": "x"}, headers=headers(w.a, idem=None))
    assert plain.status_code == 201  # a write without the header needs no claim


async def test_two_replicas_share_one_keys_rate_limit() -> None:
    """Before, each replica had a bucket of its own: a key sent twice its burst over two."""
    w = World(rate_limit_per_s=0.001, rate_burst=6, rate_lease=2)
    one, two = w.replica(), w.replica()
    answers = [
        await client.post("/v1/documents", json={"text": str(n)}, headers=headers(w.a, idem=None))
        for n in range(8) for client in (one, two)
    ]
    codes = [a.status_code for a in answers]
    assert codes.count(201) == 6 and codes.count(429) == 10 and len(w.applied) == 6
    assert {a.status_code for a in answers[0:2]} == {201}  # both replicas were granted some
