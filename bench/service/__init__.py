"""``strata bench`` without a sub-benchmark: the service measured over HTTP in one run
(latency, ingest, scale), each figure next to a floor measured in the same run.

1. **Ingest.** One tenant gets ``turns`` turns, in sessions of 100, each session one
   ``POST /v1/sessions/{id}/turns/batch`` (two writers at once), then ``documents``
   documents. Sustained turns/s = turns / wall time of the batches; the episodic
   summaries the batches start are made in the background, so the rate counting
   the wait for them is printed too. Floor: the packaged embedder embedding the
   same turn texts in this process, 100 at a time. Read-your-writes: a turn with a
   unique marker is written, and the very next ``/v1/search`` must rank it first.
2. **Latency.** ``clients`` concurrent HTTP clients call ``/v1/context`` (task type
   ``planning``: working, episodic and semantic memory), then ``/v1/search``
   (episodic + semantic), with questions drawn from the data; one client alone as
   well, which separates queueing from the cost of a call. Floor: the same
   questions in this process, with no Ray, Serve or HTTP: embed the query, then
   search :class:`~strata.episodic.memory.EpisodicMemory` and
   :class:`~strata.semantic.memory.SemanticMemory` loaded from the stack's own Milvus rows
   (the same turns, summaries and chunks), one after the other. Against ``--url``
   there is no store to read: the floor is built over
   :class:`~strata.store.records.InMemoryRecordStore` from the generated data (no summaries).
3. **Scale.** ``tenants`` tenants, each with its own key, ``tenant_turns`` turns and
   a document, then every tenant's context call (four at a time), which must answer.
   Memory: RSS summed over the stack's processes (the Ray head's, found by its temp
   dir in their command lines, their children, and milvus-lite), from /proc, with
   every tenant loaded. Cold tenants: the layer actors are restarted (Ray brings
   them back empty), which drops every tenant from memory as idle eviction does
   (README, "Tenants and actors") while the memory figure stays one of N resident
   tenants (a short ``idle_evict_s`` would evict tenants while they are counted).
   Then, one tenant at a time over ``cold_tenants`` of them, the first context call
   (cold: loaded from Milvus) and the second (warm). Only on a stack this command
   started: it does not restart the actors of yours.

The text is generated (varied templates), mixed with LoCoMo's sentences and
questions when ``../shared/bench/locomo10.json`` is there (read locally, never
downloaded). Figures are single runs on a shared machine; the exit status is 1
only when a correctness check fails (read-your-writes, a tenant not answering).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from strata_bench.orchestrator import Target, percentile, target
from strata_serve.client import AsyncStrataClient

__all__ = ["FULL", "QUICK", "Sizes", "TextSource", "add_arguments", "embed_floor", "floor_from_store",
           "floor_in_memory", "format_report", "measure_floor", "pids_naming", "rss_mib", "run", "summarize"]

DEFAULT_SENTENCES = Path("../shared/bench/locomo10.json")
SESSION_TURNS = 100  # turns per session, and per batch request
#: Turn texts the embedder floor embeds when the floor reads the stack's rows (all of them otherwise).
EMBED_FLOOR_SAMPLE = 500
TARGETS: dict[str, tuple[str, float]] = {
    "context_p50_ms": ("<=", 40.0),
    "context_p95_ms": ("<=", 80.0),
    "context_p50_over_floor": ("<=", 3.0),
    "ingest_turns_per_s": (">=", 100.0),
    "embed_floor_over_ingest": ("<=", 2.0),
    "stack_rss_mib": ("<", 8192.0),
    "cold_tenant_p95_ms": ("<=", 1000.0),
}


@dataclass(frozen=True)
class Sizes:
    turns: int
    documents: int
    tenants: int
    tenant_turns: int
    calls_per_client: int
    sequential_calls: int
    #: Tenants, evenly spread over all, whose cold and warm context calls are timed.
    cold_tenants: int
    clients: int = 8


QUICK = Sizes(turns=1000, documents=20, tenants=100, tenant_turns=20, calls_per_client=15, sequential_calls=10,
              cold_tenants=30)
FULL = Sizes(turns=10_000, documents=200, tenants=1000, tenant_turns=100, calls_per_client=100, sequential_calls=50,
             cold_tenants=200)


class _Ticker:
    """Prints ``label: done/total unit`` at most every ``every_s`` (progress of long phases)."""

    def __init__(self, label: str, total: int, unit: str, every_s: float = 5.0) -> None:
        self.label, self.total, self.unit, self.every_s = label, total, unit, every_s
        self.started = self._last = time.perf_counter()

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if now - self._last >= self.every_s:
            self._last = now
            print(f"  {self.label}: {done}/{self.total} {self.unit} ({done / (now - self.started):.1f}/s)", flush=True)


# -- synthetic data ---------------------------------------------------------------

_SLOTS: dict[str, list[str]] = {
    "person": ["Ana", "Marco", "Priya", "Tom", "Yuki", "Lena", "Omar", "Grace", "Sam", "Ines", "Kofi", "Mei"],
    "city": ["Lisbon", "Kyoto", "Oslo", "Porto", "Seville", "Hanoi", "Vancouver", "Tbilisi", "Cork", "Lyon"],
    "month": ["March", "April", "June", "August", "October", "December"],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"],
    "food": ["lentil soup", "mushroom risotto", "pad thai", "shakshuka", "ramen", "falafel", "paella"],
    "hobby": ["bouldering", "watercolour painting", "the cello", "sourdough baking", "trail running", "chess"],
    "project": ["the billing migration", "the mobile app redesign", "the data pipeline", "the onboarding flow"],
    "tool": ["Terraform", "Kubernetes", "Postgres", "Kafka", "Redis", "Grafana", "Airflow"],
    "number": ["3", "12", "45", "120", "250", "1,500"],
    "pet": ["dog Biscuit", "cat Miso", "parrot Kiwi", "rabbit Clover"],
    "book": ["Piranesi", "The Overstory", "Dune", "Educated", "Project Hail Mary"],
}
_USER = [
    "I finally booked the flights to {city} for {month}; {person} is coming with me.",
    "Can you remind me that {person}'s birthday dinner is on {day} at 7?",
    "I tried making {food} last night and it came out far too salty.",
    "We hit a problem with {tool} in {project}: the job fails after {number} retries.",
    "My {pet} has a vet appointment on {day} morning, please keep that in mind.",
    "I've started {hobby} again, twice a week after work.",
    "{person} recommended {book}; I'm about {number} pages in and loving it.",
    "The budget for {project} is capped at {number} thousand euros this quarter.",
    "Please remember that I'm allergic to peanuts and prefer vegetarian places.",
    "I'm thinking of moving to {city} next year for the new job.",
    "Our standup moved to {day} because {person} is out.",
    "I spent the weekend fixing the {tool} dashboards for {project}.",
    "What should I pack for a week in {city} in {month}?",
    "I ran {number} kilometres this month, my best so far.",
    "{person} and I argued about whether to use {tool} for {project}.",
]
_AGENT = [
    "Noted: {city} in {month} with {person}. Want me to track the hotel too?",
    "I'll remind you on {day}. Shall I suggest a restaurant near {city} Street?",
    "Less salt and a splash of lemon usually rescues {food}.",
    "That sounds like a timeout; raising the {tool} client timeout often fixes it.",
    "Got it, {day} morning for the vet. I'll bring it up the day before.",
    "Great! {hobby} twice a week is a good rhythm.",
    "{book} is a good pick; tell me what you think when you finish.",
    "Understood, I'll keep {project} within {number} thousand.",
    "I'll remember that and only suggest places without peanuts.",
    "Moving is a big step; I can compare rents in {city} if you like.",
]
_QUESTIONS = [
    "When am I flying to {city}?", "What did I say about {food}?", "What went wrong with {tool} last week?",
    "When is the vet appointment for my {pet}?", "Which book did {person} recommend?",
    "How much budget does {project} have?", "What are my dietary restrictions?", "What hobby did I pick up again?",
    "What do the runbooks say about {tool} failover?", "Who is coming with me to {city}?",
    "What did we decide about {project} yesterday?", "How far did I run this month?",
]
_DOC_TOPICS = ["payments", "search", "auth", "deploys", "billing", "alerting", "databases", "caching",
               "onboarding", "backups", "networking", "observability"]
_DOC_SENTENCES = [
    "The {topic} service runs {number} replicas behind {tool}, spread over two zones.",
    "On a failure, page the {topic} on-call first; {person} owns the escalation policy.",
    "Restarts of {topic} workers go through a canary that takes five percent of traffic.",
    "Every {day} the {topic} team reviews error budgets and open incidents.",
    "Credentials for {topic} rotate every {number} days and live in the vault.",
    "A full {topic} failover to the standby region takes about {number} seconds.",
    "Latency of {topic} above the SLO for ten minutes opens an incident automatically.",
    "{person} wrote the {topic} playbook after the outage in {month}.",
]


class TextSource:
    """Turns, documents and questions: templates, mixed with LoCoMo's sentences when given."""

    def __init__(self, sentences: Path | None = None, *, seed: int = 7) -> None:
        self._rng = random.Random(seed)
        self._pairs: list[tuple[str, str]] = []
        self._questions: list[str] = []
        self.origin = "templates"
        if sentences is not None and sentences.is_file():
            from strata_bench.evaluation.datasets import load_locomo

            for conversation in load_locomo(sentences).conversations:
                for session in conversation.sessions:
                    turns = [t.text for t in session.turns if t.text.strip()]
                    self._pairs += list(zip(turns[0::2], turns[1::2]))
                self._questions += [q.question for q in conversation.questions]
            self._rng.shuffle(self._pairs)
            self.origin = f"templates and {len(self._pairs)} LoCoMo turn pairs ({sentences})"
        self._cursor = 0

    def _fill(self, template: str, **extra: str) -> str:
        return template.format(**{k: self._rng.choice(v) for k, v in _SLOTS.items()}, **extra)

    def turns(self, n: int) -> list[tuple[str, str]]:
        """``n`` (user, agent) pairs; half from LoCoMo when it was given."""
        out = []
        for _ in range(n):
            if self._pairs and self._rng.random() < 0.5:
                out.append(self._pairs[self._cursor % len(self._pairs)])
                self._cursor += 1
            else:
                out.append((self._fill(self._rng.choice(_USER)), self._fill(self._rng.choice(_AGENT))))
        return out

    def document(self, n: int, *, paragraphs: int) -> tuple[str, str]:
        """A Markdown runbook: (title, text); ~60 words a paragraph."""
        topic = _DOC_TOPICS[n % len(_DOC_TOPICS)]
        title = f"{topic.title()} runbook {n}"
        body = [" ".join(self._fill(self._rng.choice(_DOC_SENTENCES), topic=topic) for _ in range(4))
                for _ in range(paragraphs)]
        return title, f"# {title}\n\n" + "\n\n".join(body)

    def questions(self, n: int) -> list[str]:
        """``n`` questions; half from LoCoMo when it was given."""
        out = []
        for _ in range(n):
            if self._questions and self._rng.random() < 0.5:
                out.append(self._rng.choice(self._questions))
            else:
                out.append(self._fill(self._rng.choice(_QUESTIONS)))
        return out


