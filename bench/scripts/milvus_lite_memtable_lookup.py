"""Key-lookup cost in milvus-lite 3.2.2: a primary-key get in a collection with 10,000 unflushed rows,
and in a small collection beside it.

Run from the repository root (it imports the test suite's milvus-lite helpers from
``tests/conftest.py``)::

    python -m strata_bench.scripts.milvus_lite_memtable_lookup
    python bench/scripts/milvus_lite_memtable_lookup.py      # the same

The README figures for API keys in strata_state vs strata_keys (38.5 vs 1.3 ms medians) came from this.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for tests.conftest
import numpy as np

from strata.store.milvus import MilvusRecordStore
from strata.store.records import Record
from strata_bench.stats import median
from tests.conftest import MilvusServer, free_port

__all__ = ["main"]


def main() -> None:
    """Time 50 key lookups in each collection; print their medians."""
    srv = MilvusServer(Path(tempfile.mkdtemp()) / "data", free_port())
    srv.start()
    try:
        st = MilvusRecordStore(f"http://127.0.0.1:{srv.port}", timeout_s=30)
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
    finally:
        srv.kill()


if __name__ == "__main__":
    main()
