"""The audit history: who changed what, when, at which version — never the content.

One row per change in the state collection, under the tenant it concerns:
time, key id, operation, layer, record id and the version it made. Rows
carry no text, so forgetting an item leaves its audit trail without its
content (the issue's rule), and forgetting a tenant leaves the record that
it was forgotten.

Requests do not write their audit rows: they hand them to an :class:`AuditWriter`,
which writes what is queued as one store call per batch, off the request path.
What that promises:

- An entry is written *after* the change it describes has been acknowledged to
  the client, within about ``audit.flush_interval_s`` (or sooner, once
  ``audit.max_batch`` entries are queued). The change itself is durable when it
  is acknowledged; its audit row is best effort, as it always was.
- An entry is lost only with the process: if it dies (or is killed) before the
  entry's batch is written. A normal exit writes what is queued (:meth:`AuditWriter.close`,
  also run at interpreter exit).
- A batch the store refuses is kept and retried, 0.5 s after the failure and
  twice as long after each further one (at most 30 s). While the store stays
  down the queue is bounded by ``audit.max_pending``: past it the oldest entries
  are dropped, counted in :attr:`AuditWriter.dropped` and logged.
- Reading a tenant's history through the writer that queued its entries
  (:meth:`AuditWriter.flush` with the tenant, then :meth:`AuditLog.read`) sees
  them: a caller reads its own writes' entries. Another process's queued entries
  show up within the flush interval.

The writer uses a thread, not an asyncio task: the in-cluster client's blocking
API runs one event loop per call, and a task would die with each of them.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import re
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from strata.errors import InvalidInput
from strata.ids import validate_id
from strata.store.records import Record, RecordStore

__all__ = ["AUDIT_KIND", "AuditEntry", "AuditLog", "AuditWriter", "close_all_writers", "entry"]

AUDIT_KIND = "audit"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
#: What a row's id holds after ``tenant/audit/``: its time, its place in its batch, a random tail.
_CURSOR = re.compile(r"[0-9]{1,20}-[0-9a-f]{1,32}")

_log = logging.getLogger(__name__)

#: A failed batch is retried after this long, then twice as long each time, up to the cap.
_RETRY_FIRST_S = 0.5
_RETRY_MAX_S = 30.0
#: The writer's thread ends after this long with nothing to write (a new entry starts another).
_IDLE_EXIT_S = 10.0


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    key_id: str
    #: What was done: ``record_turns``, ``index_document``, ``delete_skill``, ``forget_tenant`` ...
    op: str
    layer: str
    #: The record it touched: a session, a document, a skill, the tenant.
    record_id: str
    #: The version the change made (None for changes that make none).
    version: int | None = None

    def to_payload(self) -> dict[str, Any]:
        return {**asdict(self), "at": self.at.isoformat()}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> AuditEntry:
        return cls(
            at=datetime.fromisoformat(payload["at"]),
            key_id=str(payload.get("key_id", "")),
            op=str(payload["op"]),
            layer=str(payload["layer"]),
            record_id=str(payload["record_id"]),
            version=payload.get("version"),
        )


class AuditLog:
    def __init__(self, store: RecordStore, collection: str) -> None:
        self._store = store
        self._collection = collection

    def append(self, tenant: str, entries: list[AuditEntry]) -> None:
        self.append_all([(tenant, e) for e in entries])

    def append_all(self, entries: Sequence[tuple[str, AuditEntry]]) -> None:
        """Write ``(tenant, entry)`` pairs of any tenants as one store call."""
        for tenant in {t for t, _ in entries}:
            validate_id(tenant, field="tenant")
        if not entries:
            return
        now_ms = int(time.time() * 1000)
        self._store.upsert(
            self._collection,
            [
                Record(
                    # Time first, then the place in the batch: the ids sort in the order the changes
                    # were made. (Rows written with 13 digits of milliseconds still sort among these.)
                    pk=f"{tenant}/{AUDIT_KIND}/{(e.at - _EPOCH) // _MICROSECOND:016d}-{i:05d}{uuid.uuid4().hex[:8]}",
                    tenant=tenant,
                    session=AUDIT_KIND,
                    kind=AUDIT_KIND,
                    ts_ms=now_ms,
                    text="",
                    payload=e.to_payload(),
                )
                for i, (tenant, e) in enumerate(entries)
            ],
        )

    def read(self, tenant: str, *, since: datetime | None = None, limit: int = 100) -> list[AuditEntry]:
        """The tenant's changes since ``since`` (without a zone: UTC), oldest first, at most ``limit``."""
        return self.page(tenant, since=since, limit=limit)[0]

    def page(
        self, tenant: str, *, since: datetime | None = None, after: str | None = None, limit: int = 100
    ) -> tuple[list[AuditEntry], str | None]:
        """At most ``limit`` of the tenant's changes, oldest first: after ``since`` (without a
        zone: UTC) and after the cursor ``after``; and the cursor of the last one returned when
        more follow (else None). Paging by cursor misses nothing: paging by ``since`` would skip
        the entries that share the last one's time.

        Raises:
            InvalidInput: ``after`` is not a cursor this log gave."""
        if after is not None and not _CURSOR.fullmatch(after):
            raise InvalidInput("after must be the next_after of an earlier page of this history", field="after")
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)  # compared with the entries' aware times, it would raise
        # Keys sort in time order (append_all), so a page is read from its bound on, not the
        # whole history: paging through a long one is linear, not quadratic.
        prefix = f"{tenant}/{AUDIT_KIND}/"
        bounds = [prefix.rstrip("/")]  # below every key of the tenant's log
        if after is not None:
            bounds.append(prefix + after)
        if since is not None and since > _EPOCH:
            bounds.append(f"{prefix}{(since - _EPOCH) // _MICROSECOND:016d}.")  # past every key of that microsecond
        start = max(bounds)
        picked: list[tuple[str, AuditEntry]] = []
        while len(picked) <= limit:
            want = limit + 1 - len(picked)
            rows = self._store.scan_after(
                self._collection, tenant=tenant, session=AUDIT_KIND, kinds=[AUDIT_KIND], after=start, limit=want
            )
            for row in rows:
                audit_entry = AuditEntry.from_payload(row.payload)
                if since is None or audit_entry.at > since:  # rows of 13-digit milliseconds sort near, not exactly
                    picked.append((row.pk, audit_entry))
            if len(rows) < want:
                break
            start = rows[-1].pk
        page = picked[:limit]
        more = len(picked) > limit
        return [e for _, e in page], (page[-1][0][len(prefix) :] if more else None)


