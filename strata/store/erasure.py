"""Deleted rows leave the disk: milvus-lite's side (a compaction that erases) and the store's
(a schedule that asks for it after deletes, off the request path).

milvus-lite 3.2.2 keeps a deleted row's bytes until something rewrites the file that holds
them. A row written since the last flush sits in the collection's write-ahead log
(``wal/wal_data_N.arrow``, Arrow IPC, text readable as is) until the next flush, which
happens when the memtable passes its limit (2 MiB under Strata's launcher): under a light
load, never. A flushed row sits in a Parquet segment (``partitions/P/data/*.parquet``,
text again readable as is) until a compaction merges that file, which milvus-lite does
only when four files of one size class exist; a delete writes a tombstone and nothing
else. So a forgotten turn, document or skill stayed readable on disk, after ``strata
down`` too. milvus-lite's ``ManualCompaction`` RPC (pymilvus ``compact``) does nothing.

The launcher (:mod:`strata.store.milvus_lite`) makes that RPC mean "erase": flush the
collection (the log with every unflushed row is deleted; rows deleted meanwhile are not
written out), then rewrite every segment holding a row with a tombstone without it, with
milvus-lite's own compaction step, one file at a time. Files that hold no deleted row are
not touched. Content replaced by an upsert (not deleted) stays in older segments until
milvus-lite merges them: no forget works that way.

:class:`EraseSchedule` runs in each process that holds a :class:`MilvusRecordStore`: after
a delete it asks for that erasure within ``milvus.erase_after_s`` (10 s by default), and
deletes of the same collection in between share one. On a Milvus server the same calls are ``flush`` and ``compact``,
which seal the segments and merge away deleted rows; when the server's files and its
message queue drop the old bytes is the server's configuration (``docs/storage.md``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["EraseSchedule", "erase_deleted", "serve_compaction_as_erasure"]

log = logging.getLogger(__name__)


def erase_deleted(collection: Any) -> int:
    """Flush a milvus-lite ``Collection`` and rewrite the segments that hold deleted rows
    without them; returns the segment files rewritten.

    Runs on the collection's background worker, where milvus-lite runs its own compactions,
    so the two never touch one file at once; the caller waits for it."""
    collection.flush()
    if collection._bg_closed:
        return _rewrite(collection)
    rewritten: int = collection._bg_executor.submit(_rewrite, collection).result()
    return rewritten


def _rewrite(collection: Any) -> int:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    tombstones: dict[Any, int] = collection._delta_index.snapshot
    if not tombstones:
        return 0
    pk = collection.pk_field
    with collection._maintenance_lock:
        files = {p: list(collection._manifest.get_data_files(p)) for p in collection._manifest.list_partitions()}
    # Found outside the lock (reads go on): files are immutable, and only this worker removes
    # them from the manifest. A tombstone newer than the row's sequence number deletes it.
    doomed: dict[str, list[str]] = {}
    for partition, names in files.items():
        folder = os.path.join(collection.data_dir, "partitions", partition)
        for name in names:
            ids = pq.read_table(os.path.join(folder, name), columns=[pk, "_seq"])
            keys = ids.column(pk)
            hit = pc.is_in(keys, value_set=pa.array(list(tombstones), type=keys.type))
            if not pc.any(hit).as_py():
                continue
            rows = ids.filter(hit)
            # Two columns of one table: of one length.
            seqs = zip(rows.column(pk).to_pylist(), rows.column("_seq").to_pylist(), strict=True)
            if any(tombstones[k] > s for k, s in seqs):
                doomed.setdefault(partition, []).append(name)
    if not doomed:
        return 0
    compactor = collection._compaction_mgr
    with collection._maintenance_lock:
        for partition, names in doomed.items():
            folder = os.path.join(collection.data_dir, "partitions", partition)
            for name in names:
                # One file in, the same file's live rows out: milvus-lite's compaction step
                # (new file and manifest first, the old file removed after).
                compactor._compact_files(partition, folder, [name], collection._manifest, collection._delta_index)
        compactor._gc_tombstones(collection._manifest, collection._delta_index)
        collection._refresh_segment_cache()
        collection._cleanup_orphan_index_files()
    collection._ensure_loaded_segments_indexed()
    return sum(len(names) for names in doomed.values())


def serve_compaction_as_erasure() -> None:
    """Make milvus-lite's ``ManualCompaction`` RPC run :func:`erase_deleted` on the named
    collection and answer when it is done (milvus-lite's own answers at once, doing nothing)."""
    from milvus_lite.adapter.grpc import servicer  # type: ignore[import-untyped]
    from milvus_lite.adapter.grpc.errors import success_status_kwargs, to_status_kwargs  # type: ignore[import-untyped]
    from milvus_lite.exceptions import MilvusLiteError  # type: ignore[import-untyped]
    from pymilvus.grpc_gen import common_pb2, milvus_pb2

    cls: Any = servicer.MilvusServicer
    if getattr(cls, "_strata_erases", False):
        return
    runs = iter(range(1, 2**62))

    def manual_compaction(self: Any, request: Any, context: Any) -> Any:
        try:
            collection = self._get_collection(request, context)
            started = time.monotonic()
            rewritten = erase_deleted(collection)
            log.info("erased deleted rows of %s: %d files rewritten in %.2f s", request.collection_name, rewritten,
                     time.monotonic() - started)
            return milvus_pb2.ManualCompactionResponse(
                status=common_pb2.Status(**success_status_kwargs()), compactionID=next(runs)
            )
        except MilvusLiteError as exc:
            return milvus_pb2.ManualCompactionResponse(status=common_pb2.Status(**to_status_kwargs(exc)))

    cls.ManualCompaction = manual_compaction
    cls._strata_erases = True


class EraseSchedule:
    """Runs ``erase(collection)`` at most ``after_s`` after :meth:`deleted` named it, on one
    daemon thread; deletes of a collection before its erasure began share it, and a delete
    during an erasure schedules another. A failed erasure is logged, not retried: the next
    delete of the collection schedules one again (as does the next process that opens it)."""

    def __init__(self, erase: Callable[[str], None], *, after_s: float) -> None:
        self._erase = erase
        self._after_s = after_s
        self._due: dict[str, float] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._busy = False

    def deleted(self, collection: str) -> None:
        """Rows of ``collection`` were deleted: erase them from disk within ``after_s``."""
        with self._cond:
            self._due.setdefault(collection, time.monotonic() + self._after_s)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="strata-erase", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no erasure is due or running (for tests and measurements); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._due or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                collection, at = min(self._due.items(), key=lambda item: item[1])
                wait_s = at - time.monotonic()
                if wait_s > 0:
                    self._cond.wait(wait_s)
                    continue
                del self._due[collection]
                self._busy = True
            try:
                self._erase(collection)
            except Exception as exc:
                log.warning("erasing the deleted rows of %s from disk failed: %s", collection, exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
