"""What the key check costs per request: 2,000 authenticated GETs through the API's four
middlewares (Deadline, Authenticate, BodyLimit, Idempotent) to a route that returns the
tenant, in-process over ASGI, sequentially.

- ``cached``: the key is read once, then served from the replica's key cache (TTL 1 s: the
  run takes longer, so it is read again once a second);
- ``store read``: ``auth.key_cache_ttl_s`` 0, one key store read per request, over the
  in-memory record store (a dict and a thread hop);
- ``store read, 2.4 ms``: the same with the read held 2.4 ms, the median primary-key get on
  milvus-lite (tests/integration/test_keys_store.py);
- ``wrong key, limited``: a wrong key from an address over its failure limit (the 429 path).

Run from the repository root::

    python -m strata_bench.scripts.auth_cost

Only Strata's own code: no Ray, no Milvus.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import httpx
from fastapi import FastAPI, Header

from strata.access.idempotency import Claims, IdempotencyStore
from strata.access.keys import KeyStore
from strata.config import AuthSettings, StrataSettings
from strata.store.records import InMemoryRecordStore, Record
from strata_bench.stats import median, percentile
from strata_serve.auth import Authenticate, KeyGate
from strata_serve.errors import install_handlers
from strata_serve.guards import BodyLimit, Deadline
from strata_serve.idempotent import Idempotent

__all__ = ["main"]

N = 2_000


class SlowStore(InMemoryRecordStore):
    """The in-memory store with each key read held ``delay_s`` and counted."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.key_reads = 0

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]:
        if collection == "keys":
            self.key_reads += 1
            if self.delay_s:
                time.sleep(self.delay_s)
        return super().get(collection, tenant=tenant, pks=pks)


def _app(gate: KeyGate, answers: IdempotencyStore) -> FastAPI:
    app = FastAPI()
    install_handlers(app)

    claims = Claims(hold_s=60, wait_s=10)

    async def answers_of() -> tuple[IdempotencyStore, Claims]:
        return answers, claims

    app.add_middleware(Idempotent, replica=lambda: answers_of)
    app.add_middleware(BodyLimit, max_bytes=lambda: 128 * 2**20)
    app.add_middleware(Authenticate, gate=lambda: gate)
    app.add_middleware(Deadline, timeout_s=lambda: 30.0)

    @app.get("/v1/documents")
    async def documents(authorization: str | None = Header(default=None)) -> dict[str, str]:
        return {"tenant": (await gate.caller(authorization, "list_documents")).tenant}

    return app


async def _run(label: str, *, ttl_s: float, delay_s: float = 0.0, wrong: bool = False) -> None:
    store = SlowStore(delay_s)
    for name in ("keys", "state"):
        store.ensure_collection(name, dim=4)
    keys = KeyStore(store, "keys")
    key = keys.create("acme")
    auth = AuthSettings(key_cache_ttl_s=ttl_s, rate_limit_per_s=0, failed_auth_per_s=0.001, failed_auth_burst=1)
    gate = KeyGate(StrataSettings(auth=auth), keys=keys)
    app = _app(gate, IdempotencyStore(store, "state", ttl_s=60))
    headers = {"Authorization": f"Bearer {'sk-strata-wrong' if wrong else key}"}
    expected = 429 if wrong else 200
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        for _ in range(50):  # warm up (and, for the wrong key, spend the address's allowance)
            await client.get("/v1/documents", headers=headers)
        store.key_reads = 0
        times: list[float] = []
        started = time.perf_counter()
        for _ in range(N):
            t0 = time.perf_counter()
            answer = await client.get("/v1/documents", headers=headers)
            times.append((time.perf_counter() - t0) * 1000)
            if answer.status_code != expected:  # a wrong answer would time another path
                raise RuntimeError(f"{label}: {answer.status_code}, expected {expected}: {answer.text}")
        total_s = time.perf_counter() - started
    print(f"{label:<22} {median(times):7.3f} {percentile(times, 95):7.3f} {N / total_s:8.0f} {store.key_reads:7d}")


async def _main() -> None:
    print(f"{N:,} sequential GETs, in-process ASGI\n")
    print(f"{'':<22} {'p50 ms':>7} {'p95 ms':>7} {'req/s':>8} {'reads':>7}")
    await _run("cached", ttl_s=1.0)
    await _run("store read", ttl_s=0.0)
    await _run("store read, 2.4 ms", ttl_s=0.0, delay_s=0.0024)
    await _run("wrong key, limited", ttl_s=1.0, wrong=True)


def main() -> None:
    """Print p50, p95, throughput and key store reads of each way a key is checked."""
    asyncio.run(_main())


if __name__ == "__main__":
    main()