class AuditWriter:
    """Queues audit entries and writes them in batches from a background thread.

    :meth:`add` returns at once; the thread writes what is queued every
    ``flush_interval_s``, or as soon as ``max_batch`` entries wait, each batch of at
    most ``max_batch`` entries (any tenants) as one :meth:`AuditLog.append_all`. The
    module docstring says what is promised.

    Args:
        open_log: opens the log on first use (in a worker thread: it may connect to the store).
        flush_interval_s: the longest an entry waits for its batch while the store answers.
        max_batch: entries per store call; this many queued start a batch at once.
        max_pending: entries kept while the store refuses them; past it the oldest are dropped.
        retry_first_s: the wait before retrying a refused batch, doubled after each refusal...
        retry_max_s: ...up to this.

    Examples:
        >>> writer = AuditWriter(lambda: AuditLog(store, "state"))
        >>> writer.add("acme", entry("record_turns", "episodic", "s1", key_id="k1", version=3))
        >>> writer.flush("acme")  # before reading acme's history
        >>> await writer.aclose()  # at shutdown: write what is queued
    """

    def __init__(
        self,
        open_log: Callable[[], AuditLog],
        *,
        flush_interval_s: float = 0.2,
        max_batch: int = 500,
        max_pending: int = 100_000,
        retry_first_s: float = _RETRY_FIRST_S,
        retry_max_s: float = _RETRY_MAX_S,
    ) -> None:
        if flush_interval_s <= 0 or max_batch < 1 or max_pending < max_batch:
            raise ValueError("need flush_interval_s > 0 and 1 <= max_batch <= max_pending")
        self._open_log = open_log
        self._log: AuditLog | None = None
        self._opening = threading.Lock()
        self.flush_interval_s = flush_interval_s
        self.max_batch = max_batch
        self.max_pending = max_pending
        self._retry_first_s, self._retry_max_s = retry_first_s, retry_max_s
        #: Guards the queue, the thread's state and the counters.
        self._cond = threading.Condition()
        self._pending: deque[tuple[str, AuditEntry]] = deque()
        #: Held while a batch is out of the queue and not yet written: a flush waits for it.
        self._writing = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._retry_s: float | None = None
        #: Entries written, entries dropped because the queue was full, batches the store refused.
        self.written = 0
        self.dropped = 0
        self.failures = 0

    @property
    def pending(self) -> int:
        """Entries queued and not yet taken into a batch (a refused batch comes back)."""
        with self._cond:
            return len(self._pending)

    def log(self) -> AuditLog:
        """The log written to (opened on first use; blocks while the store connects)."""
        with self._opening:
            if self._log is None:
                self._log = self._open_log()
            return self._log

    def add(self, tenant: str, audit_entry: AuditEntry) -> None:
        """Queue ``audit_entry`` for ``tenant``; returns at once.

        Raises:
            strata.errors.InvalidInput: ``tenant`` is not a valid id (checked here, so one
                bad entry cannot fail a whole batch).
        """
        validate_id(tenant, field="tenant")
        with self._cond:
            if len(self._pending) >= self.max_pending:
                self._drop(len(self._pending) + 1 - self.max_pending)
            self._pending.append((tenant, audit_entry))
            if self._thread is None:
                self._stop = False
                self._thread = threading.Thread(target=self._run, name="strata-audit-writer", daemon=True)
                self._thread.start()
                _live.add(self)
            elif len(self._pending) >= self.max_batch:
                self._cond.notify_all()

    def flush(self, tenant: str | None = None) -> int:
        """Write what is queued now (only ``tenant``'s entries if given), after any batch
        being written; returns the entries written. Blocks: from async code, use :meth:`aflush`.

        Raises:
            strata.errors.StoreUnavailable: the store refused a batch (its entries stay queued).
        """
        with self._writing:
            with self._cond:
                left = len(self._pending) if tenant is None else sum(1 for t, _ in self._pending if t == tenant)
            done = 0
            while done < left:
                n = self._write_batch(tenant, left - done)
                if n == 0:
                    break
                done += n
            return done

    async def aflush(self, tenant: str | None = None) -> int:
        """:meth:`flush`, in a worker thread."""
        return await asyncio.to_thread(self.flush, tenant)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread and write what is queued, retrying for up to ``timeout_s``;
        what is still queued then is logged as lost. A later :meth:`add` starts again."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._stop = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        _live.discard(self)
        wait = self._retry_first_s
        while True:
            try:
                self.flush()
                return
            except Exception as exc:
                if time.monotonic() + wait > deadline:
                    _log.error("%d audit entries not written at shutdown: %s", self.pending, exc)
                    return
                time.sleep(wait)
                wait = min(wait * 2, self._retry_max_s)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """:meth:`close`, in a worker thread."""
        await asyncio.to_thread(self.close, timeout_s)

    # -- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                self._cond.wait_for(self._woken, timeout=self._retry_s or self.flush_interval_s)
                if self._stop or (not self._pending and time.monotonic() - idle_since >= _IDLE_EXIT_S):
                    self._thread = None
                    return
                if not self._pending:
                    continue
            idle_since = time.monotonic()
            try:
                self.flush()
                retry_s = None
            except Exception as exc:
                retry_s = min(self._retry_s * 2, self._retry_max_s) if self._retry_s else self._retry_first_s
                _log.warning("audit batch not written (%d queued), retrying in %.1f s: %s", self.pending, retry_s, exc)
            with self._cond:
                self._retry_s = retry_s

    def _woken(self) -> bool:
        return self._stop or (self._retry_s is None and len(self._pending) >= self.max_batch)

    def _write_batch(self, tenant: str | None, most: int) -> int:
        """Take up to ``min(most, max_batch)`` queued entries (of ``tenant``, or any) and write
        them as one store call; on failure put them back in front. The caller holds ``_writing``."""
        size = min(most, self.max_batch)
        with self._cond:
            if tenant is None:
                batch = [self._pending.popleft() for _ in range(min(size, len(self._pending)))]
            else:
                batch, rest = [], deque[tuple[str, AuditEntry]]()
                for item in self._pending:
                    (batch if item[0] == tenant and len(batch) < size else rest).append(item)
                self._pending = rest
        if not batch:
            return 0
        try:
            self.log().append_all(batch)
        except BaseException:
            with self._cond:
                self.failures += 1
                self._pending.extendleft(reversed(batch))
                if len(self._pending) > self.max_pending:
                    self._drop(len(self._pending) - self.max_pending)
            raise
        with self._cond:
            self.written += len(batch)
        return len(batch)

    def _drop(self, n: int) -> None:
        """Drop the ``n`` oldest entries (the caller holds ``_cond``)."""
        for _ in range(n):
            self._pending.popleft()
        before, self.dropped = self.dropped, self.dropped + n
        # One line per 1,000 dropped, not one per entry: the store is down, the log should stay readable.
        if before // 1000 != self.dropped // 1000 or before == 0:
            _log.error(
                "audit queue full (%d entries): %d oldest entries dropped so far", self.max_pending, self.dropped
            )


def entry(op: str, layer: str, record_id: str, *, key_id: str, version: int | None = None) -> AuditEntry:
    return AuditEntry(at=datetime.now(UTC), key_id=key_id, op=op, layer=layer, record_id=record_id, version=version)


#: Writers with a running thread; what they hold is written when the interpreter exits.
_live: weakref.WeakSet[AuditWriter] = weakref.WeakSet()


@atexit.register
def close_all_writers(timeout_s: float = 5.0) -> None:
    """Close every writer of this process that has entries on their way (:meth:`AuditWriter.close`):
    at interpreter exit, and wherever the stores are about to go before the process does."""
    for writer in list(_live):
        writer.close(timeout_s=timeout_s)
