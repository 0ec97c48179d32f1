"""Reads of milvus-lite 3.2.2 beside concurrent writers: a point read every 50 ms while WRITERS
threads upsert ROWS episodic-sized rows (384-d vectors, 1,000 tenants) into one collection,
through Strata's launcher (2 MiB memtable, writes serialised per collection).

Run as::

    python -m strata_bench.scripts.milvus_lite_read_stalls THREADS WRITERS ROWS    # e.g. 10 16 60000, then 64 16 60000
    python bench/scripts/milvus_lite_read_stalls.py THREADS WRITERS ROWS           # the same

THREADS is the server's --max-workers (milvus-lite's default is 10; the launcher's, 64).
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

from strata.store.milvus import MilvusRecordStore
from strata.store.records import Record
from strata_bench.scratch_milvus import scratch_server
from strata_bench.stats import percentile

__all__ = ["main"]


def main(threads: str, writers: int, rows: int) -> None:
    """Read every 50 ms while ``writers`` threads upsert ``rows`` rows; print the read latencies."""
    with scratch_server(extra_args=["--max-workers", threads]) as server:
        _measure(server.uri, threads, writers, rows)


def _measure(url: str, threads: str, writers: int, rows: int) -> None:
    def store() -> MilvusRecordStore:
        s = MilvusRecordStore(url, timeout_s=120)
        s.ensure_collection("episodic", dim=384)
        return s

    store()
    done, latencies = threading.Event(), list[float]()

    def reader() -> None:
        s = store()
        while not done.is_set():
            started = time.perf_counter()
            s.get("episodic", tenant="t5", pks=["t5/s/5"])
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(0.05)

    def writer(w: int) -> None:
        s, rng = store(), np.random.default_rng(w)
        for i in range(w * 100, rows, 100 * writers):
            s.upsert("episodic", [
                Record(f"t{j % 1000}/s/{j}", f"t{j % 1000}", "s", "turn", 0, "some turn text " * 10, {"j": j},
                       rng.random(384, dtype=np.float32))
                for j in range(i, i + 100)
            ])

    started = time.time()
    reading = threading.Thread(target=reader)
    reading.start()
    pool = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    done.set()
    reading.join()  # before the server stops under it
    ms = sorted(latencies)
    print(f"--max-workers {threads}, {writers} writers, {rows:,} rows in {time.time() - started:.0f} s: "
          f"{len(ms)} reads, p50 {percentile(ms, 0.5):.1f} ms, p99 {percentile(ms, 0.99):.0f} ms, max {ms[-1]:.0f} ms")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