def _sessions(source: TextSource, turns: int, prefix: str, *, now: datetime) -> list[tuple[str, list[dict[str, Any]]]]:
    """Sessions of ``SESSION_TURNS`` turns, one a day, ending yesterday; turns two minutes apart."""
    count = max(1, -(-turns // SESSION_TURNS))
    out = []
    for s in range(count):
        start = now - timedelta(days=count - s)
        n = min(SESSION_TURNS, turns - s * SESSION_TURNS)
        pairs = source.turns(n)
        # Turn ids of their own make a retried batch safe: turns that landed are answered "replayed".
        out.append((f"{prefix}-s{s:04d}", [{"user": u, "agent": a, "timestamp": start + timedelta(minutes=2 * i),
                                           "turn_id": f"t{i:04d}"} for i, (u, a) in enumerate(pairs)]))
    return out


# -- the in-process floor -----------------------------------------------------------


@dataclass
class Floor:
    """What the in-process floor searches: one tenant's episodic and semantic memory."""

    episodic: Any  # strata.episodic.memory.EpisodicMemory
    semantic: Any  # strata.semantic.memory.SemanticMemory


def embed_floor(embedder: Any, texts: Sequence[str], *, batch: int = SESSION_TURNS) -> tuple[float, np.ndarray]:
    """The embedder's own throughput on ``texts`` (texts/s, ``batch`` per call) and the vectors."""
    tick = _Ticker("embedding floor", len(texts), "turns")
    started = time.perf_counter()
    parts = []
    for i in range(0, len(texts), batch):
        parts.append(embedder.embed(list(texts[i : i + batch])))
        tick(min(i + batch, len(texts)))
    seconds = time.perf_counter() - started
    return len(texts) / seconds, np.vstack(parts)


def _layers(tenant: str, settings: Any, store: Any, collections: Any) -> Floor:
    from strata.episodic.memory import EpisodicMemory
    from strata.providers.tokens import TiktokenCounter
    from strata.retrieval.entities import make_extractor
    from strata.semantic.chunking import make_chunker
    from strata.semantic.memory import SemanticMemory

    episodic = EpisodicMemory(tenant, store=store, collection=collections.episodic, settings=settings.episodic,
                              ttl=settings.ttl)
    chunker = make_chunker(settings.semantic.chunking_for(tenant), TiktokenCounter(settings.working.encoding))
    semantic = SemanticMemory(tenant, store=store, collection=collections.semantic, settings=settings.semantic,
                              chunker=chunker, extractor=make_extractor(None), ttl=settings.ttl)
    return Floor(episodic, semantic)


def floor_from_store(store: Any, collections: Any, tenant: str, settings: Any) -> Floor:
    """The tenant's layers loaded from the stack's store, as a layer actor loads them."""
    floor = _layers(tenant, settings, store, collections)
    floor.episodic.load()
    floor.semantic.load()
    return floor


def floor_in_memory(
    tenant: str,
    sessions: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    documents: Sequence[tuple[str, str, str]],
    *,
    embedder: Any,
    settings: Any,
    vectors: np.ndarray | None = None,
) -> Floor:
    """The same data recorded into layers over an :class:`InMemoryRecordStore`: ``sessions``
    as (session id, turn dicts), ``documents`` as (doc id, title, text); ``vectors`` are
    the turns' embeddings in order, when :func:`embed_floor` made them already."""
    from strata_actors.episodic import turn_text

    from strata.episodic.memory import TurnInput
    from strata.semantic.memory import DocumentInput
    from strata.store.layout import Collections
    from strata.store.records import InMemoryRecordStore

    store, collections = InMemoryRecordStore(), Collections.for_settings(settings)
    for name in (collections.episodic, collections.semantic):
        store.ensure_collection(name, dim=collections.dim)
    floor = _layers(tenant, settings, store, collections)
    now, done = datetime.now(UTC), 0
    for session_id, turns in sessions:
        vecs = vectors[done : done + len(turns)] if vectors is not None else embedder.embed([turn_text(t) for t in turns])
        prepared = floor.episodic.prepare(session_id, [TurnInput(**t) for t in turns], now=now)
        floor.episodic.record(prepared, np.asarray(vecs, dtype=np.float32))
        done += len(turns)
    for doc_id, title, text in documents:
        doc = floor.semantic.prepare(DocumentInput(text=text, doc_id=doc_id, title=title), now=now)
        vecs = embedder.embed(doc.embed_texts())
        floor.semantic.write(doc, vecs)
        floor.semantic.index(doc, vecs)
    return floor


def measure_floor(floor: Floor, embedder: Any, queries: Sequence[str], *, top_k: int, warmup: int = 5) -> dict[str, Any]:
    """Embed + episodic search + semantic search per query, one after the other (ms)."""
    from strata.retrieval.timeparse import resolve_time_range

    parts: dict[str, list[float]] = {"total": [], "embed": [], "episodic": [], "semantic": []}
    now = datetime.now(UTC)
    for n, query in enumerate([*queries[:warmup], *queries]):
        t0 = time.perf_counter()
        vector = embedder.embed([query])[0]
        dense = floor.episodic.dense_query(query)
        dense_vector = vector if dense == query else embedder.embed([dense])[0]  # as the episodic actor does
        t1 = time.perf_counter()
        found = resolve_time_range(query, now)
        prefer = (found.start, found.end) if found else None
        floor.episodic.search(dense_vector, query_text=query, top_k=top_k, prefer=prefer)
        t2 = time.perf_counter()
        floor.semantic.search(vector, query, top_k=top_k)
        t3 = time.perf_counter()
        if n >= warmup:
            for key, ms in (("total", t3 - t0), ("embed", t1 - t0), ("episodic", t2 - t1), ("semantic", t3 - t2)):
                parts[key].append(ms * 1000)
    return {key: _percentiles(values) for key, values in parts.items()}


def _percentiles(ms: Sequence[float]) -> dict[str, Any]:
    if not ms:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "calls": 0}
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(percentile(ms, 0.95), 2),
            "p99_ms": round(percentile(ms, 0.99), 2), "calls": len(ms)}


