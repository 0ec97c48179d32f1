"""Placement: which shard of a layer owns a tenant.

Each tenant lives on exactly one shard of a layer, so that shard is the single writer of the
tenant's rows and in-memory state (:mod:`strata_actors.residency`). Every process that knows
the settings computes the same owner: the router sends a tenant's calls there
(:mod:`strata_actors.router`), the shared rate limits keep its counters there
(:mod:`strata_actors.limits`), and a shard's TTL sweep purges only the tenants it owns
(:mod:`strata_actors.expiry`). This function is the one definition of that mapping.
"""

from __future__ import annotations

import zlib

__all__ = ["owner_shard"]


def owner_shard(tenant: str, shards: int) -> int:
    """The shard of a layer with ``shards`` actors that owns ``tenant``."""
    return zlib.crc32(tenant.encode()) % shards
