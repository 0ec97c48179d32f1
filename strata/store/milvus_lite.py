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
read walks all of them in Python, so a tenant's scan among 30,000 rows took
836 ms with 128 MiB and 109 ms with 2 MiB (``python docs/milvus_lite_memtable_growth.py``).
Writes pay for it in flushes and in the compactions that merge the small
segments. (The slow reads after a 300-tenant ingest, once blamed on those, came
from scans that named no partition and from the TTL sweep: README, "Storage".)
``MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES`` in the environment still wins.

Two more defaults differ from milvus-lite's own. It serves with 64 threads
instead of 10: writes of one collection wait for each other (the lock above,
and a flush or compaction holds a collection for up to ~2 s), and with 10
threads, 16 writers left a reader waiting 304 ms at the median, against 16-18 ms
with 64 (``python docs/milvus_lite_read_stalls.py``). And it accepts the keepalive
pings pymilvus sends every 10 s on an idle connection, instead of closing such
connections with "too_many_pings" (gRPC reconnected, and logged the GOAWAY in
every client's log).

Run as ``python -m strata.store.milvus_lite server --data-dir D --port P``
(the arguments of the ``milvus-lite`` command).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["COMMAND", "MEMTABLE_LIMIT_BYTES", "SERVER_THREADS", "accept_keepalive_pings", "main", "serialise_writes"]

#: The command that runs the server (append the ``milvus-lite`` arguments).
COMMAND = (sys.executable, "-m", "strata.store.milvus_lite")
_WRITES = ("insert", "upsert", "delete")
#: When a collection's unflushed rows are written out as a segment (milvus-lite: 128 MiB).
MEMTABLE_LIMIT_BYTES = 2 * 1024 * 1024
_MEMTABLE_ENV = "MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES"
#: gRPC threads of the server (milvus-lite: 10); ``--max-workers`` still wins.
SERVER_THREADS = 64
_KEEPALIVE = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
)


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


def accept_keepalive_pings() -> None:
    """Let milvus-lite's gRPC server take pymilvus' keepalive pings (every 10 s, calls or not)."""
    import grpc

    if getattr(grpc.server, "_strata_keepalive", False):
        return
    # Untyped on purpose: the stub's positional parameters include ``options``, which
    # the wrapper passes by keyword after whatever positionals its caller gave.
    build: Callable[..., Any] = grpc.server

    def server(*args: Any, options: Any = (), **kwargs: Any) -> Any:
        return build(*args, options=[*(options or ()), *_KEEPALIVE], **kwargs)

    server._strata_keepalive = True  # type: ignore[attr-defined]
    grpc.server = server


def main(argv: list[str] | None = None) -> int:
    # milvus-lite reads its limits when first imported.
    os.environ.setdefault(_MEMTABLE_ENV, str(MEMTABLE_LIMIT_BYTES))
    from milvus_lite.cmdline import main as milvus_lite_main  # type: ignore[import-untyped]

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["server"] and not any(a.startswith("--max-workers") for a in args):
        args += ["--max-workers", str(SERVER_THREADS)]
    serialise_writes()
    accept_keepalive_pings()
    return int(milvus_lite_main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
