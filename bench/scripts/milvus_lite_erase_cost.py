"""What erasing deleted rows from milvus-lite's files costs (``MilvusRecordStore.erase_deleted``:
a flush, then the launcher's compaction that rewrites the segments holding deleted rows).

ROWS episodic-sized rows (300 characters, 384-d vectors) of 100 tenants are written and
flushed, and left to milvus-lite's own compactions for a few seconds. Then, each once: an
erasure with nothing deleted; one turn deleted and erased (its text written after the flush,
so only the log holds it); one turn of the flushed rows deleted and erased; a whole tenant
deleted and erased. For each, the erasure's time, the slowest of the point reads another
thread made meanwhile, and whether the deleted text is still in any file of the data dir.

Run as::

    python -m strata_bench.scripts.milvus_lite_erase_cost [ROWS]      # 30,000 by default
    python bench/scripts/milvus_lite_erase_cost.py [ROWS]             # the same
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from strata.store.milvus import MilvusRecordStore
from strata.store.records import Record
from strata_bench.scratch_milvus import scratch_server

__all__ = ["run"]

TENANTS = 100
DIM = 384
COLLECTION = "episodic"


def _row(i: int, text: str, rng: np.random.Generator) -> Record:
    vector = rng.standard_normal(DIM).astype(np.float32)
    tenant = f"t{i % TENANTS}"
    return Record(f"{tenant}/s/{i}", tenant, "s", "turn", i, text, {}, vector / np.linalg.norm(vector))


def _on_disk(root: Path, marker: str) -> bool:
    return any(marker.encode() in p.read_bytes() for p in root.rglob("*") if p.is_file())


def _timed(store: MilvusRecordStore, step: Callable[[], None]) -> tuple[float, float]:
    """Seconds ``step`` took, and the slowest point read (ms) another thread made meanwhile."""
    slowest = [0.0]
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            started = time.perf_counter()
            store.get(COLLECTION, tenant="t3", pks=["t3/s/3"])
            slowest[0] = max(slowest[0], (time.perf_counter() - started) * 1000)

    reader = threading.Thread(target=read)
    reader.start()
    started = time.perf_counter()
    step()
    took = time.perf_counter() - started
    done.set()
    reader.join()
    return took, slowest[0]


def run(rows: int) -> None:
    rng = np.random.default_rng(7)
    with scratch_server() as server:
        store = MilvusRecordStore(server.uri, timeout_s=120)
        store.ensure_collection(COLLECTION, dim=DIM)
        started = time.perf_counter()
        for start in range(0, rows, 500):
            batch = range(start, min(rows, start + 500))
            store.upsert(COLLECTION, [_row(i, f"turn {i} " + "x" * 290, rng) for i in batch])
        store.erase_deleted(COLLECTION)  # a flush: every row in a segment
        print(f"{rows:,} rows written and flushed in {time.perf_counter() - started:.1f} s", flush=True)
        time.sleep(10)  # milvus-lite's own compactions after the flushes
        data = server.data_dir / "collections" / COLLECTION / "partitions"
        print(f"segments: {len(list(data.rglob('*.parquet')))} Parquet files, "
              f"{sum(p.stat().st_size for p in data.rglob('*.parquet')) / 2**20:.0f} MiB", flush=True)

        took, slowest = _timed(store, lambda: store.erase_deleted(COLLECTION))
        print(f"nothing deleted:          erasure {took * 1000:7.0f} ms, slowest read meanwhile {slowest:6.1f} ms")

        store.upsert(COLLECTION, [_row(rows, "the log marker Qorvilantix", rng)])
        store.delete(COLLECTION, tenant=f"t{rows % TENANTS}", pks=[f"t{rows % TENANTS}/s/{rows}"])
        took, slowest = _timed(store, lambda: store.erase_deleted(COLLECTION))
        print(f"one turn, in the log:     erasure {took * 1000:7.0f} ms, slowest read meanwhile {slowest:6.1f} ms, "
              f"on disk after: {_on_disk(server.data_dir, 'Qorvilantix')}")

        store.delete(COLLECTION, tenant="t1", pks=["t1/s/1"])
        took, slowest = _timed(store, lambda: store.erase_deleted(COLLECTION))
        print(f"one turn, in a segment:   erasure {took * 1000:7.0f} ms, slowest read meanwhile {slowest:6.1f} ms, "
              f"on disk after: {_on_disk(server.data_dir, 'turn 1 xxx')}")

        store.delete(COLLECTION, tenant="t2")
        took, slowest = _timed(store, lambda: store.erase_deleted(COLLECTION))
        print(f"a tenant ({rows // TENANTS} rows):      erasure {took * 1000:7.0f} ms, slowest read meanwhile "
              f"{slowest:6.1f} ms, on disk after: {_on_disk(server.data_dir, 'turn 2 xxx')}")


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 30_000)
