"""Phase 3: many tenants, the stack's memory with all of them loaded, and cold tenants.

Every tenant gets its own key, turns and a document, then its context call (four at a
time). Memory is RSS summed over the stack's processes (:func:`stack_memory`). Cold
tenants: the layer actors are restarted (Ray brings them back empty), then each sampled
tenant's first context call (loaded from Milvus) and second (warm) are timed, on a stack
the benchmark started only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

import numpy as np

from strata_bench.service.sizes import Sizes
from strata_bench.service.text import TextSource, make_sessions
from strata_bench.service.timing import Phases, Ticker, pool, summary
from strata_bench.stats import processes_memory
from strata_bench.target import RAW, MeasuredStack, Target
from strata_serve.client import AsyncStrataClient

__all__ = ["SCALE_WRITE_ATTEMPTS", "measure_scale", "stack_memory", "stack_pids", "wait_for_summaries"]


def stack_pids(stack: MeasuredStack | None) -> Callable[[], list[int]] | None:
    """What lists the stack's processes (:meth:`~strata_bench.target.MeasuredStack.processes`),
    or None for a stack that is not ours to count (a cluster's, or one known by its URL only)."""
    if stack is None or stack.settings.ray.address:
        return None
    return stack.processes


def stack_memory(stack: MeasuredStack | None) -> dict[str, Any] | None:
    """RSS and PSS over the stack's processes (:func:`~strata_bench.stats.processes_memory`): the Ray
    head's, found by its temp dir in their command lines, their children, and milvus-lite."""
    pids = stack_pids(stack)
    return None if pids is None else processes_memory(pids())


async def _admin(client: Any, method: str, path: str, admin_key: str, body: Any = None) -> Any:
    response = await client.request(method, path, json=body, headers={"Authorization": f"Bearer {admin_key}"})
    response.raise_for_status()
    return response.json()


#: Attempts of one write of the scale phase: a write that timed out on a loaded machine is
#: sent again (turns with their ids: one that landed is answered "replayed"; a document whose
#: first attempt is still being indexed answers 409 until it is done), 2, 4, 8 and 16 s apart.
SCALE_WRITE_ATTEMPTS = 5


async def _retried(write: Callable[[], Awaitable[Any]], retries: list[str]) -> Any:
    """``write()``, sent again after a 5xx or a timeout; what each retry answered goes to ``retries``."""
    from strata.errors import InvalidInput, NotFound, Unauthorized

    for attempt in range(SCALE_WRITE_ATTEMPTS):
        try:
            return await write()
        except (InvalidInput, NotFound, Unauthorized):
            raise
        except Exception as exc:
            if attempt == SCALE_WRITE_ATTEMPTS - 1:
                raise
            retries.append(f"{type(exc).__name__}: {str(exc)[:120]}")
            print(f"  retrying a write after {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            await asyncio.sleep(2.0 * 2**attempt)


async def _scale_ingest(url: str, admin_key: str, source: TextSource, sizes: Sizes, run_id: str,
                        retries: list[str]) -> list[tuple[str, str, str]]:
    """Create ``sizes.tenants`` tenants (key, turns, one document); returns (tenant, key, session)."""
    import httpx

    tenants: list[tuple[str, str, str]] = []
    now = datetime.now(UTC)
    tick = Ticker("tenants", sizes.tenants, "tenants ingested")
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        async def one(n: int, _: int) -> None:
            tenant = f"bench-{run_id}-t{n:04d}"
            created = await _admin(http, "POST", "/v1/admin/keys", admin_key,
                                   {"tenant": tenant, "name": "strata bench"})
            sessions = make_sessions(source, sizes.tenant_turns, "chat", now=now)
            title, text = source.document(n, paragraphs=2)
            async with AsyncStrataClient(url, created["key"], timeout_s=300, **RAW) as client:
                for session, turns in sessions:
                    await _retried(partial(client.record_turns, session, turns), retries)
                await _retried(partial(client.index_document, text, doc_id="notes", title=title), retries)
            tenants.append((tenant, created["key"], sessions[-1][0]))
            tick(len(tenants))

        await pool(list(range(sizes.tenants)), 4, one)
    return tenants


async def _contexts(url: str, tenants: Sequence[tuple[str, str, str]], question: str, *, label: str,
                    workers: int = 1, calls: int = 1) -> dict[str, Any]:
    """``calls`` context calls per tenant, one after the other, ``workers`` tenants at a time:
    the latency of each call by its position (0: the first), how many answered, which layers missed."""
    ms: list[list[float]] = [[] for _ in range(calls)]
    answered = complete = 0
    missing: dict[str, int] = {}
    tick = Ticker(label, len(tenants), "tenants")
    done = [0]

    async def one(item: tuple[str, str, str], _: int) -> None:
        nonlocal answered, complete
        tenant, key, session = item
        async with AsyncStrataClient(url, key, timeout_s=120, **RAW) as client:
            for n in range(calls):
                t0 = time.perf_counter()
                try:
                    result = await client.build_context(question, session, task_type="planning")
                except Exception as exc:
                    print(f"  {tenant}: context failed: {type(exc).__name__}: {exc}", flush=True)
                    continue
                ms[n].append((time.perf_counter() - t0) * 1000)
                if n == 0:
                    answered += 1
                    complete += not result.missing
                    for layer in result.missing:
                        missing[layer] = missing.get(layer, 0) + 1
        done[0] += 1
        tick(done[0])

    await pool(tenants, workers, one)
    return {"calls": [summary(m) for m in ms], "answered": answered, "complete": complete,
            "first_calls_missing_layer": missing}


def _restart_layer_actors(stack: Any) -> float:
    """Kill every layer actor and let Ray restart it (no tenant loaded); wait until all answer."""
    import httpx
    import ray

    from strata_actors.router import LayerRouter

    started = time.perf_counter()
    stack.ensure_ray_client()
    for handle in LayerRouter(stack.settings).every_handle():
        ray.kill(handle, no_restart=False)
    time.sleep(1.0)
    deadline, healthy, said = time.monotonic() + 300, 0, time.monotonic()
    while healthy < 2:  # twice in a row: every shard answered its ping (its store is open)
        if time.monotonic() > deadline:
            raise RuntimeError("the layer actors did not come back within 300 s")
        if time.monotonic() - said > 5:
            said = time.monotonic()
            print(f"  waiting for the layer actors to answer ({time.perf_counter() - started:.0f} s)", flush=True)
        try:
            healthy = healthy + 1 if httpx.get(stack.url + "/healthz", timeout=30).status_code == 200 else 0
        except httpx.HTTPError:
            healthy = 0
        time.sleep(0.5)
    return time.perf_counter() - started


def _tenants_in_memory(stack: Any) -> dict[str, list[int]] | None:
    """Tenants each layer shard holds in memory (its ping), by layer; None without a stack."""
    if stack is None:
        return None
    from strata_actors.router import LAYER_CLASSES, LayerRouter

    stack.ensure_ray_client()
    router = LayerRouter(stack.settings)

    async def pings() -> dict[str, list[int]]:
        return {layer: [ping["tenants_loaded"] for ping in await asyncio.wait_for(
                    asyncio.gather(*(h.ping() for h in router.layer_shards(layer))), timeout=120)]
                for layer in LAYER_CLASSES}

    return asyncio.run(pings())


def wait_for_summaries(stack: Any, tenants: Sequence[str], *, timeout_s: float = 900.0) -> float | None:
    """Wait until the tenants' background summaries are made (in-cluster); seconds waited."""
    if stack is None:
        return None
    from strata_actors.orchestration import Orchestration

    async def no_embed(texts: Sequence[str]) -> np.ndarray:
        raise AssertionError("waiting for summaries embeds nothing here")

    async def wait() -> None:
        flow = Orchestration(stack.settings, embed=no_embed, embed_query=no_embed)
        tick = Ticker("summaries", len(tenants), "tenants")
        for n, tenant in enumerate(tenants):
            while True:
                pending = asyncio.ensure_future(flow.wait_for_summaries(tenant))
                while not pending.done():
                    await asyncio.wait([pending], timeout=5)
                    if not pending.done():
                        print(f"  waiting for {tenant}'s background summaries "
                              f"({time.perf_counter() - started:.0f} s)", flush=True)
                if not pending.result() or time.perf_counter() - started > timeout_s:
                    break  # none left, or given up on (the chunks still pending are the actor's to retry)
            tick(n + 1)

    started = time.perf_counter()
    stack.ensure_ray_client()
    asyncio.run(wait())
    return time.perf_counter() - started


def measure_scale(found: Target, sizes: Sizes, source: TextSource, run_id: str, *, admin_key: str | None,
                  question: str, store: tuple[Any, Any] | None, phase: Phases) -> dict[str, Any]:
    stack = found.stack
    issued = keys = None
    if admin_key is None and store is not None:
        from strata.access.keys import open_keys

        keys = open_keys(store[0], store[1])
        issued = keys.issue_admin(name="strata bench (temporary)")
        admin_key = issued.key
    if admin_key is None:
        print("  skipped: creating tenants needs an admin key (--admin-key) for a stack given by --url", flush=True)
        return {"tenants": 0, "skipped": "no admin key (--admin-key)"}
    try:
        retries: list[str] = []
        with phase("scale_ingest"):
            tenants = asyncio.run(_scale_ingest(found.url, admin_key, source, sizes, run_id, retries))
        with phase("scale_summaries"):
            waited = wait_for_summaries(stack, [t for t, _, _ in tenants])
        out: dict[str, Any] = {"tenants": len(tenants), "ingest_seconds": phase.seconds["scale_ingest"],
                               "ingest_retries": retries,
                               "summaries_wait_s": round(waited, 1) if waited is not None else None}
        out["memory_loaded"] = stack_memory(stack)
        out["tenants_in_memory_after_ingest"] = _tenants_in_memory(stack)
        with phase("answers"):
            out["resident"] = asyncio.run(_contexts(found.url, tenants, question, label="every tenant's context",
                                                    workers=4))
        out["memory_after_answers"] = stack_memory(stack)
        out["tenants_in_memory_after_answers"] = _tenants_in_memory(stack)
        if found.scratch and stack is not None:
            print("  restarting the layer actors: every tenant leaves memory", flush=True)
            with phase("restart"):
                out["restart_s"] = round(_restart_layer_actors(stack), 1)
            sample = tenants[:: max(1, len(tenants) // sizes.cold_tenants)][: sizes.cold_tenants]
            with phase("cold_pass"):
                timed = asyncio.run(_contexts(found.url, sample, question, label="cold tenants", calls=2))
            out.update(cold=timed["calls"][0], warm=timed["calls"][1], cold_sample=len(sample),
                       cold_complete=timed["complete"], cold_calls_missing_layer=timed["first_calls_missing_layer"])
            out["memory_after_cold_pass"] = stack_memory(stack)
        else:
            out["cold"] = {"skipped": "cold tenants are measured on a scratch stack only (its actors are restarted)"}
        if not found.scratch:
            with phase("clean_up"):
                asyncio.run(_forget_tenants(found.url, admin_key, [t for t, _, _ in tenants]))
        return out
    finally:
        if issued is not None and keys is not None and not found.scratch:
            keys.revoke(issued.key_id)


async def _forget_tenants(url: str, admin_key: str, tenants: list[str]) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        await pool(tenants, 4, lambda t, _: _admin(http, "DELETE", f"/v1/admin/tenants/{t}", admin_key))
