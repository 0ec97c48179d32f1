"""Key-lookup cost in milvus-lite 3.2.2: a primary-key get in a collection with 10,000 unflushed rows,
and in a small collection beside it.

Run as::

    python -m strata_bench.scripts.milvus_lite_memtable_lookup
    python bench/scripts/milvus_lite_memtable_lookup.py      # the same

The README figures for API keys in strata_state vs strata_keys (38.5 vs 1.3 ms medians) came from this.
"""

from __future__ import annotations

import time

import numpy as np

from strata.store.milvus import MilvusRecordStore
from strata.store.records import Record
from strata_bench.scratch_milvus import scratch_server
from strata_bench.stats import median

__all__ = ["main"]


def main() -> None:
    """Time 50 key lookups in each collection; print their medians."""
    with scratch_server() as server:
        st = MilvusRecordStore(server.uri, timeout_s=30)
        st.ensure_collection("state", dim=2)
        st.ensure_collection("keys", dim=2)
        key = Record("system/apikey/k5", "system", "apikey", "apikey", 0, "", {"a": 1}, np.ones(2, np.float32))
        st.upsert("state", [key])
        st.upsert("keys", [key])
        rows = [Record(f"t/w/{i}", "t", "s", "working", 0, "x" * 200, {"i": i}, np.ones(2, np.float32))
                for i in range(10000)]
        for i in range(0, len(rows), 500):
            st.upsert("state", rows[i : i + 500])
        for coll in ("state", "keys"):
            ts = []
            for _ in range(50):
                t = time.perf_counter()
                st.get(coll, tenant="system", pks=["system/apikey/k5"])
                ts.append((time.perf_counter() - t) * 1000)
            print(f"key lookup in {coll!r} beside 10,000 unflushed state rows: median {median(ts):.1f} ms")


if __name__ == "__main__":
    main()
