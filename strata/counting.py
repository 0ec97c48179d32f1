"""What each process counts per tenant, and for which tenant the work running now is.

Every process that serves tenants (an API replica, a layer shard, an in-cluster client) keeps
one :class:`UsageCounter`, :data:`COUNTER`: the API's calls per route, the word pieces its
embedder read, the LLM's tokens in and out. A count is a dict increment under a lock; the
counts reach the store as rows of :mod:`strata.access.usage`, written by the process's own
flush task every ``serve.usage_flush_s`` (a process that dies loses at most that interval).

Code that embeds or calls the LLM for a tenant says so with :func:`on_behalf_of`; the
embedding and LLM providers are left without a tenant argument, and the count reaches the
tenant through a context variable (which ``asyncio.to_thread`` and new tasks carry).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from strata.ids import SYSTEM_TENANT
from strata.store.records import Record, RecordStore

__all__ = [
    "COUNTER",
    "GROUPS",
    "HOUR_S",
    "TOKENS",
    "USAGE_KIND",
    "UsageCounter",
    "count_tokens",
    "on_behalf_of",
    "process_counter",
    "usage_pk",
    "working_for",
]

#: The kind of a usage row in the state collection (tenant :data:`SYSTEM_TENANT`, session the counted tenant).
USAGE_KIND = "usage"
HOUR_S = 3600
#: What a row counts: calls per route, and tokens per :data:`TOKENS` name.
GROUPS = ("calls", "tokens")
#: Tokens counted: word pieces the embedding model read (after each text's cut to
#: ``embedding.max_tokens`` / ``query_max_tokens``), and the LLM's prompt and reply tokens
#: as its endpoint answered them.
TOKENS = ("embedding", "llm_in", "llm_out")
#: Buckets kept in memory after they were written, by hours: a call counted late in its hour still finds its bucket.
_KEEP_HOURS = 2

_tenant: ContextVar[str | None] = ContextVar("strata_usage_tenant", default=None)


def usage_pk(tenant: str, hour: int, replica: str) -> str:
    """The row of one process's counts of ``tenant`` in the hour starting at ``hour`` (Unix seconds)."""
    return f"{SYSTEM_TENANT}/{USAGE_KIND}/{tenant}/{hour}/{replica}"


@dataclass
class UsageCounter:
    """One process's counts per (tenant, hour), written to the store by :meth:`flush`.

    Thread-safe: the LLM's counts come from worker threads.

    Args:
        replica: this counter's id in its rows' keys; by default a new random one per process.
        clock: Unix seconds (tests move their own).
    """

    replica: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    clock: Callable[[], float] = time.time
    _buckets: dict[tuple[str, int], dict[str, dict[str, int]]] = field(
        default_factory=lambda: defaultdict(lambda: {group: {} for group in GROUPS})
    )
    _dirty: set[tuple[str, int]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, tenant: str, name: str, n: int = 1, *, group: str = "calls") -> None:
        """``n`` more of ``name`` (a route, or one of :data:`TOKENS` in group ``tokens``) for ``tenant``, now."""
        bucket = (tenant, int(self.clock()) // HOUR_S * HOUR_S)
        with self._lock:
            counts = self._buckets[bucket][group]
            counts[name] = counts.get(name, 0) + n
            self._dirty.add(bucket)

    def pending(self) -> list[Record]:
        """The rows of every bucket counted since the last successful flush."""
        now_ms = int(self.clock() * 1000)
        with self._lock:
            due = [(bucket, {g: dict(c) for g, c in self._buckets[bucket].items()}) for bucket in sorted(self._dirty)]
        return [
            Record(
                pk=usage_pk(tenant, hour, self.replica), tenant=SYSTEM_TENANT, session=tenant, kind=USAGE_KIND,
                ts_ms=now_ms, text="", payload={"tenant": tenant, "hour": hour, "replica": self.replica, **counts},
            )
            for (tenant, hour), counts in due
        ]

    def written(self, rows: Iterable[Record]) -> None:
        """Mark :meth:`pending`'s ``rows`` as in the store: a bucket counted again since stays
        due, its row holds less."""
        with self._lock:
            for row in rows:
                bucket = (row.session, int(row.payload["hour"]))
                if all(self._buckets[bucket][g] == row.payload.get(g, {}) for g in GROUPS):
                    self._dirty.discard(bucket)
            oldest = (int(self.clock()) // HOUR_S - _KEEP_HOURS) * HOUR_S
            for bucket in [b for b in self._buckets if b[1] < oldest and b not in self._dirty]:
                del self._buckets[bucket]

    def flush(self, store: RecordStore, collection: str) -> int:
        """Write the pending rows to ``collection`` and mark them written; returns how many. On
        failure nothing is marked: the next flush writes the same buckets, with whatever was
        counted meanwhile.

        Raises:
            strata.errors.StoreUnavailable: the store did not take the rows.
        """
        rows = self.pending()
        if rows:
            store.upsert(collection, rows)
            self.written(rows)
        return len(rows)


#: This process's counter: every count of the process goes here, and one flush task writes it.
COUNTER = UsageCounter()


def process_counter() -> UsageCounter:
    """:data:`COUNTER`, looked up when called: code that Serve pickles by value (the ingress
    deployment's methods) would otherwise carry a copy of it, which no count reaches."""
    return COUNTER


class on_behalf_of:  # lower case: a context manager, named as contextlib's are
    """The work inside is ``tenant``'s: embeddings and LLM calls made in it (and in threads
    and tasks started in it) count for ``tenant``. A class, not a generator: it is entered on
    every request that embeds (~1 us less)."""

    __slots__ = ("_tenant", "_token")

    def __init__(self, tenant: str) -> None:
        self._tenant = tenant
        self._token: Token[str | None] | None = None

    def __enter__(self) -> None:
        self._token = _tenant.set(self._tenant)

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            _tenant.reset(self._token)


def working_for() -> str | None:
    """The tenant of :func:`on_behalf_of` around the running code, if any."""
    return _tenant.get()


def count_tokens(name: str, n: int, *, tenant: str | None = None, counter: UsageCounter = COUNTER) -> None:
    """``n`` tokens of ``name`` (one of :data:`TOKENS`) for ``tenant``, by default the tenant
    of :func:`on_behalf_of`; work on behalf of nobody is not counted."""
    tenant = tenant if tenant is not None else _tenant.get()
    if tenant is not None and n:
        counter.count(tenant, name, n, group="tokens")
