"""A layer shard without Ray for the unit tests of the fence and of forgets: the plain
:class:`~strata_actors.shard.LayerShard` over the in-memory reference store, whose state per
tenant is a list of texts, a durable row each (collection ``rows``; the state collection ``state``)."""

from __future__ import annotations

from typing import Any

from strata.config import StrataSettings
from strata.store.records import InMemoryRecordStore
from strata.store.versions import VersionStore
from strata_actors.shard import LayerShard

__all__ = ["ROWS", "STATE", "ListShard", "list_store"]

ROWS, STATE = "rows", "state"


def list_store() -> InMemoryRecordStore:
    """A store with the two collections a :class:`ListShard` uses."""
    store = InMemoryRecordStore()
    for name in (ROWS, STATE):
        store.ensure_collection(name, dim=2)
    return store


class _Collections:
    state = STATE


class ListShard(LayerShard[list[str]]):
    """Shard 0 of an episodic layer of ``shards``; each test adds the writes it needs."""

    layer_name = "episodic"

    def __init__(self, store: InMemoryRecordStore, *, shards: int = 1) -> None:
        super().__init__(StrataSettings.from_dict({"actors": {"episodic_shards": shards}}).model_dump(), 0)
        self.store = store
        self._store, self._collections = store, _Collections()  # type: ignore[assignment]  # what _fence reads

    async def _backend(self) -> Any:
        return self.store, _Collections(), VersionStore(self.store, STATE)

    def make_layer(self, tenant: str, store: Any, collections: Any) -> list[str]:
        return sorted(r.text for r in self.store.scan(ROWS, tenant=tenant))

    def tenant_rows(self, collections: Any) -> tuple[str, list[str] | None]:
        return ROWS, None

    async def texts(self, tenant: str) -> list[str]:
        return list((await self._tenant(tenant)).layer)