# -- the stack's memory ---------------------------------------------------------------


def pids_naming(marker: str, *, also: Sequence[int] = ()) -> list[int]:
    """The stack's processes, found as ``strata down`` finds them (:func:`processes_naming`)."""
    from strata_cli.stack import processes_naming

    return sorted(processes_naming(marker, also=also))


def rss_mib(pids: Sequence[int]) -> dict[str, Any]:
    """RSS and PSS (shared pages split between their users) summed over ``pids``, in MiB,
    and the largest processes by RSS."""
    rss = pss = 0.0
    each: list[tuple[float, str]] = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            kib = float(re.search(r"VmRSS:\s+(\d+)", status).group(1)) if "VmRSS" in status else 0.0  # type: ignore[union-attr]
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")[0].decode(errors="replace")
            rollup = Path(f"/proc/{pid}/smaps_rollup")
            found = re.search(r"^Pss:\s+(\d+)", rollup.read_text(), re.MULTILINE) if rollup.exists() else None
        except (OSError, AttributeError):  # gone meanwhile, or a kernel thread
            continue
        rss += kib / 1024
        pss += float(found.group(1)) / 1024 if found else kib / 1024
        each.append((kib / 1024, f"{os.path.basename(name)} ({pid})"))
    each.sort(reverse=True)
    return {"rss_mib": round(rss, 1), "pss_mib": round(pss, 1), "processes": len(each),
            "largest": [{"process": n, "rss_mib": round(m, 1)} for m, n in each[:6]]}


