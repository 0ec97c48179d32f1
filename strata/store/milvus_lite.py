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
836 ms with 128 MiB and 109 ms with 2 MiB (``python -m strata_bench.scripts.milvus_lite_memtable_growth``).
Writes pay for it in flushes and in the compactions that merge the small
segments. (The slow reads after a 300-tenant ingest, once blamed on those, came
from scans that named no partition and from the TTL sweep: README, "Storage".)
``MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES`` in the environment still wins.

Two more defaults differ from milvus-lite's own. It serves with 64 threads
instead of 10: writes of one collection wait for each other (the lock above,
and a flush or compaction holds a collection for up to ~2 s), and with 10
threads, 16 writers left a reader waiting 304 ms at the median, against 16-18 ms
with 64 (``python -m strata_bench.scripts.milvus_lite_read_stalls``). And it accepts the keepalive
pings pymilvus sends every 10 s on an idle connection, instead of closing such
connections with "too_many_pings" (gRPC reconnected, and logged the GOAWAY in
every client's log).

And it answers only callers that hold the data dir's token: with ``--token-file F``
(``strata up`` passes DATA_DIR/milvus-token, 0600) every RPC whose ``authorization``
metadata is not the token (pymilvus sends ``base64(token)`` for ``token=``) is refused
with UNAUTHENTICATED before milvus-lite sees it, compared in constant time. The path,
not the token, is on the command line, which every local user can read in /proc. The
check costs about 0.01 ms per call: 2,000 primary-key reads took 0.969 / 0.956 / 1.006 ms
each at the median without it and 0.988 / 0.976 / 1.004 ms with it, in three rounds on a
2-core machine (a script timing ``MilvusRecordStore.get``, in issue 18's closing note).
Everything the server writes is owner-only (umask 077).

Reads are kept out of a flush (:class:`FlushGate`): milvus-lite 3.2.2 empties a collection's
memtable before its flushed segment is visible, and a read in between returned a row's
previous value, or none. A read that meets a flush waits for it (one flush writes at most
the 2 MiB memtable).

Run as ``python -m strata.store.milvus_lite server --data-dir D --port P [--token-file F]``
(the arguments of the ``milvus-lite`` command, plus ``--token-file``); another process starts,
waits for and stops one with :class:`strata.store.milvus_lite_process.MilvusLiteProcess`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hmac
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from strata.store.erasure import serve_compaction_as_erasure

__all__ = [
    "COMMAND",
    "MEMTABLE_LIMIT_BYTES",
    "SERVER_THREADS",
    "TOKEN_FILE",
    "FlushGate",
    "accept_keepalive_pings",
    "main",
    "require_token",
    "serialise_writes",
]

#: The command that runs the server (append the ``milvus-lite`` arguments).
COMMAND = (sys.executable, "-m", "strata.store.milvus_lite")
#: ``flush`` swaps the write-ahead log and memtable a write is appending to.
_WRITES = ("insert", "upsert", "delete", "flush")
#: What reads a collection's memtable and segments: kept out of a flush (:class:`FlushGate`).
_READS = ("get", "search", "query", "count", "partition_num_entities")
#: When a collection's unflushed rows are written out as a segment (milvus-lite: 128 MiB).
MEMTABLE_LIMIT_BYTES = 2 * 1024 * 1024
_MEMTABLE_ENV = "MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES"
#: gRPC threads of the server (milvus-lite: 10); ``--max-workers`` still wins.
SERVER_THREADS = 64
#: The embedded store's token, in the data dir (0600): ``strata up`` makes it.
TOKEN_FILE = "milvus-token"  # noqa: S105  the name of the file, not a secret
_TOKEN_FLAG = "--token-file"  # noqa: S105  a command-line flag, not a secret
_KEEPALIVE = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
)


class FlushGate:
    """Reads of a collection share it; a flush has it alone (waiting readers wait, and new
    readers queue behind a waiting flush, so flushes are never starved).

    milvus-lite's flush swaps in an empty memtable first and makes the flushed segment
    visible last; a read in between sees neither, so a point read returned the row's
    previous value (or none): a version counter read then could be claimed twice. Reads
    re-enter freely on the thread that holds the gate."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._flushing = False
        self._flushes_waiting = 0
        self._depth = threading.local()

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        depth: int = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._cond:
                while self._flushing or self._flushes_waiting:
                    self._cond.wait()
                self._readers += 1
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if depth == 0:
                with self._cond:
                    self._readers -= 1
                    if not self._readers:
                        self._cond.notify_all()

    @contextlib.contextmanager
    def flush(self) -> Iterator[None]:
        with self._cond:
            self._flushes_waiting += 1
            try:
                while self._flushing or self._readers:
                    self._cond.wait()
            finally:
                self._flushes_waiting -= 1
            self._flushing = True
        try:
            yield
        finally:
            with self._cond:
                self._flushing = False
                self._cond.notify_all()


def serialise_writes() -> None:
    """Wrap milvus-lite's ``Collection`` writes in a per-collection re-entrant lock, and
    keep its reads out of a flush (:class:`FlushGate`)."""
    from milvus_lite.engine import collection  # type: ignore[import-untyped]

    cls: Any = collection.Collection
    if getattr(cls, "_strata_serialised", False):
        return
    guard = threading.Lock()

    def state(self: Any, name: str, make: Callable[[], Any]) -> Any:
        value = self.__dict__.get(name)
        if value is None:
            with guard:
                value = self.__dict__.setdefault(name, make())
        return value

    def locked(write: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(write)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            with state(self, "_strata_write_lock", threading.RLock):
                return write(self, *args, **kwargs)

        return run

    def gated(method: Callable[..., Any], *, flush: bool = False) -> Callable[..., Any]:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            gate: FlushGate = state(self, "_strata_flush_gate", FlushGate)
            with gate.flush() if flush else gate.read():
                return method(self, *args, **kwargs)

        return run

    for name in _WRITES:
        setattr(cls, name, locked(getattr(cls, name)))
    for name in _READS:
        setattr(cls, name, gated(getattr(cls, name)))
    cls._trigger_flush = gated(cls._trigger_flush, flush=True)
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


def require_token(token: str) -> None:
    """Make every gRPC server built from now on refuse calls that lack ``token``.

    Raises:
        ValueError: ``token`` is empty (a server that accepts an empty token accepts anyone).
    """
    import grpc

    if not token:
        raise ValueError("the store token is empty")
    expected = base64.b64encode(token.encode())
    refusal = "this Milvus answers only Strata's processes: send the data dir's milvus-token as the token"

    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

    refused: Any = grpc.unary_unary_rpc_method_handler(refuse)

    class RequireToken(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
            for key, value in details.invocation_metadata or ():
                if key == "authorization":
                    sent = value.encode() if isinstance(value, str) else bytes(value)
                    if hmac.compare_digest(sent, expected):
                        return continuation(details)
                    break
            return refused

    build: Callable[..., Any] = grpc.server

    def server(*args: Any, interceptors: Any = (), **kwargs: Any) -> Any:
        return build(*args, interceptors=[RequireToken(), *(interceptors or ())], **kwargs)

    grpc.server = server


def _take_token_file(args: list[str]) -> tuple[list[str], Path | None]:
    """``args`` without ``--token-file F`` (or ``--token-file=F``), and F."""
    rest: list[str] = []
    path: Path | None = None
    items = iter(args)
    for arg in items:
        if arg == _TOKEN_FLAG:
            path = Path(next(items, ""))
        elif arg.startswith(_TOKEN_FLAG + "="):
            path = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return rest, path


def main(argv: list[str] | None = None) -> int:
    os.umask(0o077)  # the store's files and log: owner-only
    # milvus-lite reads its limits when first imported.
    os.environ.setdefault(_MEMTABLE_ENV, str(MEMTABLE_LIMIT_BYTES))
    from milvus_lite.cmdline import main as milvus_lite_main  # type: ignore[import-untyped]

    args, token_file = _take_token_file(list(sys.argv[1:] if argv is None else argv))
    if args[:1] == ["server"] and not any(a.startswith("--max-workers") for a in args):
        args += ["--max-workers", str(SERVER_THREADS)]
    if token_file is not None:
        try:
            require_token(token_file.read_text().strip())
        except (OSError, ValueError) as exc:
            print(f"milvus-lite: cannot use the token in {token_file}: {exc}", file=sys.stderr)
            return 2
    serialise_writes()
    serve_compaction_as_erasure()
    accept_keepalive_pings()
    return int(milvus_lite_main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
