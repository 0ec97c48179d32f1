"""Usage a tenant can see: calls per route and hour, and the items each layer holds.

Calls are counted in memory by each API replica (:class:`CallCounter`, a dict increment per
call) and written to the store's state collection every ``serve.usage_flush_s``: one row per
replica, tenant and hour (:func:`usage_pk`), holding that replica's running totals for the
hour. A flush rewrites whole rows, so two replicas never write the same row, a failed flush is
simply written again by the next one, and a read sums every replica's rows (:func:`calls_from_rows`).
A replica that dies loses what it counted since its last flush; a restarted one writes rows
of a new replica id.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from strata.errors import InvalidInput
from strata.ids import SYSTEM_TENANT
from strata.store.layout import Collections
from strata.store.records import Record, RecordStore

__all__ = [
    "HOUR_S",
    "MAX_WINDOW",
    "USAGE_KIND",
    "CallCounter",
    "Window",
    "calls_from_rows",
    "held_items",
    "usage_pk",
]

#: The kind of a usage row in the state collection (tenant :data:`SYSTEM_TENANT`, session the counted tenant).
USAGE_KIND = "usage"
HOUR_S = 3600
#: The longest window one usage call reads.
MAX_WINDOW = timedelta(days=31)
#: Buckets kept in memory after they were written, by hours: a call counted late in its hour still finds its bucket.
_KEEP_HOURS = 2


def usage_pk(tenant: str, hour: int, replica: str) -> str:
    """The row of one replica's counts of ``tenant`` in the hour starting at ``hour`` (Unix seconds)."""
    return f"{SYSTEM_TENANT}/{USAGE_KIND}/{tenant}/{hour}/{replica}"


@dataclass
class CallCounter:
    """One API replica's call counts per (tenant, hour), written to the store by :meth:`flush`.

    Args:
        replica: this counter's id in its rows' keys; by default a new random one per process.
        clock: Unix seconds (tests move their own).
    """

    replica: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    clock: Callable[[], float] = time.time
    _buckets: dict[tuple[str, int], dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    _dirty: set[tuple[str, int]] = field(default_factory=set)

    def count(self, tenant: str, route: str) -> None:
        """One call of ``route`` by ``tenant``, now."""
        bucket = (tenant, int(self.clock()) // HOUR_S * HOUR_S)
        calls = self._buckets[bucket]
        calls[route] = calls.get(route, 0) + 1
        self._dirty.add(bucket)

    def pending(self) -> list[Record]:
        """The rows of every bucket counted since the last successful flush."""
        now_ms = int(self.clock() * 1000)
        return [
            Record(
                pk=usage_pk(tenant, hour, self.replica), tenant=SYSTEM_TENANT, session=tenant, kind=USAGE_KIND,
                ts_ms=now_ms, text="",
                payload={
                    "tenant": tenant, "hour": hour, "replica": self.replica,
                    "calls": dict(self._buckets[(tenant, hour)]),
                },
            )
            for tenant, hour in sorted(self._dirty)
        ]

    def written(self, rows: Iterable[Record]) -> None:
        """Mark :meth:`pending`'s ``rows`` as in the store. Call it in the thread that counts
        (the event loop): a bucket counted again since stays due, its row holds less."""
        for row in rows:
            bucket = (row.session, int(row.payload["hour"]))
            if self._buckets[bucket] == row.payload["calls"]:
                self._dirty.discard(bucket)
        oldest = (int(self.clock()) // HOUR_S - _KEEP_HOURS) * HOUR_S
        for bucket in [b for b in self._buckets if b[1] < oldest and b not in self._dirty]:
            del self._buckets[bucket]

    def flush(self, store: RecordStore, collection: str) -> int:
        """Write the pending rows and mark them written; returns how many. On failure nothing is
        marked: the next flush writes the same buckets, with whatever was counted meanwhile.

        Raises:
            strata.errors.StoreUnavailable: the store did not take the rows.
        """
        rows = self.pending()
        if rows:
            store.upsert(collection, rows)
            self.written(rows)
        return len(rows)


@dataclass(frozen=True)
class Window:
    """A usage window, whole hours: ``since`` (inclusive) to ``until`` (exclusive), Unix seconds."""

    since: int
    until: int

    @classmethod
    def resolve(cls, since: datetime | None, until: datetime | None, *, now: datetime) -> Window:
        """The window asked for: by default the 24 hours up to now; hours rounded out.

        Raises:
            strata.errors.InvalidInput: ``since`` after ``until``, or longer than :data:`MAX_WINDOW`.
        """
        end = _utc(until) if until is not None else now
        start = _utc(since) if since is not None else end - timedelta(hours=24)
        if start > end:
            raise InvalidInput(f"since ({start.isoformat()}) is after until ({end.isoformat()})", field="since")
        if end - start > MAX_WINDOW:
            raise InvalidInput(
                f"the window from since to until is {end - start}; at most {MAX_WINDOW.days} days", field="since"
            )
        first = int(start.timestamp()) // HOUR_S * HOUR_S
        last = -(-int(end.timestamp()) // HOUR_S) * HOUR_S
        return cls(since=first, until=max(last, first + HOUR_S))


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def calls_from_rows(rows: Iterable[Record], window: Window) -> dict[str, dict[int, dict[str, int]]]:
    """Calls per tenant, hour and route in ``window``: every replica's rows summed."""
    out: dict[str, dict[int, dict[str, int]]] = {}
    for row in rows:
        hour = int(row.payload["hour"])
        if not window.since <= hour < window.until:
            continue
        hours = out.setdefault(str(row.payload["tenant"]), {}).setdefault(hour, {})
        for route, n in row.payload["calls"].items():
            hours[route] = hours.get(route, 0) + int(n)
    return out


def held_items(store: RecordStore, collections: Collections, tenant: str) -> dict[str, dict[str, int]]:
    """What ``tenant`` holds now, per layer: one scan of its rows without vectors per collection.

    Costs a read of the tenant's rows (their texts included), not a count: fine for a usage
    call, not for a hot path.
    """

    def kinds(collection: str, wanted: Sequence[str]) -> list[Record]:
        return store.scan(collection, tenant=tenant, kinds=list(wanted), with_vectors=False)

    episodic = kinds(collections.episodic, ["turn", "summary"])
    semantic = kinds(collections.semantic, ["doc", "child"])
    return {
        "working": {"items": len(kinds(collections.state, ["working"]))},
        "episodic": {
            "turns": sum(r.kind == "turn" for r in episodic),
            "summaries": sum(r.kind == "summary" for r in episodic),
            "sessions": len({r.session for r in episodic if r.kind == "turn"}),
        },
        "semantic": {
            "documents": sum(r.kind == "doc" for r in semantic),
            "passages": sum(r.kind == "child" for r in semantic),
        },
        "procedural": {"skills": len(kinds(collections.procedural, ["skill"]))},
    }

