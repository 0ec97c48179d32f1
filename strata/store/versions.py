"""Durable version counters, one per (tenant, layer, scope).

A version is claimed (written) *before* the mutation it stands for, so a
failure between the two leaves a gap, never a reused number.
"""

from __future__ import annotations

from collections.abc import Sequence

from strata.ids import validate_id
from strata.store.records import Record, RecordStore

__all__ = ["STATE_DIM", "VersionStore"]

#: State rows carry no embedding; Milvus still needs a vector field.
STATE_DIM = 2
_KIND = "version"


class VersionStore:
    def __init__(self, store: RecordStore, collection: str) -> None:
        self._store = store
        self._collection = collection

    def get(self, tenant: str, layer: str, scope: str) -> int:
        return self.get_many(tenant, layer, [scope])[scope]

    def get_many(self, tenant: str, layer: str, scopes: Sequence[str]) -> dict[str, int]:
        """:meth:`get` of each of ``scopes``, in one read of the store."""
        if not scopes:
            return {}
        keys = {self._pk(tenant, layer, scope): scope for scope in scopes}
        found = {keys[row.pk]: int(row.payload["version"])
                 for row in self._store.get(self._collection, tenant=tenant, pks=list(keys)) if row.pk in keys}
        return {scope: found.get(scope, 0) for scope in scopes}

    def put(self, tenant: str, layer: str, scope: str, version: int) -> None:
        self._store.upsert(
            self._collection,
            [
                Record(
                    pk=self._pk(tenant, layer, scope),
                    tenant=tenant,
                    # Not the scope: forgetting a session deletes its rows by
                    # session, and the counter must survive that.
                    session=_KIND,
                    kind=_KIND,
                    ts_ms=0,
                    text="",
                    payload={"layer": layer, "version": version},
                )
            ],
        )

    @staticmethod
    def _pk(tenant: str, layer: str, scope: str) -> str:
        validate_id(scope, field="scope")
        return f"{tenant}/{_KIND}/{layer}/{scope}"
