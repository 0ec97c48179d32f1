"""The request deadline (504 in Strata's shape) on a tiny app with the API's middleware, over ASGI."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI

from strata_serve.errors import install_handlers
from strata_serve.guards import Deadline

TIMEOUT_S = 0.2


def app_with(done: list[str], release: asyncio.Event) -> FastAPI:
    app = FastAPI()
    install_handlers(app)
    app.add_middleware(Deadline, timeout_s=lambda: TIMEOUT_S)

    @app.post("/slow")
    async def slow(body: dict[str, str]) -> dict[str, str]:
        await release.wait()
        done.append(body["text"])
        return {"stored": body["text"]}

    @app.get("/quick")
    async def quick() -> dict[str, bool]:
        return {"ok": True}

    return app


async def test_a_slow_write_gets_a_504_and_still_completes() -> None:
    done: list[str] = []
    release = asyncio.Event()
    transport = httpx.ASGITransport(app=app_with(done, release))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post("/slow", json={"text": "kept"})
        assert answer.status_code == 504 and answer.headers["retry-after"] == "5"
        body = answer.json()
        assert body["error"] == "Timeout" and body["timeout_s"] == TIMEOUT_S
        assert "0.2 s" in body["message"] and "Idempotency-Key" in body["message"]
        assert done == []  # not applied yet, and not cancelled either:
        release.set()
        for _ in range(50):
            if done:
                break
            await asyncio.sleep(0.01)
        assert done == ["kept"]
        assert (await client.get("/quick")).json() == {"ok": True}  # within the deadline: untouched


async def test_a_read_in_time_is_answered_as_is() -> None:
    release = asyncio.Event()
    release.set()
    transport = httpx.ASGITransport(app=app_with([], release))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post("/slow", json={"text": "x"})
    assert answer.status_code == 200 and answer.json() == {"stored": "x"}
