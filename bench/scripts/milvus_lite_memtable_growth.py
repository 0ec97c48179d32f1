"""milvus-lite 3.2.2 reads as a collection's rows grow, with milvus-lite's 128 MiB memtable and
Strata's 2 MiB: a read by primary key through MilvusRecordStore.get, the same read with a tenant
term in the filter (what get sent before), a tenant's scan, and an upsert of 20 rows (medians).

Run as::

    python -m strata_bench.scripts.milvus_lite_memtable_growth
    python bench/scripts/milvus_lite_memtable_growth.py      # the same
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from strata.store.milvus import MilvusRecordStore
from strata.store.records import Record
from strata_bench.scratch_milvus import scratch_server
from strata_bench.stats import median

__all__ = ["run"]

TENANTS = 100


def median_ms(fn: Callable[[], Any], n: int = 20) -> float:
    """The median of ``n`` calls of ``fn``, in ms."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return median(times)


def run(limit_bytes: int) -> None:
    """Fill a collection to 1,000, 10,000 and 30,000 rows under a memtable of ``limit_bytes``; print each read."""
    env = {**os.environ, "MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES": str(limit_bytes)}
    with scratch_server(env=env) as server:
        store = MilvusRecordStore(server.uri, timeout_s=60)
        store.ensure_collection("state", dim=2)
        client = store._connect()
        done = 0
        for total in (1_000, 10_000, 30_000):
            rows = [
                Record(f"t{i % TENANTS}/w/{i}", f"t{i % TENANTS}", "s", "working", 0, "x" * 200, {"i": i},
                       np.ones(2, np.float32))
                for i in range(done, total)
            ]
            started = time.perf_counter()
            for i in range(0, len(rows), 20):
                store.upsert("state", rows[i : i + 20])
            upsert = (time.perf_counter() - started) / (len(rows) / 20) * 1000
            done = total
            get = median_ms(lambda: store.get("state", tenant="t5", pks=["t5/w/5"]))
            scoped = median_ms(lambda: client.query("state", filter='tenant == "t5" and pk in ["t5/w/5"]',
                                                    output_fields=["pk", "payload"]))
            scan = median_ms(lambda: store.scan("state", tenant="t7", with_vectors=False), n=5)
            print(
                f"memtable {limit_bytes / 2**20:>5.0f} MiB, {total:>6,} rows: get {get:6.1f} ms   "
                f"get with a tenant term {scoped:6.1f} ms   scan of {total // TENANTS} rows {scan:7.1f} ms   "
                f"upsert of 20 {upsert:5.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    for limit in (128 * 2**20, 2 * 2**20):
        run(limit)
