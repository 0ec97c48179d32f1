"""Forget tombstones: the rows that make a forget of a tenant or a session atomic across layers
(docs/scaling.md, "Forget tombstones").

A forget writes its tombstone before any layer forgets anything; each layer refuses writes under
it from its own part on, and marks that part done in a row of its own; the tombstone goes when
every layer's part is done, and only then is the forget acknowledged. A tenant's forget deletes
that tenant's rows, so these rows live under the system tenant, in the state collection::

    system/forget/<tenant>[/<session>]                              the tombstone (kind "forget")
    system/forgotten/<tenant>[/<session>]/<forget_id>/<layer>       a layer's part done ("forgotten")

Both carry the forgotten tenant in ``session``, so a tenant's load reads its tombstones in one
read. The store has no conditional write: each forget has an id, a second forget of the same
scope overwrites the tombstone with its own id, and a layer's mark names the forget it did,
so one row per layer per forget never needs a read-modify-write.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from strata.ids import SYSTEM_TENANT, validate_id
from strata.store.records import Record, RecordStore

__all__ = ["Forget", "Tombstone", "TombstoneStore"]

_TOMBSTONE = "forget"
_DONE = "forgotten"


@dataclass(frozen=True)
class Tombstone:
    """A forget of ``tenant`` (of one of its sessions when ``session`` is set) in ``layers``."""

    tenant: str
    session: str | None
    layers: tuple[str, ...]
    #: Which forget of this scope: a second forget of it stands under its own id.
    forget_id: str
    begun_ms: int

    @classmethod
    def begin(cls, tenant: str, layers: Sequence[str], *, session: str | None = None) -> Tombstone:
        """A new forget's tombstone (not yet written)."""
        validate_id(tenant, field="tenant")
        if session is not None:
            validate_id(session, field="session_id")
        return cls(tenant, session, tuple(layers), uuid.uuid4().hex, int(time.time() * 1000))

    @property
    def key(self) -> tuple[str, str | None]:
        """The scope it stands for: (tenant, session or None for the whole tenant)."""
        return self.tenant, self.session

    def describe(self) -> str:
        """The scope in words, for an error's message."""
        if self.session is None:
            return f"tenant {self.tenant!r}"
        return f"session {self.session!r} of tenant {self.tenant!r}"

    def refuses(self, scope: str, session: str | None) -> bool:
        """Whether it refuses a write of version ``scope`` made by a call for ``session`` (None:
        the call named no session). A tenant's tombstone refuses every write; a session's, the
        writes of that session, and those whose session is not known (refused to be safe)."""
        if self.session is None:
            return True
        return session is None or self.session in (scope, session)


@dataclass(frozen=True)
class Forget:
    """A tombstone as the store holds it, with the layers whose part of *this* forget is done."""

    tombstone: Tombstone
    done: frozenset[str] = field(default_factory=frozenset)

    @property
    def finished(self) -> bool:
        return set(self.tombstone.layers) <= self.done


class TombstoneStore:
    """The tombstones and part marks in ``collection`` (the state collection)."""

    def __init__(self, store: RecordStore, collection: str) -> None:
        self._store = store
        self._collection = collection

    def put(self, tombstone: Tombstone) -> None:
        """Write ``tombstone`` (over an earlier forget's of the same scope); durable on return."""
        t = tombstone
        self._store.upsert(self._collection, [Record(
            pk=self._pk(t), tenant=SYSTEM_TENANT, session=t.tenant, kind=_TOMBSTONE, ts_ms=t.begun_ms, text="",
            payload={"tenant": t.tenant, "session": t.session, "layers": list(t.layers), "forget_id": t.forget_id,
                     "begun_ms": t.begun_ms},
        )])

    def of_tenant(self, tenant: str) -> list[Tombstone]:
        """The tombstones standing for ``tenant`` and its sessions (one read)."""
        rows = self._store.scan(self._collection, tenant=SYSTEM_TENANT, session=tenant, kinds=[_TOMBSTONE],
                                with_vectors=False)
        return [_tombstone(r) for r in rows]

    def mark_done(self, tombstone: Tombstone, layer: str) -> None:
        """Record that ``layer`` did its part of ``tombstone``'s forget."""
        t = tombstone
        self._store.upsert(self._collection, [Record(
            pk=self._done_pk(t, layer), tenant=SYSTEM_TENANT, session=t.tenant, kind=_DONE, ts_ms=t.begun_ms,
            text="", payload={"tenant": t.tenant, "session": t.session, "layer": layer, "forget_id": t.forget_id},
        )])

    def pending(self) -> tuple[list[Forget], list[str]]:
        """Every standing tombstone with its layers done, and the primary keys of the marks of
        forgets no longer standing (left by a part that ended after its forget was removed)."""
        rows = self._store.scan(self._collection, tenant=SYSTEM_TENANT, kinds=[_TOMBSTONE, _DONE], with_vectors=False)
        standing = {t.key: t for t in (_tombstone(r) for r in rows if r.kind == _TOMBSTONE)}
        done: dict[tuple[str, str | None], set[str]] = {}
        stray: list[str] = []
        for row in rows:
            if row.kind != _DONE:
                continue
            p = row.payload
            key = (str(p["tenant"]), p.get("session"))
            if key in standing and standing[key].forget_id == p["forget_id"]:
                done.setdefault(key, set()).add(str(p["layer"]))
            else:
                stray.append(row.pk)
        return [Forget(t, frozenset(done.get(k, ()))) for k, t in standing.items()], stray

    def remove(self, tombstone: Tombstone) -> bool:
        """Delete ``tombstone`` and its forget's marks; False (nothing deleted) when a later
        forget of the same scope has written its own tombstone over it: that one stands."""
        rows = self._store.get(self._collection, tenant=SYSTEM_TENANT, pks=[self._pk(tombstone)])
        if rows and rows[0].payload.get("forget_id") != tombstone.forget_id:
            return False
        # The tombstone first: a crash between the two leaves marks that pending() reports as stray.
        self._store.delete(self._collection, tenant=SYSTEM_TENANT, pks=[self._pk(tombstone)])
        self.delete_marks([self._done_pk(tombstone, layer) for layer in tombstone.layers])
        return True

    def delete_marks(self, pks: Sequence[str]) -> None:
        if pks:
            self._store.delete(self._collection, tenant=SYSTEM_TENANT, pks=list(pks))

    @staticmethod
    def _scope(t: Tombstone) -> str:
        return t.tenant if t.session is None else f"{t.tenant}/{t.session}"

    @classmethod
    def _pk(cls, t: Tombstone) -> str:
        return f"{SYSTEM_TENANT}/{_TOMBSTONE}/{cls._scope(t)}"

    @classmethod
    def _done_pk(cls, t: Tombstone, layer: str) -> str:
        return f"{SYSTEM_TENANT}/{_DONE}/{cls._scope(t)}/{t.forget_id}/{layer}"


def _tombstone(row: Record) -> Tombstone:
    p = row.payload
    return Tombstone(str(p["tenant"]), p.get("session"), tuple(p["layers"]), str(p["forget_id"]), int(p["begun_ms"]))
