"""The placement directory's rows: each layer's shard count and its epoch (docs/scaling.md).

One row per layer in the state collection, under the system tenant
(``system/placement/<layer>``), as API keys are kept: every replica, every shard and a
restarted stack read the same value. The settings give only a layer's first count.

A change of the count goes through two states, so that a shard that starts in the middle of it
already refuses the tenants it is about to lose: :meth:`Placement.begin` records the intent
(``next_shards``), :meth:`Placement.publish` makes it the count routers place by.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from strata.ids import SYSTEM_TENANT
from strata.store.records import Record, RecordStore

__all__ = ["Placement", "PlacementStore", "ShardView"]

_KIND = "placement"


@dataclass(frozen=True)
class ShardView:
    """What a caller or a shard places a layer's tenants by: the shard count at ``epoch``, and
    the count one epoch before (None: unknown, or no change yet)."""

    epoch: int
    shards: int
    prev_shards: int | None = None


@dataclass(frozen=True)
class Placement:
    """One layer's row of the directory."""

    layer: str
    shards: int
    epoch: int = 0
    #: The count at ``epoch - 1``.
    prev_shards: int | None = None
    #: Set while a change to this count is in progress (fencing; not yet published).
    next_shards: int | None = None

    @property
    def published(self) -> ShardView:
        """The view routers place tenants by."""
        return ShardView(self.epoch, self.shards, self.prev_shards)

    @property
    def fenced(self) -> ShardView:
        """The view shards serve by: during a change, already the next one, so that no shard
        answers for a tenant it is about to lose."""
        if self.next_shards is None:
            return self.published
        return ShardView(self.epoch + 1, self.next_shards, self.shards)

    def begin(self, shards: int) -> Placement:
        """The row with a change to ``shards`` in progress."""
        return replace(self, next_shards=shards)

    def publish(self) -> Placement:
        """The row once the change in progress is done."""
        if self.next_shards is None:
            return self
        return Placement(self.layer, self.next_shards, self.epoch + 1, prev_shards=self.shards)


class PlacementStore:
    """The directory's rows in ``collection`` (the state collection)."""

    def __init__(self, store: RecordStore, collection: str) -> None:
        self._store = store
        self._collection = collection

    def get(self, layer: str) -> Placement | None:
        rows = self._store.get(self._collection, tenant=SYSTEM_TENANT, pks=[self._pk(layer)])
        if not rows:
            return None
        p = rows[0].payload
        return Placement(
            layer, int(p["shards"]), int(p["epoch"]),
            prev_shards=None if p.get("prev_shards") is None else int(p["prev_shards"]),
            next_shards=None if p.get("next_shards") is None else int(p["next_shards"]),
        )

    def put(self, placement: Placement) -> None:
        self._store.upsert(self._collection, [Record(
            pk=self._pk(placement.layer), tenant=SYSTEM_TENANT, session=_KIND, kind=_KIND, ts_ms=0, text="",
            payload={"shards": placement.shards, "epoch": placement.epoch, "prev_shards": placement.prev_shards,
                     "next_shards": placement.next_shards},
        )])

    @staticmethod
    def _pk(layer: str) -> str:
        return f"{SYSTEM_TENANT}/{_KIND}/{layer}"
