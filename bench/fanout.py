"""``strata bench contention`` and ``strata bench fanout``: two claims of the
fan-out (the ingress's Orchestration) and the procedural layer, measured over HTTP.

- **contention**: many clients record outcomes of one skill at once, with
  the server-side atomic increment and with read-modify-write under
  ``If-Match``; no update may be lost, so the final total is exact.
- **fanout**: the context call over all four layers against each single
  layer; the layers are fetched concurrently, so the four-layer call costs
  about the slowest layer, not the sum.

Both run against the stack given by ``--url`` / ``--api-key``, else the one
``strata up`` runs in ``--data-dir``, else one they start on free ports in a
scratch directory (and stop afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

from strata.errors import VersionConflict
from strata_bench.stats import latency_ms
from strata_bench.target import RAW, FindTarget, add_arguments
from strata_serve.client import AsyncStrataClient, StrataClient

__all__ = ["LAYER_SETS", "add_arguments", "contention", "fanout", "run"]


# -- contention ------------------------------------------------------------------

_TRACE = [
    {"command": "git clone https://git.example.com/team/service.git"},
    {"command": "pytest -q tests/", "error": "ModuleNotFoundError: No module named 'yaml'"},
    {"command": "pip install pyyaml==6.0.1"},
    {"command": "pytest -q tests/", "output": "42 passed"},
]


async def _bench_skill(client: AsyncStrataClient, mode: str) -> str:
    # A task unlike any other skill, so it is a new skill and not merged into one.
    task = f"contention benchmark {mode} {uuid.uuid4().hex} run the flaky test suite of a service"
    skill = await client.extract_skill(task, _TRACE, outcome="the suite passes")
    if skill.merged or skill.uses:
        await client.delete_skill(skill.skill_id)
        raise RuntimeError("the benchmark skill merged into an existing one; run again")
    return skill.skill_id


async def _with_progress(mode: str, total: int, done: list[int], work: Any) -> float:
    """Run ``work``, printing how far it got every few seconds; returns its wall time."""

    async def report() -> None:
        while True:
            await asyncio.sleep(5)
            print(f"  {mode}: {done[0]}/{total} updates", flush=True)

    started = time.perf_counter()
    reporter = asyncio.ensure_future(report())
    try:
        await work
    finally:
        reporter.cancel()
    return time.perf_counter() - started


async def _atomic(url: str, key: str, skill_id: str, clients: int, updates: int) -> dict[str, Any]:
    done = [0]

    async def one(client: AsyncStrataClient) -> None:
        for n in range(updates):
            await client.record_outcome(skill_id, n % 5 != 0)
            done[0] += 1

    pool = [AsyncStrataClient(url, key, timeout_s=120, **RAW) for _ in range(clients)]
    elapsed = await _with_progress("atomic", clients * updates, done, asyncio.gather(*(one(c) for c in pool)))
    final = await pool[0].get_skill(skill_id)
    await asyncio.gather(*(c.aclose() for c in pool))
    return {"final_total": final.uses, "successes": final.successes, "seconds": round(elapsed, 2),
            "updates_per_s": round(clients * updates / elapsed, 1), "version": final.version}


async def _if_match(url: str, key: str, skill_id: str, clients: int, updates: int) -> dict[str, Any]:
    conflicts = 0
    done = [0]
    rng = random.Random(11)  # noqa: S311  a seeded workload, not a secret

    async def one(client: AsyncStrataClient) -> None:
        nonlocal conflicts
        version = (await client.get_skill(skill_id)).version
        for n in range(updates):
            lost = 0
            while True:
                try:
                    version = (await client.record_outcome(skill_id, n % 5 != 0, expected_version=version)).version
                    done[0] += 1
                    break
                except VersionConflict as exc:
                    # Someone else won: retry at the version the 409 names, after a
                    # jittered, growing pause so the writers stop colliding in lockstep.
                    conflicts += 1
                    lost += 1
                    version = exc.current_version
                    await asyncio.sleep(rng.uniform(0, min(0.25, 0.004 * 2**lost)))

    pool = [AsyncStrataClient(url, key, timeout_s=120, **RAW) for _ in range(clients)]
    elapsed = await _with_progress("if_match", clients * updates, done, asyncio.gather(*(one(c) for c in pool)))
    final = await pool[0].get_skill(skill_id)
    await asyncio.gather(*(c.aclose() for c in pool))
    return {"final_total": final.uses, "successes": final.successes, "conflicts": conflicts,
            "seconds": round(elapsed, 2), "updates_per_s": round(clients * updates / elapsed, 1),
            "version": final.version}


async def contention(url: str, key: str, *, clients: int = 16, updates: int = 50) -> dict[str, Any]:
    """Both update modes on a fresh skill each; the skills are deleted afterwards."""
    results: dict[str, Any] = {"clients": clients, "updates_per_client": updates, "expected_total": clients * updates}
    async with AsyncStrataClient(url, key, timeout_s=120, **RAW) as admin:
        for mode, fn in (("atomic", _atomic), ("if_match", _if_match)):
            skill_id = await _bench_skill(admin, mode)
            try:
                results[mode] = await fn(url, key, skill_id, clients, updates)
            finally:
                await admin.delete_skill(skill_id)
    return results


def _print_contention(r: dict[str, Any]) -> None:
    print(f"\n{r['clients']} clients x {r['updates_per_client']} outcome updates on one skill "
          f"(expected total {r['expected_total']})")
    print(f"{'mode':10} {'final total':>12} {'409 retries':>12} {'updates/s':>10} {'seconds':>8}")
    for mode in ("atomic", "if_match"):
        m = r[mode]
        print(f"{mode:10} {m['final_total']:>12} {m.get('conflicts', '-'):>12} {m['updates_per_s']:>10} "
              f"{m['seconds']:>8}")
    lost = [mode for mode in ("atomic", "if_match") if r[mode]["final_total"] != r["expected_total"]]
    print("no update lost" if not lost else f"LOST UPDATES in {', '.join(lost)}")


# -- fan-out -----------------------------------------------------------------------

_TOPICS = [
    ("payments", "The payments service retries a failed charge three times with exponential backoff."),
    ("search", "The search cluster reindexes nightly at 02:00 UTC and serves reads from replicas."),
    ("auth", "Login tokens expire after 15 minutes; refresh tokens last 30 days and rotate on use."),
    ("deploy", "Deployments go through staging first; a canary takes 5 % of traffic for 20 minutes."),
    ("billing", "Invoices are generated on the first day of the month from the usage table."),
    ("alerts", "A page fires when the error rate stays above 2 % for five minutes."),
    ("database", "The primary Postgres database fails over to the replica in under 30 seconds."),
    ("cache", "Redis keys for sessions carry a TTL of one hour and are evicted by LRU."),
]

LAYER_SETS: dict[str, list[str]] = {
    "working only": [],
    "episodic": ["episodic"],
    "semantic": ["semantic"],
    "procedural": ["procedural"],
    "all four": ["episodic", "semantic", "procedural"],
}


def _seed(client: StrataClient, session: str, *, turns: int, docs: int, skills: int) -> None:
    rng = random.Random(7)  # noqa: S311  a seeded workload, not a secret
    batch = []
    for n in range(turns):
        name, fact = _TOPICS[n % len(_TOPICS)]
        batch.append({"user": f"What do we know about {name}? ({n})", "agent": f"{fact} Noted on day {n}."})
    client.record_turns(session, batch)
    for n in range(docs):
        name, fact = _TOPICS[n % len(_TOPICS)]
        paragraphs = [f"# {name.title()} runbook {n}"] + [
            f"{fact} Step {k}: check the {name} dashboard, then {rng.choice(['restart', 'scale', 'drain'])} "
            f"the {name} workers in region {rng.choice(['eu-1', 'us-2', 'ap-3'])}." for k in range(12)
        ]
        client.index_document("\n\n".join(paragraphs), doc_id=f"bench-fanout-{n}", title=f"{name} runbook {n}")
    for n in range(skills):
        name, _ = _TOPICS[n % len(_TOPICS)]
        trace = [
            {"command": f"kubectl -n {name} get pods"},
            {"command": f"kubectl -n {name} rollout restart deploy/{name}-{n}", "error": "forbidden: RBAC"},
            {"command": f"kubectl --context admin -n {name} rollout restart deploy/{name}-{n}"},
        ]
        client.extract_skill(f"restart the {name} workers after a stuck rollout, variant {n}", trace)


def fanout(url: str, key: str, *, calls: int = 60, warmup: int = 5) -> dict[str, Any]:
    """p50/p95 of /v1/context per layer set, the sets interleaved call by call so they share the noise."""
    session = f"bench-fanout-{uuid.uuid4().hex[:8]}"
    with StrataClient(url, key, timeout_s=120, **RAW) as client:
        print("seeding 200 turns, 8 documents and 8 skills", flush=True)
        _seed(client, session, turns=200, docs=8, skills=8)
        questions = [f"how do I restart the {name} workers and what do we know about {name}?" for name, _ in _TOPICS]
        timings: dict[str, list[float]] = {name: [] for name in LAYER_SETS}
        missing: dict[str, int] = {name: 0 for name in LAYER_SETS}
        print(f"measuring {calls} calls per layer set after {warmup} warm-ups, the sets interleaved", flush=True)
        for n in range(warmup + calls):
            if n > warmup and (n - warmup) % 20 == 0:
                print(f"  {n - warmup}/{calls}", flush=True)
            for name, layers in LAYER_SETS.items():
                started = time.perf_counter()
                result = client.build_context(questions[n % len(questions)], session, layers=layers)  # type: ignore[arg-type]
                elapsed = (time.perf_counter() - started) * 1000
                if n >= warmup:
                    timings[name].append(elapsed)
                    missing[name] += bool(result.missing)
        client.forget_session(session)
        for n in range(8):
            client.delete_document(f"bench-fanout-{n}")
    report: dict[str, Any] = {
        name: {**latency_ms(t, quantiles=(0.5, 0.95)), "calls": len(t), "calls_with_missing_layers": missing[name]}
        for name, t in timings.items()
    }
    slowest = max(report[name]["p50_ms"] for name in ("episodic", "semantic", "procedural"))
    report["ratio_all_to_slowest_single_p50"] = round(report["all four"]["p50_ms"] / slowest, 2)
    return report


def _print_fanout(r: dict[str, Any]) -> None:
    print("\n/v1/context latency by layers read (working memory always), sequential calls")
    print(f"{'layers':12} {'p50 ms':>8} {'p95 ms':>8} {'calls':>6}")
    for name in LAYER_SETS:
        print(f"{name:12} {r[name]['p50_ms']:>8} {r[name]['p95_ms']:>8} {r[name]['calls']:>6}")
    ratio = r["ratio_all_to_slowest_single_p50"]
    verdict = "within" if ratio <= 1.5 else "OVER"
    print(f"four layers p50 / slowest single layer p50 = {ratio} ({verdict} the 1.5x target); "
          "'working only' is the floor every call pays")


# -- CLI ----------------------------------------------------------------------------


def run(args: argparse.Namespace, which: str, find_target: FindTarget) -> int:
    """``strata bench contention`` or ``fanout`` (``which``) against the stack ``find_target`` finds
    from ``args``; 1 when an update was lost."""
    with find_target(args) as (url, key, _, _):
        if which == "contention":
            result = asyncio.run(contention(url, key, clients=args.clients, updates=args.updates))
            _print_contention(result)
            ok = all(result[m]["final_total"] == result["expected_total"] for m in ("atomic", "if_match"))
        else:
            result = fanout(url, key, calls=args.calls)
            _print_fanout(result)
            ok = True
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0 if ok else 1
