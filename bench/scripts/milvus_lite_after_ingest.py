"""Reads of milvus-lite 3.2.2 after a scale ingest like `strata bench`'s, through Strata's launcher.

WRITERS threads upsert TENANTS x 100 episodic-sized rows (384-d vectors, ~800-byte payloads) in
batches of 10 into one collection, then the script times, every 2 s for WATCH seconds, what a
request and a cold tenant pay: a point read in another small collection (the API-key lookup) and
one tenant's scan with vectors (an episodic actor loading it); then the TTL sweep's query. A read
over 250 ms gets a py-spy dump of the server (py-spy must be on PATH; `pip install py-spy`).

Run as::

    python -m strata_bench.scripts.milvus_lite_after_ingest [TENANTS] [WATCH] [MEMTABLE_MIB]   # default 300 120 2
    python bench/scripts/milvus_lite_after_ingest.py [TENANTS] [WATCH] [MEMTABLE_MIB]          # the same

NO_PRUNE=1 scans without naming the tenant's partition (what MilvusRecordStore.scan did before);
TENANT_INDEX=1 adds an INVERTED index on tenant; INDEX=AUTOINDEX gives the vectors milvus-lite's
AUTOINDEX (HNSW) instead of Strata's FLAT; PROFILE=FILE writes py-spy's raw stacks of the
server over the watch, with reads back to back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

from strata.store.milvus import MilvusRecordStore
from strata.store.milvus_lite_process import MilvusLiteProcess
from strata.store.records import Record
from strata_bench.scratch_milvus import scratch_server
from strata_bench.stats import cpu_s, median, rss_mib

__all__ = ["main"]

WRITERS = 4


def main(tenants: int, watch: float, memtable_mib: float) -> None:
    """Ingest ``tenants`` x 100 rows, then time reads for ``watch`` seconds (see the module docstring)."""
    env = {**os.environ, "MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES": str(int(memtable_mib * 2**20))}
    with scratch_server(env=env) as server:  # stopped also when a step fails: no milvus-lite left behind
        _run(tenants, watch, memtable_mib, server)


def _run(tenants: int, watch: float, memtable_mib: float, server: MilvusLiteProcess) -> None:
    url = server.uri

    def store() -> MilvusRecordStore:
        s = MilvusRecordStore(url, timeout_s=120, vector_index=os.environ.get("INDEX", "FLAT"))
        s.ensure_collection("episodic", dim=384)
        s.ensure_collection("keys", dim=2)
        return s

    if os.environ.get("TENANT_INDEX"):
        client = store()._connect()
        index = client.prepare_index_params()
        index.add_index(field_name="tenant", index_type="INVERTED")
        client.release_collection("episodic")
        client.create_index("episodic", index)
        client.load_collection("episodic")
        print("INVERTED index on tenant", client.list_indexes("episodic"), flush=True)

    reader = store()
    if os.environ.get("NO_PRUNE"):  # scans as before: no partition named
        reader._buckets.clear()
    reader.upsert("keys", [Record("sys/k/1", "sys", "k", "key", 0, "", {"hash": "x"}, np.ones(2, np.float32))])
    rng = np.random.default_rng(0)
    rows_per_writer: list[list[Record]] = [[] for _ in range(WRITERS)]
    for t in range(tenants):
        for i in range(100):
            vector = rng.standard_normal(384).astype(np.float32)
            rows_per_writer[t % WRITERS].append(Record(
                f"t{t}/turn/s/{i}", f"t{t}", "s", "turn", i, "x" * 300,
                {"seq": i, "speaker": "user", "user": "y" * 300, "entities": {"e": ["z" * 40] * 4}},
                vector / np.linalg.norm(vector),
            ))

    def write(rows: list[Record]) -> None:
        s = store()
        for i in range(0, len(rows), 10):
            s.upsert("episodic", rows[i : i + 10])

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(rows,)) for rows in rows_per_writer]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"{memtable_mib:g} MiB memtable: ingested {tenants * 100:,} rows in {time.perf_counter() - started:.0f} s; "
          f"{_server_use(server.pid)}", flush=True)
    gets: list[float] = []
    scans: list[float] = []
    dumps = 0
    profile = os.environ.get("PROFILE")  # a file for py-spy's collapsed stacks of the server over the watch
    spy = subprocess.Popen(  # noqa: S603  py-spy from PATH, a developer's own tool
        ["py-spy", "record", "--format", "raw", "-r", "200", "-o", profile, "-d", str(int(watch)),  # noqa: S607  py-spy from PATH
         "--pid", str(server.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    ) if profile else None
    end = time.monotonic() + watch
    while time.monotonic() < end:
        t0 = time.perf_counter()
        reader.get("keys", tenant="sys", pks=["sys/k/1"])
        get_ms = (time.perf_counter() - t0) * 1000
        tenant = f"t{rng.integers(tenants)}"
        t0 = time.perf_counter()
        found = reader.scan("episodic", tenant=tenant, with_vectors=True)
        scan_ms = (time.perf_counter() - t0) * 1000
        gets.append(get_ms)
        scans.append(scan_ms)
        print(f"  +{watch - (end - time.monotonic()):5.0f} s  key get {get_ms:7.1f} ms   "
              f"scan of {len(found)} rows {scan_ms:7.1f} ms", flush=True)
        if max(get_ms, scan_ms) > 250 and dumps < 3 and shutil.which("py-spy") and not profile:
            dumps += 1
            dump = subprocess.run(["py-spy", "dump", "--pid", str(server.pid)],  # noqa: S603, S607  py-spy from PATH
                                  check=False, capture_output=True, text=True)
            print(dump.stdout, flush=True)
        time.sleep(0 if profile else 2)
    sweeps = []
    reader._deadlines.add("episodic")  # walk as a collection with deadlines is walked (and as every one was)
    for _ in range(3):  # what each layer shard's TTL sweep asks, every ttl.sweep_interval_s
        t0 = time.perf_counter()
        reader.expired("episodic", now_ms=int(time.time() * 1000), kinds=["turn", "summary"])
        sweeps.append((time.perf_counter() - t0) * 1000)
    print(f"TTL sweep query over the collection: median {median(sweeps):.0f} ms", flush=True)
    print(f"median key get {median(gets):.1f} ms (max {max(gets):.0f}), "
          f"median scan {median(scans):.1f} ms (max {max(scans):.0f})", flush=True)
    if spy is not None:
        spy.wait()
    print(f"at the end: {_server_use(server.pid)}", flush=True)


def _server_use(pid: int) -> str:
    """The server's CPU time so far and its resident memory, from /proc."""
    return f"server CPU {cpu_s(pid):.0f} s, RSS {rss_mib(pid):.0f} MiB"


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 300, float(args[1]) if len(args) > 1 else 120,
         float(args[2]) if len(args) > 2 else 2)
