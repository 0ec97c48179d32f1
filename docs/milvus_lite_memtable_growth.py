"""milvus-lite 3.2.2 primary-key get as unflushed rows grow (1,000 / 5,000 / 10,000), then after a flush.

    python docs/milvus_lite_memtable_growth.py
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import numpy as np
from tests.conftest import MilvusServer, free_port
from strata.milvus_store import MilvusRecordStore
from strata.records import Record
srv = MilvusServer(Path(tempfile.mkdtemp()) / "data", free_port()); srv.start()
try:
    st = MilvusRecordStore(f"http://127.0.0.1:{srv.port}", timeout_s=30)
    st.ensure_collection("state", dim=2)
    def t_get(n=30):
        ts = []
        for i in range(n):
            t = time.perf_counter(); st.get("state", tenant="system", pks=["system/apikey/k5"]); ts.append((time.perf_counter() - t) * 1000)
        return statistics.median(ts)
    st.upsert("state", [Record("system/apikey/k5", "system", "s", "apikey", 0, "", {"a": 1}, np.ones(2, np.float32))])
    for total in (1000, 5000, 10000):
        have = len(st.scan("state", tenant="t", with_vectors=False))
        rows = [Record(f"t/w/{i}", "t", "s", "working", 0, "x" * 200, {"i": i}, np.ones(2, np.float32)) for i in range(have, total)]
        for i in range(0, len(rows), 500): st.upsert("state", rows[i:i+500])
        print(f"{total} rows in memtable: get median {t_get():.1f} ms")
    t = time.perf_counter(); st._connect().flush("state"); print(f"flush took {(time.perf_counter()-t)*1000:.0f} ms")
    print(f"10000 rows after flush: get median {t_get():.1f} ms")
finally:
    srv.kill()
