"""Placement: which shard of a layer owns a tenant.

Each tenant lives on exactly one shard of a layer, so that shard is the single writer of the
tenant's rows and in-memory state (:mod:`strata_actors.residency`). Every process computes the
same owner from the tenant and the shard count: the router sends a tenant's calls there
(:mod:`strata_actors.router`), the shared rate limits keep its counters there
(:mod:`strata_actors.limits`), and a shard's TTL sweep purges only the tenants it owns
(:mod:`strata_actors.expiry`). This function is the one definition of that mapping.

The mapping is rendezvous (highest-random-weight) hashing: each (tenant, shard) pair has a
pseudo-random weight and the tenant's owner is the shard of highest weight. So a layer that
grows from n to n+1 shards moves only the tenants the new shard outweighs, 1/(n+1) of them on
average, and one that shrinks moves only the tenants of the shards removed (docs/scaling.md).
The weights come from BLAKE2b and a fixed integer mixer, never Python's ``hash()``, which is
salted per process.

:func:`serves` is the fence: whether a shard answers a call for a tenant, given the placement
epoch the caller placed it by and the shard's own view (docs/scaling.md, "Handoff with fencing").
"""

from __future__ import annotations

import hashlib

from strata.store.placement import ShardView

__all__ = ["owner_shard", "serves"]

_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit integers whose output bits each depend on
    every input bit, so weights of one tenant on neighbouring shards are unrelated."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def owner_shard(tenant: str, shards: int) -> int:
    """The shard of a layer with ``shards`` actors that owns ``tenant`` (0 … shards-1).

    Raises:
        ValueError: ``shards`` is less than 1.
    """
    if shards < 1:
        raise ValueError(f"a layer has at least one shard, not {shards}")
    if shards == 1:
        return 0
    # One digest per lookup, then one mix per shard: microseconds at the counts the settings allow.
    key = int.from_bytes(hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    weights = [_mix(key ^ _mix(shard + 1)) for shard in range(shards)]
    return max(range(shards), key=weights.__getitem__)


def serves(view: ShardView, shard: int, tenant: str, epoch: int | None) -> bool:
    """Whether ``shard``, placing by ``view``, answers a call for ``tenant`` that its caller
    placed at ``epoch`` (None: a caller that placed by no epoch, such as an operator's call).

    It must own the tenant under its view; a caller of the view's epoch is answered, and so is
    one of the epoch before for a tenant that did not move. Older callers are refused whatever
    they ask: their shard count may name a third owner.
    """
    if owner_shard(tenant, view.shards) != shard:
        return False
    if epoch is None or epoch == view.epoch:
        return True
    return (epoch == view.epoch - 1 and view.prev_shards is not None
            and owner_shard(tenant, view.prev_shards) == shard)
