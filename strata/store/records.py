"""The durable record store boundary, and its in-memory reference implementation.

Every layer persists :class:`Record` rows through :class:`RecordStore`. The
Milvus implementation (``strata.store.milvus``) is the product; the
in-memory one here is the reference that unit tests run against. Both
scope every read and delete to one tenant by construction: there is no
method that takes no tenant.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from strata.ids import SYSTEM_TENANT

__all__ = ["InMemoryRecordStore", "Record", "RecordStore"]


@dataclass(frozen=True)
class Record:
    """One row: a turn, a summary, a working item, a state blob."""

    pk: str
    tenant: str
    session: str
    kind: str
    ts_ms: int
    text: str
    payload: dict[str, Any] = field(default_factory=dict)
    #: Unit vector for embedded records; None for state rows (stored as zeros).
    vector: np.ndarray | None = None


class RecordStore(Protocol):
    """Durable rows per collection. A call returns only once the write is durable.

    Raises:
        strata.errors.StoreUnavailable: the backend cannot be reached in time.
    """

    def ensure_collection(self, name: str, *, dim: int) -> None: ...

    def upsert(self, collection: str, records: Sequence[Record]) -> None: ...

    def scan(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        kinds: Sequence[str] | None = None,
        with_vectors: bool = True,
    ) -> list[Record]:
        """Every row of ``tenant`` (optionally one session, some kinds)."""
        ...

    def scan_after(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        kinds: Sequence[str] | None = None,
        after: str,
        limit: int,
    ) -> list[Record]:
        """Up to ``limit`` of the rows :meth:`scan` returns, without vectors, whose primary keys
        sort after ``after``, in key order: a page of a long history, at the cost of the page."""
        ...

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]: ...

    def delete(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        pks: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        """Delete rows of ``tenant``: all, one session's, some kinds, or the given primary keys."""
        ...

    def ping(self) -> None:
        """Raise StoreUnavailable unless the backend answers."""
        ...

    def tenants(self, collection: str) -> list[str]:
        """The tenants with rows in ``collection``, sorted (Strata's own rows left out): a
        read across tenants, for ``strata reindex`` and the embedder check; ids only."""
        ...

    def expired(self, collection: str, *, now_ms: int, kinds: Sequence[str]) -> list[tuple[str, str, str]]:
        """``(tenant, session, pk)`` of the rows of ``kinds`` whose ``payload.expires_ms`` is
        ``now_ms`` or earlier: the one read across tenants, for the TTL sweeper; it
        returns no content."""
        ...


class InMemoryRecordStore:
    """A dict per collection; the reference implementation for tests."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Record]] = {}
        self._lock = threading.Lock()

    def ensure_collection(self, name: str, *, dim: int) -> None:
        with self._lock:
            self._rows.setdefault(name, {})

    def upsert(self, collection: str, records: Sequence[Record]) -> None:
        with self._lock:
            table = self._rows[collection]
            for record in records:
                table[record.pk] = replace(record)

    def scan(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        kinds: Sequence[str] | None = None,
        with_vectors: bool = True,
    ) -> list[Record]:
        rows = self._matching(collection, tenant, session, kinds)
        return rows if with_vectors else [replace(r, vector=None) for r in rows]

    def scan_after(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        kinds: Sequence[str] | None = None,
        after: str,
        limit: int,
    ) -> list[Record]:
        rows = [r for r in self._matching(collection, tenant, session, kinds) if r.pk > after]
        return [replace(r, vector=None) for r in sorted(rows, key=lambda r: r.pk)[:limit]]

    def _matching(
        self, collection: str, tenant: str, session: str | None, kinds: Sequence[str] | None
    ) -> list[Record]:
        """The rows :meth:`scan` and :meth:`scan_after` read: the tenant's, of one session and some kinds if given."""
        with self._lock:
            return [
                r
                for r in self._rows[collection].values()
                if r.tenant == tenant
                and (session is None or r.session == session)
                and (kinds is None or r.kind in kinds)
            ]

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]:
        with self._lock:
            table = self._rows[collection]
            return [table[p] for p in pks if p in table and table[p].tenant == tenant]

    def delete(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        pks: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        with self._lock:
            table = self._rows[collection]
            doomed = [
                pk
                for pk, r in table.items()
                if r.tenant == tenant
                and (session is None or r.session == session)
                and (pks is None or pk in pks)
                and (kinds is None or r.kind in kinds)
            ]
            for pk in doomed:
                del table[pk]
            return len(doomed)

    def ping(self) -> None:
        return None

    def tenants(self, collection: str) -> list[str]:
        with self._lock:
            return sorted({r.tenant for r in self._rows[collection].values() if r.tenant != SYSTEM_TENANT})

    def expired(self, collection: str, *, now_ms: int, kinds: Sequence[str]) -> list[tuple[str, str, str]]:
        with self._lock:
            return [
                (r.tenant, r.session, r.pk)
                for r in self._rows[collection].values()
                if r.kind in kinds
                and isinstance(r.payload.get("expires_ms"), (int, float))
                and r.payload["expires_ms"] <= now_ms
            ]
