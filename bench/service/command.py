"""``strata bench``: its options, every phase in order against the stack, then the report."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import time
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strata_bench import target as bench_target
from strata_bench.service.floor import (
    EMBED_FLOOR_SAMPLE,
    EMBED_QUERY_SAMPLE,
    LOCAL_EMBEDDERS,
    compare_embedders,
    embed_floor,
    embed_rates,
    floor_from_store,
    floor_in_memory,
    measure_floor,
)
from strata_bench.service.hostile import BODY_MARGIN_BYTES, measure_hostile, text_write_cpu_ms
from strata_bench.service.ingest import ingest, read_your_writes
from strata_bench.service.latency import measure_latency
from strata_bench.service.report import embedder_lines, format_report, plot, summarize
from strata_bench.service.scale import measure_scale, stack_memory, stack_pids, wait_for_summaries
from strata_bench.service.sizes import FULL, QUICK, SESSION_TURNS, Sizes
from strata_bench.service.text import TextSource, make_sessions
from strata_bench.service.timing import Phases
from strata_bench.stats import median
from strata_bench.target import FindTarget, Target
from strata_serve.client import AsyncStrataClient

__all__ = ["DEFAULT_SENTENCES", "add_arguments", "measure", "run"]

DEFAULT_SENTENCES = Path("../shared/bench/locomo10.json")


def measure(found: Target, sizes: Sizes, source: TextSource, *, admin_key: str | None,
            config: str | None = None, hostile: bool = True, quick: bool = False) -> dict[str, Any]:
    """Every phase against ``found``; the raw result that :func:`summarize` reads. ``hostile``:
    run the latency phase's context calls again beside a hostile neighbour (:mod:`.hostile`).
    ``quick``: compare the local embedding models on a fifth of the texts and half the queries
    (e5 is several times slower per text than MiniLM: on a small machine the full comparison
    takes minutes)."""
    from strata.config import load_settings
    from strata.providers.embedder import make_embedder
    from strata_actors.episodic import turn_text

    stack = found.stack
    settings = stack.settings if stack is not None else load_settings(config)
    store = None
    if stack is not None:  # the stack's own store: the floor's rows, key lookups, an admin key
        from strata.store.layout import open_store

        store = open_store(settings)
    run_id = uuid.uuid4().hex[:6]
    tenant = "demo" if stack is not None else None  # a --url key's tenant is not known here
    now = datetime.now(UTC)
    sessions = make_sessions(source, sizes.turns, f"bench-{run_id}", now=now)
    documents = [(f"bench-{run_id}-d{n:04d}", *source.document(n, paragraphs=8)) for n in range(sizes.documents)]
    queries = source.questions(60)
    out: dict[str, Any] = {"sizes": asdict(sizes), "text": source.origin, "run_id": run_id, "phase_seconds": {}}
    phase = Phases(out["phase_seconds"])

    texts = [turn_text(t) for _, turns in sessions for t in turns]
    sample = texts[:: max(1, len(texts) // EMBED_FLOOR_SAMPLE)][:EMBED_FLOOR_SAMPLE]
    cores = min(os.cpu_count() or 1, 64)  # the most threads EmbeddingSettings allows
    threads = settings.embedding.threads
    print(f"\n[1/4] embedding floor: {len(sample)} of the turn texts in this process, on one thread and on {cores}",
          flush=True)
    with phase("embed_floor"):
        embedder = make_embedder(settings.embedding)
        rates = embed_rates(settings.embedding, sample, threads=(1, cores, threads))
        # With no stack's rows to read, the in-process floor is built from every generated turn's vector.
        vectors = embed_floor(embedder, texts)[1] if store is None else None
    out["embed_floor"] = {"turns_per_s": round(rates[threads], 1), "texts": len(sample), "threads": threads,
                          "one_thread_turns_per_s": round(rates[1], 1),
                          "all_cores_turns_per_s": round(rates[cores], 1), "all_cores_threads": cores}
    # Every local model on the same texts, so a user can choose one: the full run reuses the
    # configured model's rates just measured on them; the quick one measures a fifth of them.
    model_texts = sample[::5] if quick else sample
    model_queries = queries[: EMBED_QUERY_SAMPLE // 2 if quick else EMBED_QUERY_SAMPLE]
    print(f"  then the local embedding models ({', '.join(LOCAL_EMBEDDERS)}): ingest and query latency", flush=True)
    with phase("embed_models"):
        out["embedders"] = compare_embedders(model_texts, model_queries, cores, settings=settings.embedding,
                                             measured=None if quick else {settings.embedding.provider: rates})
    for line in embedder_lines(out["embedders"]):
        print(f"  {line}", flush=True)

    print(f"\n[2/4] ingest over HTTP: {sizes.turns} turns in batches of {SESSION_TURNS}, "
          f"then {sizes.documents} documents", flush=True)
    with phase("ingest"):
        out["ingest"] = asyncio.run(ingest(found.url, found.key, sessions, documents, pids=stack_pids(stack)))
        probes = list(dict.fromkeys(u for u, _ in source.turns(40)))[:3]  # three different sentences
        out["read_your_writes"] = asyncio.run(read_your_writes(found.url, found.key, f"bench-{run_id}-ryw", probes))
        sessions_written = [s for s, _ in sessions] + [f"bench-{run_id}-ryw"]
        waited = wait_for_summaries(stack, [tenant] if tenant else [])
    out["ingest"]["summaries_wait_s"] = round(waited, 2) if waited is not None else None

    print(f"\n[3/4] latency: floor in this process, then {sizes.clients} concurrent HTTP clients", flush=True)
    with phase("floor"):
        if store is not None and tenant is not None:
            floor = floor_from_store(store[0], store[1], tenant, settings, session_id=sessions[-1][0])
            out["floor_source"] = "the tenant's rows in the stack's Milvus (turns, summaries, chunks)"
        else:
            floor = floor_in_memory("bench", sessions, documents, embedder=embedder, settings=settings, vectors=vectors)
            out["floor_source"] = "the generated data in an InMemoryRecordStore (no summaries)"

        def context_floor(floor: Any) -> dict[str, Any]:
            return measure_floor(floor, embedder, queries, top_k=settings.context.default_top_k,
                                 context=settings.context, encoding=settings.working.encoding)

        out["floor"] = {"context": context_floor(floor),
                        "search": measure_floor(floor, embedder, queries, top_k=10),
                        "episodic_turns": floor.episodic.turn_count,
                        "episodic_summaries": len(floor.episodic.summaries()), "semantic": floor.semantic.stats()}
    with phase("latency"):
        out["latency"] = asyncio.run(measure_latency(found.url, found.key, queries, sessions[-1][0], sizes,
                                                     pids=stack_pids(stack)))
    # The same floor once more: the stack's phase between two floor runs shows how far the
    # machine's speed moved while the ratios' two sides were measured.
    with phase("floor_again"):
        out["floor_again"] = {"context": context_floor(floor)}
        del floor
    out["key_lookup_ms"] = {"after_one_tenant": _key_lookup_ms(store, found.key)}
    out["memory_one_tenant"] = stack_memory(stack)
    if hostile:  # after the memory snapshot: reading the neighbour's maximal bodies may leave the ingress larger
        print(f"  and again beside a hostile neighbour: {sizes.clients} clients' context calls while one more "
              "client sends worst-case inputs", flush=True)
        with phase("hostile_text"):  # in this process, before the neighbour: nothing else runs beside it
            text_cpu = text_write_cpu_ms(embedder, settings)
        with phase("hostile"):
            out["hostile"] = asyncio.run(measure_hostile(
                found.url, found.key, queries, sessions[-1][0], sizes,
                body_bytes=settings.serve.max_body_bytes - BODY_MARGIN_BYTES, pids=stack_pids(stack)))
        out["hostile"]["text_write_cpu_ms"] = text_cpu
    else:
        out["hostile"] = {"skipped": "--no-hostile"}

    print(f"\n[4/4] scale: {sizes.tenants} tenants with {sizes.tenant_turns} turns and a document each", flush=True)
    out["scale"] = measure_scale(found, sizes, source, run_id, admin_key=admin_key, question=queries[1],
                                 store=store, phase=phase)
    out["key_lookup_ms"]["after_scale"] = _key_lookup_ms(store, found.key)
    if not found.scratch:
        with phase("clean_up"):
            asyncio.run(_clean_up(found, sessions_written, documents))
    return out


def _key_lookup_ms(store: tuple[Any, Any] | None, key: str) -> float | None:
    """Median ms of one API-key store read, from here: what a replica's key cache pays about once a
    second per key in use (in the background once the key is cached), not every request."""
    if store is None:
        return None
    from strata.access.keys import open_keys

    keys = open_keys(store[0], store[1])
    ms = []
    for _ in range(11):
        t0 = time.perf_counter()
        keys.lookup(key)
        ms.append((time.perf_counter() - t0) * 1000)
    return round(median(ms), 1)


async def _clean_up(found: Target, sessions: list[str], documents: list[tuple[str, str, str]]) -> None:
    """Remove what the benchmark wrote to a stack it did not start."""
    async with AsyncStrataClient(found.url, found.key, timeout_s=120) as client:
        for session in sessions:
            await client.forget_session(session)
        for doc_id, _, _ in documents:
            await client.delete_document(doc_id)


def _machine() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo")
    total = re.search(r"MemTotal:\s+(\d+)", meminfo.read_text()) if meminfo.exists() else None
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "memory_mib": round(int(total.group(1)) / 1024) if total else None,
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "load_average_start": os.getloadavg()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``strata bench``: the stack's (:mod:`strata_bench.target`) and the run's."""
    bench_target.add_arguments(parser)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.turns} turns, {QUICK.documents} documents, {QUICK.tenants} tenants "
                        "(about 3 minutes)")
    parser.add_argument("--plot", metavar="OUT.png", help="draw latency and ingest against their floors")
    parser.add_argument("--admin-key", help="with --url: an admin key, to create the scale phase's tenants")
    parser.add_argument("--tenants", type=int, help="tenants of the scale phase (default 1000; --quick 100)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients of the latency phase")
    parser.add_argument("--no-hostile", action="store_true",
                        help="skip the hostile-neighbour phase (the context calls again beside worst-case inputs)")
    parser.add_argument("--sentences", type=Path, default=DEFAULT_SENTENCES,
                        help="LoCoMo JSON to draw sentences from, if it exists (else templates only)")