def _stack_memory(stack: Any) -> dict[str, Any] | None:
    if stack is None or stack.settings.ray.address:  # an external cluster's processes are not ours to count
        return None
    milvus = stack.milvus_pid()
    return rss_mib(pids_naming(str(stack.ray_temp_dir), also=[milvus] if milvus else []))


# -- HTTP phases ------------------------------------------------------------------------


async def _pool(items: Sequence[Any], workers: int, work: Callable[[Any, int], Awaitable[None]]) -> None:
    """``work(item, worker)`` for every item, ``workers`` at a time, in order."""
    queue = list(reversed(items))

    async def worker(n: int) -> None:
        while queue:
            await work(queue.pop(), n)

    await asyncio.gather(*(worker(n) for n in range(workers)))


async def _ingest(url: str, key: str, sessions: list[tuple[str, list[dict[str, Any]]]],
                  documents: list[tuple[str, str, str]], *, writers: int = 2) -> dict[str, Any]:
    total = sum(len(t) for _, t in sessions)
    done = [0, 0]
    clients = [AsyncStrataClient(url, key, timeout_s=300) for _ in range(writers)]
    tick = _Ticker("ingest", total, "turns")

    async def write(item: tuple[str, list[dict[str, Any]]], n: int) -> None:
        await clients[n].record_turns(item[0], item[1])
        done[0] += len(item[1])
        tick(done[0])

    started = time.perf_counter()
    await _pool(sessions, writers, write)
    turn_s = time.perf_counter() - started
    doc_tick = _Ticker("documents", len(documents), "documents")

    async def index(doc: tuple[str, str, str], n: int) -> None:
        await clients[n].index_document(doc[2], doc_id=doc[0], title=doc[1])
        done[1] += 1
        doc_tick(done[1])

    started = time.perf_counter()
    await _pool(documents, writers, index)
    doc_s = time.perf_counter() - started
    await asyncio.gather(*(c.aclose() for c in clients))
    return {"turns": total, "seconds": round(turn_s, 2), "turns_per_s": round(total / turn_s, 1),
            "batch_turns": SESSION_TURNS, "writers": writers, "documents": len(documents),
            "documents_seconds": round(doc_s, 2)}


async def _read_your_writes(url: str, key: str, session: str, sentences: Sequence[str]) -> dict[str, Any]:
    """Write a turn carrying a unique marker, then search for it at once: it must rank first.
    Each trial says something different, so an earlier trial's turn cannot outrank it on content."""
    outcomes = []
    async with AsyncStrataClient(url, key, timeout_s=120) as client:
        for sentence in sentences:
            text = f"{sentence} (reference ryw{uuid.uuid4().hex[:10]})"
            t0 = time.perf_counter()
            await client.record_turn(session, user=text, agent="Noted.")
            t1 = time.perf_counter()
            found = await client.search(text, layers=["episodic"], top_k=10)
            t2 = time.perf_counter()
            rank = next((n for n, hit in enumerate(found.hits, 1) if text in hit.text), None)
            outcomes.append({"rank": rank, "found_first": rank == 1, "write_ms": round((t1 - t0) * 1000, 1),
                             "search_ms": round((t2 - t1) * 1000, 1)})
    return {"ok": all(o["found_first"] for o in outcomes), "trials": outcomes}


async def _timed(calls: list[Callable[[], Awaitable[Any]]], clients: int, label: str) -> tuple[list[float], int]:
    """Run ``calls`` over ``clients`` concurrent loops; their latencies (ms) and how many
    contexts came back with layers missing."""
    ms: list[float] = []
    missing = [0]
    tick = _Ticker(label, len(calls), "calls")

    async def one(call: Callable[[], Awaitable[Any]], _: int) -> None:
        t0 = time.perf_counter()
        result = await call()
        ms.append((time.perf_counter() - t0) * 1000)
        missing[0] += bool(getattr(result, "missing", None)) and hasattr(result, "context")
        tick(len(ms))

    await _pool(calls, clients, one)
    return ms, missing[0]


