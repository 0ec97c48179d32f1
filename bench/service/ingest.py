"""Phase 1 over HTTP: one tenant's turns in batches (two writers at once), its documents,
and read-your-writes (a turn with a unique marker must rank first in the very next search).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from strata_bench.service.latency import cpu_ms_per_unit, stack_cpu_s
from strata_bench.service.sizes import SESSION_TURNS
from strata_bench.service.timing import Ticker, pool
from strata_bench.target import RAW
from strata_serve.client import AsyncStrataClient

__all__ = ["ingest", "read_your_writes"]


async def ingest(url: str, key: str, sessions: list[tuple[str, list[dict[str, Any]]]],
                 documents: list[tuple[str, str, str]], *, writers: int = 2,
                 pids: Callable[[], Sequence[int]] | None = None) -> dict[str, Any]:
    """``sessions``' turns over ``writers`` concurrent batch writers, then ``documents``; with
    ``pids`` (the stack's processes), the CPU the turns cost the stack, per turn and by process."""
    total = sum(len(t) for _, t in sessions)
    done = [0, 0]
    clients = [AsyncStrataClient(url, key, timeout_s=300, **RAW) for _ in range(writers)]
    tick = Ticker("ingest", total, "turns")

    async def write(item: tuple[str, list[dict[str, Any]]], n: int) -> None:
        await clients[n].record_turns(item[0], item[1])
        done[0] += len(item[1])
        tick(done[0])

    before, started = stack_cpu_s(pids), time.perf_counter()
    await pool(sessions, writers, write)
    turn_s = time.perf_counter() - started
    cpu_per_turn, by_process = cpu_ms_per_unit(before, stack_cpu_s(pids), total)
    doc_tick = Ticker("documents", len(documents), "documents")

    async def index(doc: tuple[str, str, str], n: int) -> None:
        await clients[n].index_document(doc[2], doc_id=doc[0], title=doc[1])
        done[1] += 1
        doc_tick(done[1])

    started = time.perf_counter()
    await pool(documents, writers, index)
    doc_s = time.perf_counter() - started
    await asyncio.gather(*(c.aclose() for c in clients))
    return {"turns": total, "seconds": round(turn_s, 2), "turns_per_s": round(total / turn_s, 1),
            "batch_turns": SESSION_TURNS, "writers": writers, "documents": len(documents),
            "documents_seconds": round(doc_s, 2), "stack_cpu_ms_per_turn": cpu_per_turn,
            "cpu_ms_per_turn_by_process": by_process}


async def read_your_writes(url: str, key: str, session: str, sentences: Sequence[str]) -> dict[str, Any]:
    """Write a turn carrying a unique marker, then search for it at once: it must rank first.
    Each trial says something different, so an earlier trial's turn cannot outrank it on content."""
    outcomes: list[dict[str, Any]] = []
    async with AsyncStrataClient(url, key, timeout_s=120, **RAW) as client:
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
            if rank != 1:  # what ranked above it, for whoever reads the report
                outcomes[-1]["sentence"] = sentence
                outcomes[-1]["above"] = [
                    {"kind": hit.kind, "score": round(hit.score, 4), "relevance": hit.relevance, "text": hit.text[:160]}
                    for hit in found.hits[: (rank or len(found.hits) + 1) - 1]
                ]
    return {"ok": all(o["found_first"] for o in outcomes), "trials": outcomes}
