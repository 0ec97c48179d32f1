"""The semantic benchmark's measurements: index throughput by stage, a large tenant built
from a pool of real children, its load and memory, and search latency per path."""

from __future__ import annotations

import gc
import sys
import time
import types
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from strata.config import SemanticSettings
from strata.providers.embedder import Embedder
from strata.semantic.documents import DocumentInput, PreparedDocument
from strata.semantic.memory import SemanticMemory
from strata.store.records import RecordStore
from strata_bench.semantic.timed import COLLECTION, Tenant, TimedStore, counter, make_tenant
from strata_bench.stats import cpu_s, latency_ms, median, reset_peak_rss, rss_mib

__all__ = ["EMBED_BATCH", "SEARCH_PATHS", "run"]

#: Texts per embed call, as the semantic actor sends them (actors/semantic.py ``_EMBED_BATCH``).
EMBED_BATCH = 64
_WARMUP_QUERIES = 5
#: (key, label, weights): ``None`` is the configured default fusion.
SEARCH_PATHS: tuple[tuple[str, str, dict[str, float] | None], ...] = (
    ("fused", "fused (default weights)", None),
    ("dense", "dense only", {"dense": 1.0}),
    ("lexical", "lexical only", {"lexical": 1.0}),
    ("graph", "graph only", {"graph": 1.0}),
)


def _rate(children: int, seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "children_per_s": children / seconds if seconds > 0 else float("inf")}


def _percentiles(ms: Sequence[float]) -> dict[str, float | None]:
    return latency_ms(ms, digits=None)


def _retained_mib(root: object, *, leave_out: Sequence[object]) -> float:
    """Bytes of every object reachable from ``root`` (not through ``leave_out``), by
    ``sys.getsizeof``: what the state holds, apart from allocator slack and freed buffers."""
    seen = {id(o) for o in leave_out}
    stack, total = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)  # an ndarray that owns its data counts it
        stack.extend(gc.get_referents(obj))
    return total / 2**20


def _wait_idle(pid: int | None, *, share: float = 0.05, timeout_s: float = 180.0) -> float:
    """Until the server uses under ``share`` of a core (milvus-lite flushes and builds
    indexes in the background after writes); the seconds waited."""
    if pid is None:
        return 0.0
    start = time.perf_counter()
    try:
        used = cpu_s(pid)
        while time.perf_counter() - start < timeout_s:
            time.sleep(1.0)
            now = cpu_s(pid)
            if now - used < share:
                break
            used = now
    except OSError:
        pass
    return time.perf_counter() - start