async def _latency(url: str, key: str, queries: list[str], session: str, sizes: Sizes) -> dict[str, Any]:
    pool = [AsyncStrataClient(url, key, timeout_s=120) for _ in range(sizes.clients)]
    turn = [0]

    def context(q: str) -> Callable[[], Awaitable[Any]]:
        def call() -> Awaitable[Any]:
            turn[0] += 1
            return pool[turn[0] % len(pool)].build_context(q, session, task_type="planning")
        return call

    def search(q: str) -> Callable[[], Awaitable[Any]]:
        def call() -> Awaitable[Any]:
            turn[0] += 1
            return pool[turn[0] % len(pool)].search(q, layers=["episodic", "semantic"], top_k=10)
        return call

    # Warm up until a context comes back whole: the tenant may have to load (or re-load).
    deadline, warm = time.monotonic() + 180, None
    while time.monotonic() < deadline:
        warm = await pool[0].build_context(queries[0], session, task_type="planning")
        if not warm.missing:
            break
        print(f"  warming up: context still misses {sorted(warm.missing)}", flush=True)
    await _timed([context(q) for q in queries[:10]] + [search(q) for q in queries[:10]], sizes.clients, "warm-up")
    n = sizes.clients * sizes.calls_per_client
    cycle = [queries[i % len(queries)] for i in range(n)]
    seq_context, seq_missing = await _timed([context(q) for q in cycle[: sizes.sequential_calls]], 1, "one client, context")
    seq_search, _ = await _timed([search(q) for q in cycle[: sizes.sequential_calls]], 1, "one client, search")
    started = time.perf_counter()
    conc_context, missing = await _timed([context(q) for q in cycle], sizes.clients, f"{sizes.clients} clients, context")
    context_s = time.perf_counter() - started
    started = time.perf_counter()
    conc_search, _ = await _timed([search(q) for q in cycle], sizes.clients, f"{sizes.clients} clients, search")
    search_s = time.perf_counter() - started
    await asyncio.gather(*(c.aclose() for c in pool))
    return {
        "clients": sizes.clients,
        "context": {**_percentiles(conc_context), "calls_with_missing_layers": missing,
                    "calls_per_s": round(len(conc_context) / context_s, 1)},
        "search": {**_percentiles(conc_search), "calls_per_s": round(len(conc_search) / search_s, 1)},
        "one_client": {"context": {**_percentiles(seq_context), "calls_with_missing_layers": seq_missing},
                       "search": _percentiles(seq_search)},
        "context_sections": [s.layer for s in warm.sections] if warm else [],
    }


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
    tick = _Ticker("tenants", sizes.tenants, "tenants ingested")
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        async def one(n: int, _: int) -> None:
            tenant = f"bench-{run_id}-t{n:04d}"
            created = await _admin(http, "POST", "/v1/admin/keys", admin_key, {"tenant": tenant, "name": "strata bench"})
            sessions = _sessions(source, sizes.tenant_turns, "chat", now=now)
            title, text = source.document(n, paragraphs=2)
            async with AsyncStrataClient(url, created["key"], timeout_s=300) as client:
                for session, turns in sessions:
                    await _retried(lambda: client.record_turns(session, turns), retries)
                await _retried(lambda: client.index_document(text, doc_id="notes", title=title), retries)
            tenants.append((tenant, created["key"], sessions[-1][0]))
            tick(len(tenants))

        await _pool(list(range(sizes.tenants)), 4, one)
    return tenants


