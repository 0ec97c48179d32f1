"""The embedded milvus-lite server, with one write lock per collection.

milvus-lite 3.2.2 serves gRPC on a pool of threads, and a collection's
``insert``, ``upsert`` and ``delete`` hand out sequence numbers and append to
its write-ahead log without a lock. Two writes at once can interleave their
bytes in the log; after a kill, replay stops at the first broken batch and
drops every acknowledged row after it (measured: with 4 concurrent writers
nearly all rows written before a SIGKILL were gone; with 1, none). Strata's
collections are written concurrently (every shard, the audit, the keys), so
``strata up`` and the tests start milvus-lite through this module, which
serialises the writes of each collection and leaves reads concurrent.

It also flushes a collection's unflushed rows (its memtable) once they pass
2 MiB instead of milvus-lite's 128 MiB: every query that is not a primary-key
read walks all of them in Python, so a tenant's load among 30,000 unflushed
rows took 605 ms, and 125 ms with the smaller memtable, at no cost to writes
(``python docs/milvus_lite_memtable_growth.py``). ``MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES``
in the environment still wins.

Run as ``python -m strata.milvus_lite_server server --data-dir D --port P``
(the arguments of the ``milvus-lite`` command).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["COMMAND", "MEMTABLE_LIMIT_BYTES", "serialise_writes", "main"]

#: The command that runs the server (append the ``milvus-lite`` arguments).
COMMAND = (sys.executable, "-m", "strata.milvus_lite_server")
_WRITES = ("insert", "upsert", "delete")
#: When a collection's unflushed rows are written out as a segment (milvus-lite: 128 MiB).
MEMTABLE_LIMIT_BYTES = 2 * 1024 * 1024
_MEMTABLE_ENV = "MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES"


def serialise_writes() -> None:
    """Wrap milvus-lite's ``Collection`` writes in a per-collection re-entrant lock."""
    from milvus_lite.engine import collection  # type: ignore[import-untyped]

    cls: Any = collection.Collection
    if getattr(cls, "_strata_serialised", False):
        return
    guard = threading.Lock()

    def locked(write: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(write)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            lock = self.__dict__.get("_strata_write_lock")
            if lock is None:
                with guard:
                    lock = self.__dict__.setdefault("_strata_write_lock", threading.RLock())
            with lock:
                return write(self, *args, **kwargs)

        return run

    for name in _WRITES:
        setattr(cls, name, locked(getattr(cls, name)))
    cls._strata_serialised = True


def main(argv: list[str] | None = None) -> int:
    # milvus-lite reads its limits when first imported.
    os.environ.setdefault(_MEMTABLE_ENV, str(MEMTABLE_LIMIT_BYTES))
    from milvus_lite.cmdline import main as milvus_lite_main  # type: ignore[import-untyped]

    serialise_writes()
    return int(milvus_lite_main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