def _embed(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """As the semantic actor embeds a document: slices of :data:`EMBED_BATCH`."""
    if not texts:
        return np.zeros((0, embedder.dim), np.float32)
    return np.vstack([embedder.embed(list(texts[i : i + EMBED_BATCH])) for i in range(0, len(texts), EMBED_BATCH)])


def _index_small(
    tenant: Tenant, documents: Sequence[DocumentInput], embedder: Embedder, *, children: int, now: datetime
) -> tuple[dict[str, Any], list[tuple[PreparedDocument, np.ndarray]]]:
    """Index documents until ``children`` are in; the stage split and what was indexed."""
    memory = tenant.memory
    prepare_s = embed_s = write_s = index_s = 0.0
    done: list[tuple[PreparedDocument, np.ndarray]] = []
    count = parents = 0
    wall = time.perf_counter()
    for doc in documents:
        if count >= children:
            break
        t0 = time.perf_counter()
        prepared = memory.prepare(doc, now=now)
        t1 = time.perf_counter()
        vectors = _embed(embedder, prepared.embed_texts())
        t2 = time.perf_counter()
        memory.write(prepared, vectors)
        t3 = time.perf_counter()
        memory.index(prepared, vectors)
        t4 = time.perf_counter()
        prepare_s += t1 - t0
        embed_s += t2 - t1
        write_s += t3 - t2
        index_s += t4 - t3
        count += len(prepared.tree.children)
        parents += len(prepared.tree.parents)
        done.append((prepared, vectors))
    wall = time.perf_counter() - wall
    texts = [t for prepared, _ in done for t in prepared.embed_texts()]
    start = time.perf_counter()
    embedder.embed(texts)
    floor_s = time.perf_counter() - start
    chunk_s, extract_s = tenant.chunker.seconds, tenant.extractor.seconds
    result = {
        "documents": len(done),
        "parents": parents,
        "children": count,
        "child_tokens_mean": float(np.mean([counter().count(t) for t in texts])) if texts else 0.0,
        "end_to_end": _rate(count, wall),
        "stages": {
            "chunk": _rate(count, chunk_s),
            "extract": _rate(count, extract_s),
            "prepare_other": _rate(count, max(prepare_s - chunk_s - extract_s, 0.0)),
            "embed": _rate(count, embed_s),
            "write": _rate(count, write_s),
            "index": _rate(count, index_s),
        },
        "embedder_floor": _rate(count, floor_s),
    }
    return result, done


def _pool(
    tenant: Tenant,
    indexed: list[tuple[PreparedDocument, np.ndarray]],
    rest: Sequence[DocumentInput],
    embedder: Embedder,
    *,
    children: int | None,
    now: datetime,
) -> tuple[list[tuple[PreparedDocument, np.ndarray]], dict[str, Any]]:
    """The distinct children to build the large tenant from: those indexed, plus the
    rest of the corpus (up to ``children`` in all), cut and embedded once."""
    pool = list(indexed)
    count = sum(len(p.tree.children) for p, _ in pool)
    extra: list[PreparedDocument] = []
    for doc in rest:
        if children is not None and count >= children:
            break
        prepared = tenant.memory.prepare(doc, now=now)
        extra.append(prepared)
        count += len(prepared.tree.children)
    texts = [t for p in extra for t in p.embed_texts()]
    start = time.perf_counter()
    vectors = embedder.embed(texts) if texts else np.zeros((0, embedder.dim), np.float32)
    embed_s = time.perf_counter() - start
    row = 0
    for prepared in extra:
        n = len(prepared.tree.children)
        pool.append((prepared, vectors[row : row + n]))
        row += n
    return pool, {"documents": len(pool), "children": count, "embedded_now": len(texts), "embed_s": embed_s}


def _copies(
    pool: Sequence[tuple[PreparedDocument, np.ndarray]], children: int
) -> Iterator[tuple[PreparedDocument, np.ndarray]]:
    """Pool documents under new ids (``<id>-r<k>``) until ``children`` children are out."""
    out, k = 0, 0
    while out < children:
        for prepared, vectors in pool:
            if out >= children:
                return
            doc = replace(
                prepared.document, doc_id=f"{prepared.document.doc_id}-r{k}", generation=uuid.uuid4().hex[:12]
            )
            yield replace(prepared, document=doc), vectors
            out += len(prepared.tree.children)
        k += 1


def _build_large(
    name: str,
    store: RecordStore,
    settings: SemanticSettings,
    pool: Sequence[tuple[PreparedDocument, np.ndarray]],
    *,
    children: int,
    milvus_pid: int | None,
) -> tuple[dict[str, Any], SemanticMemory]:
    """Write then index the copies; then load the tenant into a fresh object."""
    tenant = make_tenant(name, store, settings)
    docs = list(_copies(pool, children))
    count = sum(len(p.tree.children) for p, _ in docs)
    parents = sum(len(p.tree.parents) for p, _ in docs)
    write_ms: list[float] = []
    for prepared, vectors in docs:
        start = time.perf_counter()
        tenant.memory.write(prepared, vectors)
        write_ms.append((time.perf_counter() - start) * 1000)
    gc.collect()
    rss_before = rss_mib()
    index_ms: list[float] = []
    for prepared, vectors in docs:
        start = time.perf_counter()
        tenant.memory.index(prepared, vectors)
        index_ms.append((time.perf_counter() - start) * 1000)
    del docs
    gc.collect()
    rss_indexed = rss_mib()
    idle_before_load_s = _wait_idle(milvus_pid)
    timed = TimedStore(store)
    fresh_tenant = make_tenant(name, timed, settings)
    fresh = fresh_tenant.memory
    peak_known = reset_peak_rss()
    start = time.perf_counter()
    fresh.load()
    load_s = time.perf_counter() - start
    peak_loaded = rss_mib(peak=True) if peak_known else float("nan")
    gc.collect()
    rss_loaded = rss_mib()
    if fresh.stats() != tenant.memory.stats():
        raise RuntimeError(f"load gave {fresh.stats()}, indexing gave {tenant.memory.stats()}")
    del tenant
    retained = _retained_mib(fresh, leave_out=(timed, settings, fresh_tenant.chunker, fresh_tenant.extractor))
    write_s, index_s = sum(write_ms) / 1000, sum(index_ms) / 1000
    documents = len(write_ms)
    result = {
        "documents": documents,
        "parents": parents,
        "children": count,
        "entities": fresh.stats()["entities"],
        "write": {
            **_rate(count, write_s),
            "rows_per_s": (count + parents + documents) / write_s if write_s else 0.0,
            "per_document_p50_ms": median(write_ms),
        },
        "index": {**_rate(count, index_s), "per_document_p50_ms": median(index_ms)},
        "load": {
            **_rate(count, load_s),
            "scan_s": timed.scan_s,
            "rebuild_s": load_s - timed.scan_s,
            "waited_for_idle_server_s": idle_before_load_s,
        },
        "memory": {
            "rss_before_index_mib": rss_before,
            "rss_index_delta_mib": rss_indexed - rss_before,
            "rss_load_delta_mib": rss_loaded - rss_indexed,
            "rss_load_peak_delta_mib": peak_loaded - rss_indexed,
            "retained_by_loaded_tenant_mib": retained,
            "milvus_server_rss_mib": rss_mib(milvus_pid) if milvus_pid else None,
        },
    }
    return result, fresh


def _latency(memory: SemanticMemory, embedder: Embedder, queries: Sequence[str], *, top_k: int) -> dict[str, Any]:
    """Per query: embed it, then run every path, interleaved so background load hits all alike."""
    for q in queries[:_WARMUP_QUERIES]:
        memory.search(embedder.embed_query([q])[0], q, top_k=top_k)
    embed_ms: list[float] = []
    ms: dict[str, list[float]] = {key: [] for key, _, _ in SEARCH_PATHS}
    hits: dict[str, int] = dict.fromkeys(ms, 0)
    for q in queries:
        start = time.perf_counter()
        vector = embedder.embed_query([q])[0]
        embed_ms.append((time.perf_counter() - start) * 1000)
        for key, _, weights in SEARCH_PATHS:
            start = time.perf_counter()
            found = memory.search(vector, q, top_k=top_k, weights=weights)
            ms[key].append((time.perf_counter() - start) * 1000)
            hits[key] += len(found)
    out: dict[str, Any] = {"queries": len(queries), "top_k": top_k, "query_embedding": _percentiles(embed_ms)}
    for key, label, weights in SEARCH_PATHS:
        row: dict[str, Any] = {
            "label": label,
            "excluding_embedding": _percentiles(ms[key]),
            "mean_hits": hits[key] / len(queries),
        }
        if weights is None or "dense" in weights:
            row["including_embedding"] = _percentiles([a + b for a, b in zip(ms[key], embed_ms, strict=True)])
        out[key] = row
    return out


def run(
    documents: Sequence[DocumentInput],
    queries: Sequence[str],
    *,
    store: RecordStore,
    embedder: Embedder,
    children_small: int = 1000,
    children_large: int = 50_000,
    pool_children: int | None = None,
    top_k: int = 8,
    settings: SemanticSettings | None = None,
    milvus_pid: int | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """The whole benchmark over ``store``; returns the figures
    (see :func:`~strata_bench.semantic.report.format_report`).

    Args:
        documents: the corpus, in order; the small tenant takes a prefix.
        queries: search queries (all are run, at both sizes).
        pool_children: distinct children the large tenant is built from
            (default: the whole corpus).
        milvus_pid: the server whose memory to report, if any.
    """
    if not queries:
        raise ValueError("no queries")
    settings = settings or SemanticSettings()
    store.ensure_collection(COLLECTION, dim=embedder.dim)
    now = datetime.now(UTC)
    embedder.embed(["warm up"])
    say(f"indexing ~{children_small} children end to end")
    small = make_tenant("bench-small", store, settings)
    index, indexed = _index_small(small, documents, embedder, children=children_small, now=now)
    say(f"search latency at {index['children']} children")
    idle_small = _wait_idle(milvus_pid)
    search_small = _latency(small.memory, embedder, queries, top_k=top_k)
    say("cutting and embedding the rest of the pool")
    large_tenant = make_tenant("bench-large", store, settings)
    pool, pool_stats = _pool(
        large_tenant, indexed, documents[len(indexed) :], embedder, children=pool_children, now=now
    )
    distinct = len({t for p, _ in pool for t in p.embed_texts()})
    say(f"writing and indexing ~{children_large} children")
    large, loaded = _build_large("bench-large", store, settings, pool, children=children_large, milvus_pid=milvus_pid)
    large["pool"] = {**pool_stats, "distinct_texts": distinct}
    say(f"search latency at {large['children']} children")
    idle_large = _wait_idle(milvus_pid)
    large["search"] = _latency(loaded, embedder, queries, top_k=top_k)
    search_small["waited_for_idle_server_s"] = idle_small
    large["search"]["waited_for_idle_server_s"] = idle_large
    return {"small": {**index, "search": search_small}, "large": large}
