"""Usage a tenant can see: calls per route, tokens embedded and sent to the LLM, per hour, and
the items each layer holds.

Each process counts in memory (:class:`~strata.counting.UsageCounter`, a dict increment per
count): the API replicas count calls and the query and turn embeddings they make, the layer
shards the embeddings and LLM calls of their layers. Each writes its counts to the store's
state collection every ``serve.usage_flush_s``: one row per process, tenant and hour
(:func:`~strata.counting.usage_pk`), holding that process's running totals for the hour. A
flush rewrites whole rows, so two processes never write the same row, a failed flush is simply
written again by the next one, and a read sums every process's rows (:func:`counts_from_rows`).
A process that dies loses what it counted since its last flush; a restarted one writes rows of
a new id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from strata.counting import HOUR_S, USAGE_KIND, UsageCounter, usage_pk
from strata.errors import InvalidInput
from strata.store.layout import Collections
from strata.store.records import Record, RecordStore

__all__ = [
    "HOUR_S",
    "MAX_WINDOW",
    "USAGE_KIND",
    "UsageCounter",
    "Window",
    "counts_from_rows",
    "held_items",
    "usage_pk",
]

#: The longest window one usage call reads.
MAX_WINDOW = timedelta(days=31)


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


def counts_from_rows(
    rows: Iterable[Record], window: Window, *, group: str = "calls"
) -> dict[str, dict[int, dict[str, int]]]:
    """Counts of ``group`` (calls per route, or ``tokens`` per kind) per tenant and hour in
    ``window``: every process's rows summed."""
    out: dict[str, dict[int, dict[str, int]]] = {}
    for row in rows:
        hour = int(row.payload["hour"])
        counted = row.payload.get(group) or {}  # rows written before tokens were counted have none
        if not window.since <= hour < window.until or not counted:
            continue
        hours = out.setdefault(str(row.payload["tenant"]), {}).setdefault(hour, {})
        for name, n in counted.items():
            hours[name] = hours.get(name, 0) + int(n)
    return out


def held_items(store: RecordStore, collections: Collections, tenant: str) -> dict[str, dict[str, int]]:
    """What ``tenant`` holds now, per layer: one scan of its rows without vectors per collection.
    Each layer's ``bytes`` are the UTF-8 bytes of its rows' text and payload (as JSON): what the
    tenant stored, without the vectors (4 bytes per dimension per row) or the store's own cost.

    Costs a read of the tenant's rows (their texts included), not a count: fine for a usage
    call, not for a hot path.
    """

    def kinds(collection: str, wanted: Sequence[str] | None) -> list[Record]:
        return store.scan(collection, tenant=tenant, kinds=list(wanted) if wanted else None, with_vectors=False)

    def size(rows: Sequence[Record]) -> int:
        return sum(len(r.text.encode()) + len(json.dumps(r.payload, ensure_ascii=False).encode()) for r in rows)

    working = kinds(collections.state, ["working"])
    episodic = kinds(collections.episodic, None)  # turns, summaries, and long turns' passages
    semantic = kinds(collections.semantic, None)  # documents, their parents and children
    procedural = kinds(collections.procedural, None)  # skills and their history
    return {
        "working": {"items": len(working), "bytes": size(working)},
        "episodic": {
            "turns": sum(r.kind == "turn" for r in episodic),
            "summaries": sum(r.kind == "summary" for r in episodic),
            "sessions": len({r.session for r in episodic if r.kind == "turn"}),
            "bytes": size(episodic),
        },
        "semantic": {
            "documents": sum(r.kind == "doc" for r in semantic),
            "passages": sum(r.kind == "child" for r in semantic),
            "bytes": size(semantic),
        },
        "procedural": {"skills": sum(r.kind == "skill" for r in procedural), "bytes": size(procedural)},
    }

