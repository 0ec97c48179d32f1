"""Acknowledged rows milvus-lite loses to a ``kill -9`` under concurrent writers.

Run it from the repository root (it imports the test suite's milvus-lite helpers from
``tests/conftest.py``)::

    python -m strata_bench.scripts.milvus_lite_wal_race CLIENTS SECONDS [plain|locked]
    python bench/scripts/milvus_lite_wal_race.py CLIENTS SECONDS [plain|locked]      # the same

``plain`` runs the ``milvus-lite`` command as installed; ``locked`` runs it through
``strata.store.milvus_lite`` (writes serialised per collection), as Strata does. Each
client upserts rows into one collection until the server is killed after SECONDS; the
server is restarted on the same data and the rows acknowledged before the kill are
counted. The README's figures come from ``4 5 plain``, ``1 5 plain`` and ``4 5 locked``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for tests.conftest

from strata.errors import StoreUnavailable
from strata.store.milvus import MilvusRecordStore
from strata.store.milvus_lite import COMMAND
from strata.store.records import Record
from tests.conftest import MilvusServer, free_port, wait_for_milvus

__all__ = ["main"]


class _Server(MilvusServer):
    plain = True

    def start(self) -> None:
        command = [str(Path(sys.executable).parent / "milvus-lite")] if self.plain else list(COMMAND)
        with open(self.data_dir.parent / f"milvus-{self.port}.log", "ab") as log:  # the server keeps its own copy
            self.process = subprocess.Popen(  # noqa: S603  milvus-lite or our launcher, no shell
                [*command, "server", "--data-dir", str(self.data_dir), "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log, stderr=log, start_new_session=True,
            )
        wait_for_milvus(self.port, self.process)


def main(clients: int, seconds: float, mode: str) -> None:
    """Write from ``clients`` threads for ``seconds``, kill -9 the server, restart it, count the rows lost."""
    tmp = Path(tempfile.mkdtemp(prefix="wal-race-"))
    server = _Server(tmp / "data", free_port())
    server.plain = mode == "plain"
    server.start()
    uri = f"http://127.0.0.1:{server.port}"
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
    server.start()
    try:
        store = MilvusRecordStore(uri, timeout_s=3)
        store.ensure_collection("state", dim=2)
        kept = {r.pk for r in store.scan("state", tenant="t", with_vectors=False)}
    finally:
        server.kill()
    lost = sum(pk not in kept for pk in acked)
    print(f"{mode}, {clients} clients: {len(acked)} rows acknowledged, {lost} lost after kill -9 and restart")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "plain")