def run(args: argparse.Namespace, find_target: FindTarget) -> int:
    """``strata bench`` against the stack ``find_target`` finds from ``args``: 1 when a correctness
    check fails (read-your-writes, a tenant not answering)."""
    sizes = QUICK if args.quick else FULL
    sizes = Sizes(**{**asdict(sizes), "clients": args.clients, "tenants": args.tenants or sizes.tenants})
    source = TextSource(args.sentences)
    machine = _machine()
    print(f"service benchmark ({'quick' if args.quick else 'full'}): text from {source.origin}", flush=True)
    started = time.perf_counter()
    with find_target(args) as found:
        stack_s = time.perf_counter() - started
        measured = time.perf_counter()
        raw = measure(found, sizes, source, admin_key=args.admin_key, config=args.config, hostile=not args.no_hostile,
                      quick=args.quick)
        raw["seconds"] = {"stack_start": round(stack_s, 1), "measuring": round(time.perf_counter() - measured, 1)}
        raw["stack"] = {"url": found.url, "scratch": found.scratch}
    raw["seconds"]["total"] = round(time.perf_counter() - started, 1)
    machine["load_average_end"] = os.getloadavg()
    doc = summarize(raw, machine=machine)
    print(format_report(doc))
    print(f"\nmeasured in {raw['seconds']['measuring']} s (stack start {raw['seconds']['stack_start']} s, "
          f"total with stop {raw['seconds']['total']} s) on {machine['cpu_count']} cores, "
          f"load average {machine['load_average_start'][0]:.1f} at the start, "
          f"{machine['load_average_end'][0]:.1f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
        print(f"wrote {args.json}")
    if args.plot:
        plot(doc, args.plot)
        print(f"wrote {args.plot}")
    scale = raw["scale"]
    ok = doc["read_your_writes"] and scale.get("resident", {}).get("answered", doc["tenants"]) == doc["tenants"]
    return 0 if ok else 1
