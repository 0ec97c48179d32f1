"""Acknowledged rows milvus-lite loses to a ``kill -9`` under concurrent writers.

Run as::

    python -m strata_bench.scripts.milvus_lite_wal_race CLIENTS SECONDS [plain|locked]
    python bench/scripts/milvus_lite_wal_race.py CLIENTS SECONDS [plain|locked]      # the same

``plain`` runs the ``milvus-lite`` command as installed; ``locked`` runs it through
``strata.store.milvus_lite`` (writes serialised per collection), as Strata does. Each
client upserts rows into one collection until the server is killed after SECONDS; the
server is restarted on the same data and the rows acknowledged before the kill are
counted. The README's figures come from ``4 5 plain``, ``1 5 plain`` and ``4 5 locked``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np

from strata.errors import StoreUnavailable
from strata.store.milvus import MilvusRecordStore
from strata.store.milvus_lite import COMMAND
from strata.store.milvus_lite_process import MilvusLiteProcess
from strata.store.records import Record
from strata_bench.scratch_milvus import scratch_server

__all__ = ["main"]


def main(clients: int, seconds: float, mode: str) -> None:
    """Write from ``clients`` threads for ``seconds``, kill -9 the server, restart it, count the rows lost."""
    command = [str(Path(sys.executable).parent / "milvus-lite")] if mode == "plain" else COMMAND
    with scratch_server(command=command) as server:
        acked, kept = _race(server, clients, seconds)
    lost = sum(pk not in kept for pk in acked)
    print(f"{mode}, {clients} clients: {len(acked)} rows acknowledged, {lost} lost after kill -9 and restart")


def _race(server: MilvusLiteProcess, clients: int, seconds: float) -> tuple[list[str], set[str]]:
    """The rows acknowledged before the kill, and those the restarted server holds."""
    uri = server.uri
    MilvusRecordStore(uri, timeout_s=3).ensure_collection("state", dim=2)
    acked: list[str] = []

    def write(client: int) -> None:
        store = MilvusRecordStore(uri, timeout_s=3)
        store.ensure_collection("state", dim=2)
        n = 0
        while True:
            n += 1
            pk = f"c{client}-{n}"
            row = Record(pk=pk, tenant="t", session="s", kind="k", ts_ms=0, text=pk, payload={"n": n},
                         vector=np.ones(2, np.float32))
            try:
                store.upsert("state", [row])
            except StoreUnavailable:
                return
            acked.append(pk)

    threads = [threading.Thread(target=write, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    server.kill()
    for thread in threads:
        thread.join()
    server.start()  # on the same data
    store = MilvusRecordStore(uri, timeout_s=3)
    store.ensure_collection("state", dim=2)
    return acked, {r.pk for r in store.scan("state", tenant="t", with_vectors=False)}


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "plain")
