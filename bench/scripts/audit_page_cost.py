"""What a page of a tenant's audit history costs on milvus-lite, by the history's length:
20,000 entries of one tenant (and 1,000 of another), the first page of 100, then 20 pages of
1,000 by cursor (``AuditLog.page``, as ``GET /v1/audit`` reads them), p50.

Run as::

    python -m strata_bench.scripts.audit_page_cost [ENTRIES]
"""

from __future__ import annotations

import sys
import time

from strata.access.audit import AuditLog, entry
from strata.store.milvus import MilvusRecordStore
from strata_bench.scratch_milvus import scratch_server
from strata_bench.stats import median

__all__ = ["main"]


def main() -> None:
    entries = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    with scratch_server() as server:
        store = MilvusRecordStore(server.uri, timeout_s=60)
        store.ensure_collection("state", dim=2)
        log = AuditLog(store, "state")
        for start in range(0, entries, 1000):
            log.append("acme", [entry("record_turns", "episodic", f"s{n}", key_id="k1", version=n)
                                for n in range(start, min(start + 1000, entries))])
        log.append("other", [entry("record_turns", "episodic", f"s{n}", key_id="k1", version=n) for n in range(1000)])
        began = time.perf_counter()
        _, after = log.page("acme", limit=100)
        first = (time.perf_counter() - began) * 1000
        took: list[float] = []
        while after and len(took) < 20:
            began = time.perf_counter()
            _, after = log.page("acme", after=after, limit=1000)
            took.append((time.perf_counter() - began) * 1000)
        print(f"{entries} entries: the first page of 100 {first:.0f} ms; "
              f"pages of 1,000 by cursor p50 {median(took):.0f} ms over {len(took)} pages")


if __name__ == "__main__":
    main()