async def _contexts(url: str, tenants: Sequence[tuple[str, str, str]], question: str, *, label: str,
                    workers: int = 1, calls: int = 1) -> dict[str, Any]:
    """``calls`` context calls per tenant, one after the other, ``workers`` tenants at a time:
    the latency of each call by its position (0: the first), how many answered, which layers missed."""
    ms: list[list[float]] = [[] for _ in range(calls)]
    answered = complete = 0
    missing: dict[str, int] = {}
    tick = _Ticker(label, len(tenants), "tenants")
    done = [0]

    async def one(item: tuple[str, str, str], _: int) -> None:
        nonlocal answered, complete
        tenant, key, session = item
        async with AsyncStrataClient(url, key, timeout_s=120) as client:
            for n in range(calls):
                t0 = time.perf_counter()
                try:
                    result = await client.build_context(question, session, task_type="planning")
                except Exception as exc:  # noqa: BLE001  (counted: every tenant must answer)
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

    await _pool(tenants, workers, one)
    return {"calls": [_percentiles(m) for m in ms], "answered": answered, "complete": complete,
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
    import ray
    from strata_actors.router import LAYER_CLASSES, LayerRouter

    stack.ensure_ray_client()
    router = LayerRouter(stack.settings)
    return {layer: [ping["tenants_loaded"] for ping in ray.get([h.ping.remote() for h in router.all_handles(layer)],
                                                                 timeout=120)]
            for layer in LAYER_CLASSES}


def _wait_for_summaries(stack: Any, tenants: Sequence[str], *, timeout_s: float = 900.0) -> float | None:
    """Wait until the tenants' background summaries are made (in-cluster); seconds waited."""
    if stack is None:
        return None
    from strata_actors.orchestration import Orchestration

    async def no_embed(texts: Sequence[str]) -> np.ndarray:
        raise AssertionError("waiting for summaries embeds nothing here")

    async def wait() -> None:
        flow = Orchestration(stack.settings, embed=no_embed)
        tick = _Ticker("summaries", len(tenants), "tenants")
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


# -- the whole run ------------------------------------------------------------------------


def measure(found: Target, sizes: Sizes, source: TextSource, *, admin_key: str | None,
            config: str | None = None) -> dict[str, Any]:
    """Every phase against ``found``; the raw result that :func:`summarize` reads."""
    from strata_actors.episodic import turn_text

    from strata.config import load_settings
    from strata.providers.embedder import make_embedder

    stack = found.stack
    settings = stack.settings if stack is not None else load_settings(config)
    store = None
    if stack is not None:  # the stack's own store: the floor's rows, key lookups, an admin key
        from strata.store.layout import open_store

        store = open_store(settings)
    run_id = uuid.uuid4().hex[:6]
    tenant = "demo" if stack is not None else None  # a --url key's tenant is not known here
    now = datetime.now(UTC)
    sessions = _sessions(source, sizes.turns, f"bench-{run_id}", now=now)
    documents = [(f"bench-{run_id}-d{n:04d}", *source.document(n, paragraphs=8)) for n in range(sizes.documents)]
    queries = source.questions(60)
    out: dict[str, Any] = {"sizes": asdict(sizes), "text": source.origin, "run_id": run_id, "phase_seconds": {}}
    phase = _Phases(out["phase_seconds"])

    texts = [turn_text(t) for _, turns in sessions for t in turns]
    if store is not None:  # the floor reads the stack's rows: the vectors are not needed, a sample gives the rate
        texts = texts[:: max(1, len(texts) // EMBED_FLOOR_SAMPLE)][:EMBED_FLOOR_SAMPLE]
    print(f"\n[1/4] embedding floor: {len(texts)} of the turn texts in this process", flush=True)
    with phase("embed_floor"):
        embedder = make_embedder(settings.embedding)
        floor_rate, vectors = embed_floor(embedder, texts)
    out["embed_floor"] = {"turns_per_s": round(floor_rate, 1), "texts": len(texts), "threads": settings.embedding.threads}

    print(f"\n[2/4] ingest over HTTP: {sizes.turns} turns in batches of {SESSION_TURNS}, "
          f"then {sizes.documents} documents", flush=True)
    with phase("ingest"):
        out["ingest"] = asyncio.run(_ingest(found.url, found.key, sessions, documents))
        probes = list(dict.fromkeys(u for u, _ in source.turns(40)))[:3]  # three different sentences
        out["read_your_writes"] = asyncio.run(_read_your_writes(found.url, found.key, f"bench-{run_id}-ryw", probes))
        sessions_written = [s for s, _ in sessions] + [f"bench-{run_id}-ryw"]
        waited = _wait_for_summaries(stack, [tenant] if tenant else [])
    out["ingest"]["summaries_wait_s"] = round(waited, 2) if waited is not None else None

    print(f"\n[3/4] latency: floor in this process, then {sizes.clients} concurrent HTTP clients", flush=True)
    with phase("floor"):
        if store is not None and tenant is not None:
            floor = floor_from_store(store[0], store[1], tenant, settings)
            out["floor_source"] = "the tenant's rows in the stack's Milvus (turns, summaries, chunks)"
        else:
            floor = floor_in_memory("bench", sessions, documents, embedder=embedder, settings=settings, vectors=vectors)
            out["floor_source"] = "the generated data in an InMemoryRecordStore (no summaries)"
        out["floor"] = {"context": measure_floor(floor, embedder, queries, top_k=settings.context.default_top_k),
                        "search": measure_floor(floor, embedder, queries, top_k=10),
                        "episodic_turns": floor.episodic.turn_count,
                        "episodic_summaries": len(floor.episodic.summaries()), "semantic": floor.semantic.stats()}
        del floor
    with phase("latency"):
        out["latency"] = asyncio.run(_latency(found.url, found.key, queries, sessions[-1][0], sizes))
    out["key_lookup_ms"] = {"after_one_tenant": _key_lookup_ms(store, found.key)}
    out["memory_one_tenant"] = _stack_memory(stack)

    print(f"\n[4/4] scale: {sizes.tenants} tenants with {sizes.tenant_turns} turns and a document each", flush=True)
    out["scale"] = _scale(found, sizes, source, run_id, admin_key=admin_key, question=queries[1], store=store,
                          phase=phase)
    out["key_lookup_ms"]["after_scale"] = _key_lookup_ms(store, found.key)
    if not found.scratch:
        with phase("clean_up"):
            asyncio.run(_clean_up(found, sessions_written, documents))
    return out


class _Phases:
    """``with phases("name"):`` adds the block's wall time to ``seconds["name"]``."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - started, 1)


def _key_lookup_ms(store: tuple[Any, Any] | None, key: str) -> float | None:
    """Median ms of the API-key lookup every request makes (the same store call), from here."""
    if store is None:
        return None
    from strata.access.keys import open_keys

    keys = open_keys(store[0], store[1])
    ms = []
    for _ in range(11):
        t0 = time.perf_counter()
        keys.lookup(key)
        ms.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(ms), 1)


def _scale(found: Target, sizes: Sizes, source: TextSource, run_id: str, *, admin_key: str | None,
           question: str, store: tuple[Any, Any] | None, phase: _Phases) -> dict[str, Any]:
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
            waited = _wait_for_summaries(stack, [t for t, _, _ in tenants])
        out: dict[str, Any] = {"tenants": len(tenants), "ingest_seconds": phase.seconds["scale_ingest"],
                               "ingest_retries": retries,
                               "summaries_wait_s": round(waited, 1) if waited is not None else None}
        out["memory_loaded"] = _stack_memory(stack)
        out["tenants_in_memory_after_ingest"] = _tenants_in_memory(stack)
        with phase("answers"):
            out["resident"] = asyncio.run(_contexts(found.url, tenants, question, label="every tenant's context",
                                                    workers=4))
        out["memory_after_answers"] = _stack_memory(stack)
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
            out["memory_after_cold_pass"] = _stack_memory(stack)
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
        await _pool(tenants, 4, lambda t, _: _admin(http, "DELETE", f"/v1/admin/tenants/{t}", admin_key))


async def _clean_up(found: Target, sessions: list[str], documents: list[tuple[str, str, str]]) -> None:
    """Remove what the benchmark wrote to a stack it did not start."""
    async with AsyncStrataClient(found.url, found.key, timeout_s=120) as client:
        for session in sessions:
            await client.forget_session(session)
        for doc_id, _, _ in documents:
            await client.delete_document(doc_id)


# -- the report -----------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _verdict(name: str, value: Any) -> dict[str, Any]:
    op, limit = TARGETS[name]
    met = None if value is None else (value <= limit if op == "<=" else value >= limit if op == ">=" else value < limit)
    return {"value": value, "target": f"{op} {limit:g}", "met": met}


def summarize(raw: dict[str, Any], *, machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document: the headline figures first, with targets, then everything measured."""
    lat, floor, ingest, scale = raw["latency"], raw["floor"], raw["ingest"], raw["scale"]
    memories = [m["rss_mib"] for m in (scale.get("memory_loaded"), scale.get("memory_after_answers"),
                                        scale.get("memory_after_cold_pass"), raw.get("memory_one_tenant")) if m]
    ingest_rate, floor_rate = ingest["turns_per_s"], raw["embed_floor"]["turns_per_s"]
    waited = ingest.get("summaries_wait_s")
    doc: dict[str, Any] = {
        "context_p50_ms": lat["context"]["p50_ms"],
        "context_p95_ms": lat["context"]["p95_ms"],
        "context_p99_ms": lat["context"]["p99_ms"],
        "search_p50_ms": lat["search"]["p50_ms"],
        "search_p95_ms": lat["search"]["p95_ms"],
        "search_p99_ms": lat["search"]["p99_ms"],
        "floor_p50_ms": floor["context"]["total"]["p50_ms"],
        "search_floor_p50_ms": floor["search"]["total"]["p50_ms"],
        "ingest_turns_per_s": ingest_rate,
        "ingest_with_summaries_turns_per_s": round(ingest["turns"] / (ingest["seconds"] + waited), 1) if waited is not None else None,
        "embed_floor_turns_per_s": floor_rate,
        "read_your_writes": bool(raw["read_your_writes"]["ok"]),
        "tenants": int(scale.get("tenants", 0)),
        "tenants_answered": scale.get("resident", {}).get("answered"),
        "stack_rss_mib": max(memories) if memories else None,
        "cold_tenant_p95_ms": scale.get("cold", {}).get("p95_ms"),
        "warm_tenant_p95_ms": scale.get("warm", {}).get("p95_ms"),
    }
    doc["targets"] = {
        "context_p50_ms": _verdict("context_p50_ms", doc["context_p50_ms"]),
        "context_p95_ms": _verdict("context_p95_ms", doc["context_p95_ms"]),
        "context_p50_over_floor": _verdict("context_p50_over_floor", _ratio(doc["context_p50_ms"], doc["floor_p50_ms"])),
        "ingest_turns_per_s": _verdict("ingest_turns_per_s", ingest_rate),
        "embed_floor_over_ingest": _verdict("embed_floor_over_ingest", _ratio(floor_rate, ingest_rate)),
        "read_your_writes": {"value": doc["read_your_writes"], "target": "true", "met": doc["read_your_writes"]},
        "stack_rss_mib": _verdict("stack_rss_mib", doc["stack_rss_mib"]),
        "cold_tenant_p95_ms": _verdict("cold_tenant_p95_ms", doc["cold_tenant_p95_ms"]),
    }
    doc["search_p50_over_floor"] = _ratio(doc["search_p50_ms"], doc["search_floor_p50_ms"])
    doc["machine"] = machine or {}
    doc["detail"] = raw
    return doc


def _mark(verdict: dict[str, Any]) -> str:
    met = verdict["met"]
    state = "not measured" if met is None else "met" if met else "MISSED"
    return f"target {verdict['target']}: {state}"


def format_report(doc: dict[str, Any]) -> str:
    raw, t = doc["detail"], doc["targets"]
    sizes, lat, floor = raw["sizes"], raw["latency"], raw["floor"]
    one = lat["one_client"]

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    ingest = raw["ingest"]
    lines = [
        (f"\n== latency: one tenant, {sizes['turns']} turns and {sizes['documents']} documents; "
         f"{lat['clients']} concurrent HTTP clients =="),
        f"{'':26}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'calls':>7}",
    ]
    for label, row in ((f"/v1/context, {lat['clients']} clients", lat["context"]), ("/v1/context, one client", one["context"]),
                       (f"/v1/search, {lat['clients']} clients", lat["search"]), ("/v1/search, one client", one["search"]),
                       ("floor (context query)", floor["context"]["total"]), ("floor (search query)", floor["search"]["total"])):
        lines.append(f"{label:26}{f(row['p50_ms']):>8}{f(row['p95_ms']):>8}{f(row['p99_ms']):>8}{row['calls']:>7}")
    parts = floor["context"]
    lines += [
        (f"floor = embed {f(parts['embed']['p50_ms'])} + episodic {f(parts['episodic']['p50_ms'])} + semantic "
         f"{f(parts['semantic']['p50_ms'])} ms (p50s), in this process over {raw['floor_source']}"),
        (f"context p50 {f(doc['context_p50_ms'])} ms: {_mark(t['context_p50_ms'])}; "
         f"p95 {f(doc['context_p95_ms'])} ms: {_mark(t['context_p95_ms'])}"),
        (f"context p50 / floor p50 = {f(t['context_p50_over_floor']['value'])}x: {_mark(t['context_p50_over_floor'])}"
         f" (search: {f(doc['search_p50_over_floor'])}x)"),
        (f"contexts with a layer missing: {lat['context']['calls_with_missing_layers']} of {lat['context']['calls']}; "
         f"throughput {lat['context']['calls_per_s']} contexts/s, {lat['search']['calls_per_s']} searches/s"),
        "\n== ingest ==",
        (f"batch endpoint: {f(doc['ingest_turns_per_s'])} turns/s sustained ({ingest['turns']} turns in "
         f"{ingest['seconds']} s, batches of {ingest['batch_turns']}, {ingest['writers']} writers): "
         f"{_mark(t['ingest_turns_per_s'])}"),
        (f"embedder floor: {f(doc['embed_floor_turns_per_s'])} turns/s in this process; floor / ingest = "
         f"{f(t['embed_floor_over_ingest']['value'])}x: {_mark(t['embed_floor_over_ingest'])}"),
        (f"counting the background summaries (waited {f(ingest.get('summaries_wait_s'))} s after the last batch): "
         f"{f(doc['ingest_with_summaries_turns_per_s'])} turns/s; {ingest['documents']} documents in "
         f"{ingest['documents_seconds']} s"),
        (f"read-your-writes (a turn with a unique marker ranked first by the very next search, "
         f"{len(raw['read_your_writes']['trials'])} trials): {str(doc['read_your_writes']).lower()} (ranks "
         f"{', '.join(str(o.get('rank')) for o in raw['read_your_writes']['trials'])})"),
        "\n== scale ==",
    ]
    scale = raw["scale"]
    if scale.get("skipped"):
        lines.append(f"skipped: {scale['skipped']}")
    else:
        lines.append(f"{doc['tenants']} tenants ingested in {scale['ingest_seconds']} s "
                     f"({len(scale.get('ingest_retries') or [])} writes retried); "
                     f"stack memory {f(doc['stack_rss_mib'])} MiB RSS: {_mark(t['stack_rss_mib'])}")
        for when, name in (("after ingest", "memory_loaded"), ("after every tenant's context", "memory_after_answers")):
            loaded = scale.get(name)
            if loaded:
                lines.append(f"  {when}: RSS {loaded['rss_mib']} MiB, PSS {loaded['pss_mib']} MiB over "
                             f"{loaded['processes']} processes; largest: "
                             + ", ".join(f"{p['process']} {p['rss_mib']}" for p in loaded["largest"][:4]))
        for when, name in (("after ingest", "tenants_in_memory_after_ingest"),
                           ("after every tenant's context", "tenants_in_memory_after_answers")):
            if scale.get(name):
                lines.append(f"  tenants in memory per shard {when}: "
                             + "; ".join(f"{layer} {'/'.join(map(str, n))}" for layer, n in scale[name].items()))
        resident = scale.get("resident")
        if resident:
            gaps = ", ".join(f"{layer} {n}" for layer, n in sorted(resident["first_calls_missing_layer"].items()))
            lines.append(f"  context answered for {resident['answered']} of {doc['tenants']} tenants, 4 at a time "
                         f"({resident['complete']} with every layer{'; a layer missing: ' + gaps if gaps else ''}); "
                         f"p50 {f(resident['calls'][0]['p50_ms'])} ms, p95 {f(resident['calls'][0]['p95_ms'])} ms")
        if "cold_sample" in scale:
            gaps = ", ".join(f"{layer} {n}" for layer, n in sorted(scale["cold_calls_missing_layer"].items()))
            lines.append(f"  {scale['cold_sample']} tenants, one at a time, after restarting the layer actors "
                         f"({scale['restart_s']} s): {scale['cold_complete']} cold contexts with every layer"
                         f"{'; a layer missing: ' + gaps if gaps else ''}")
            lines.append(f"  cold tenant p95 {f(doc['cold_tenant_p95_ms'])} ms (p50 {f(scale['cold']['p50_ms'])}): "
                         f"{_mark(t['cold_tenant_p95_ms'])}; warm p95 {f(doc['warm_tenant_p95_ms'])} ms "
                         f"(p50 {f(scale['warm']['p50_ms'])})")
        else:
            lines.append(f"  cold tenants: {scale['cold']['skipped']}")
    lookups = raw.get("key_lookup_ms") or {}
    if any(v is not None for v in lookups.values()):
        lines.append(f"API-key lookup (one store read, made by every request): "
                     f"{f(lookups.get('after_one_tenant'))} ms after the latency tenant, "
                     f"{f(lookups.get('after_scale'))} ms after the scale tenants (median, from this process)")
    lines.append("phases (s): " + ", ".join(f"{k} {v:g}" for k, v in raw["phase_seconds"].items()))
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: str) -> None:
    """Latency percentiles against the floor, and ingest against the embedder floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, ing) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    endpoints = ("context", "search")
    for n, (name, colour) in enumerate((("p50", "#4c72b0"), ("p95", "#55a868"), ("p99", "#c44e52"))):
        values = [doc[f"{e}_{name}_ms"] or 0 for e in endpoints]
        lat.bar([i + (n - 1.5) * 0.2 for i in range(2)], values, 0.2, label=f"HTTP {name}", color=colour)
    floors = [doc["floor_p50_ms"] or 0, doc["search_floor_p50_ms"] or 0]
    lat.bar([i + 1.5 * 0.2 for i in range(2)], floors, 0.2, label="in-process floor p50", color="#999999")
    lat.axhline(40, color="#4c72b0", ls="--", lw=1, label="context p50 target")
    lat.axhline(80, color="#55a868", ls="--", lw=1, label="context p95 target")
    lat.set_xticks(range(2), [f"/v1/{e}" for e in endpoints])
    lat.set_yscale("log")  # the floor is often two orders below the HTTP figures
    highest = max([doc[f"{e}_{n}_ms"] or 0 for e in endpoints for n in ("p50", "p95", "p99")] + [100])
    lat.set_ylim(top=highest * 8)  # room for the legend above the bars
    lat.set_ylabel("ms (log scale)")
    lat.set_title(f"latency, {doc['detail']['latency']['clients']} concurrent clients")
    lat.legend(fontsize=7, loc="upper center", ncols=3)
    ing.bar(["HTTP batch", "embedder floor"], [doc["ingest_turns_per_s"], doc["embed_floor_turns_per_s"]],
            color=["#4c72b0", "#999999"])
    ing.axhline(100, color="#c44e52", ls="--", lw=1, label="target")
    ing.set_ylabel("turns / s")
    ing.set_title("ingest")
    ing.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _machine() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo")
    total = re.search(r"MemTotal:\s+(\d+)", meminfo.read_text()) if meminfo.exists() else None
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "memory_mib": round(int(total.group(1)) / 1024) if total else None,
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "load_average_start": os.getloadavg()}


# -- CLI ------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from strata_bench import orchestrator as bench_orchestrator

    bench_orchestrator.add_arguments(parser)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.turns} turns, {QUICK.documents} documents, {QUICK.tenants} tenants (about 3 minutes)")
    parser.add_argument("--plot", metavar="OUT.png", help="draw latency and ingest against their floors")
    parser.add_argument("--admin-key", help="with --url: an admin key, to create the scale phase's tenants")
    parser.add_argument("--tenants", type=int, help="tenants of the scale phase (default 1000; --quick 100)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients of the latency phase")
    parser.add_argument("--sentences", type=Path, default=DEFAULT_SENTENCES,
                        help="LoCoMo JSON to draw sentences from, if it exists (else templates only)")


def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    sizes = Sizes(**{**asdict(sizes), "clients": args.clients, "tenants": args.tenants or sizes.tenants})
    source = TextSource(args.sentences)
    machine = _machine()
    print(f"service benchmark ({'quick' if args.quick else 'full'}): text from {source.origin}", flush=True)
    started = time.perf_counter()
    with target(args) as found:
        stack_s = time.perf_counter() - started
        measured = time.perf_counter()
        raw = measure(found, sizes, source, admin_key=args.admin_key, config=args.config)
        raw["seconds"] = {"stack_start": round(stack_s, 1), "measuring": round(time.perf_counter() - measured, 1)}
        raw["stack"] = {"url": found.url, "scratch": found.scratch}
    raw["seconds"]["total"] = round(time.perf_counter() - started, 1)
    machine["load_average_end"] = os.getloadavg()
    doc = summarize(raw, machine=machine)
    print(format_report(doc))
    print(f"\nmeasured in {raw['seconds']['measuring']} s (stack start {raw['seconds']['stack_start']} s, "
          f"total with stop {raw['seconds']['total']} s) on {machine['cpu_count']} cores, "
          f"load average {machine['load_average_start'][0]:.1f} at the start, {machine['load_average_end'][0]:.1f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
        print(f"wrote {args.json}")
    if args.plot:
        plot(doc, args.plot)
        print(f"wrote {args.plot}")
    scale = raw["scale"]
    ok = doc["read_your_writes"] and scale.get("resident", {}).get("answered", doc["tenants"]) == doc["tenants"]
    return 0 if ok else 1
