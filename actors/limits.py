"""What the API replicas share about their callers: each key's rate limit and the
``Idempotency-Key`` claims of writes in flight.

``auth.limit_shards`` named, detached actors ``strata-limits-0 … n-1`` hold them, a tenant's
on ``owner_shard(tenant, n)`` (:mod:`strata_actors.placement`; one actor per tenant range).
:class:`LimitsShard` is the plain class; :class:`SharedLimits` is the replicas' typed handle on
the actors, and the only code that calls ``.remote()`` on them. It applies ``ray.remote`` itself: these actors are the
API's, not a memory layer's, and the layer router's reads and batching are not theirs.

What the actors hold is in their memory only, and that is enough (docs/security-and-operations.md):

- a bucket lost with its actor starts full again: a restart forgives a key at most one burst;
- a claim lost with its actor is no record of an answer: the store is. A write claims its key
  *then* reads the store for a kept answer, so a write whose answer was kept is replayed, not
  applied again, whatever the claims forgot. What a lost claim lets through is a duplicate that
  arrives while the first write is still running and the actor has just restarted;
- while an actor does not answer, each replica limits a key on its own
  (:class:`~strata.access.ratelimit.SharedRateLimiter`'s fallback), and a write with an
  Idempotency-Key gets 503 with Retry-After rather than run unclaimed.

Ray restarts a dead actor (``actors.max_restarts``), on another node if its node died.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from strata.access.idempotency import Claim, Claims
from strata.access.ratelimit import RateLimiter
from strata.config import StrataSettings
from strata.errors import StoreUnavailable
from strata_actors.errors import unwrap
from strata_actors.placement import owner_shard

__all__ = ["LimitsShard", "SharedLimits", "limits_actor_name"]

#: How long a grant may take before the replica limits on its own for a while: a dead node's
#: actor can take Ray tens of seconds to notice, and every request would wait for it.
_GRANT_TIMEOUT_S = 1.0
#: A claim waits up to ``serve.idempotency_wait_s`` in the actor; this much more for the call.
_CLAIM_MARGIN_S = 2.0
#: Until an actor has answered this replica once, it may be starting (a second or more on a
#: busy machine): its first call waits this long, not the timeouts above.
_START_TIMEOUT_S = 60.0


def limits_actor_name(shard: int) -> str:
    return f"strata-limits-{shard}"


class LimitsShard:
    """The rate limits and claims of one tenant range (an async actor: a claim waits on its loop).

    Args:
        settings: the stack's settings (``auth`` for the limits, ``serve`` for the claims).
        shard: which range this is.
    """

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        s = StrataSettings.from_dict(settings)
        self._shard = shard
        self._rates = RateLimiter(per_s=s.auth.rate_limit_per_s, burst=s.auth.rate_burst)
        self._claims = Claims(hold_s=s.serve.idempotency_claim_s, wait_s=s.serve.idempotency_wait_s)

    async def grant(self, key_id: str, want: int) -> int:
        """:meth:`RateLimiter.grant <strata.access.ratelimit.RateLimiter.grant>`."""
        return self._rates.grant(key_id, want)

    async def claim(self, tenant: str, key: str, fingerprint: str, holder: str) -> Claim:
        return await self._claims.claim(tenant, key, fingerprint=fingerprint, holder=holder)

    async def release(self, tenant: str, key: str, holder: str) -> None:
        await self._claims.release(tenant, key, holder=holder)

    async def ping(self) -> dict[str, int]:
        return {"shard": self._shard, "claims": self._claims.holding()}


class SharedLimits:
    """The API replicas' shared rate limits and claims: a
    :data:`~strata.access.ratelimit.Grant` and a :class:`~strata.access.idempotency.ClaimBook`.

    Example::

        limits = SharedLimits(settings)
        granted = await limits.grant("acme", key_id, 10)

    Raises (every method):
        strata.errors.RateLimited: from :meth:`grant`, the key's allowance is spent.
        strata.errors.StoreUnavailable: the tenant's actor does not answer (restarting).
    """

    def __init__(self, settings: StrataSettings) -> None:
        self._settings = settings
        self._settings_dict = settings.to_dict()
        self._shards = max(1, settings.auth.limit_shards)
        self._handles: dict[int, Any] = {}
        self._answered: set[int] = set()  # shards that have answered this replica
        self._wait_s = settings.serve.idempotency_wait_s

    def start(self) -> None:
        """Make every range's actor now (the replica calls it as it starts), not on a first
        request: each worker process Ray starts makes the session's directories 0777 again
        (``try_to_create_directory``), and ``strata up`` makes them owner-only once the stack
        is up, so the workers it starts must be started by then."""
        for shard in range(self._shards):
            self._shard_handle(shard)

    def handle(self, tenant: str) -> Any:
        """The raw actor handle of ``tenant``'s range, made if it does not exist (for operating it)."""
        return self._shard_handle(owner_shard(tenant, self._shards))

    def _shard_handle(self, shard: int) -> Any:
        found = self._handles.get(shard)
        if found is None:
            remote_cls: Any = ray.remote(LimitsShard)
            found = self._handles[shard] = remote_cls.options(
                name=limits_actor_name(shard),
                namespace=self._settings.ray.namespace,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=self._settings.actors.max_restarts,
                max_task_retries=0,  # a grant or a claim retried could count twice; the caller decides
                max_concurrency=1000,  # claims wait on the actor's loop
                num_cpus=0,
                memory=2**20,  # a token, as the layer shards ask (router.py says why)
                scheduling_strategy="SPREAD",
            ).remote(self._settings_dict, shard)
        return found

    async def grant(self, tenant: str, key_id: str, want: int) -> int:
        granted: int = await self._call(tenant, "grant", key_id, want, timeout_s=_GRANT_TIMEOUT_S)
        return granted

    async def claim(self, tenant: str, key: str, *, fingerprint: str, holder: str) -> Claim:
        found: Claim = await self._call(
            tenant, "claim", tenant, key, fingerprint, holder, timeout_s=self._wait_s + _CLAIM_MARGIN_S
        )
        return found

    async def release(self, tenant: str, key: str, *, holder: str) -> None:
        await self._call(tenant, "release", tenant, key, holder, timeout_s=_CLAIM_MARGIN_S)

    async def _call(self, tenant: str, method: str, *args: Any, timeout_s: float) -> Any:
        shard = owner_shard(tenant, self._shards)
        if shard not in self._answered:
            timeout_s = max(timeout_s, _START_TIMEOUT_S)
        try:
            found = await asyncio.wait_for(getattr(self.handle(tenant), method).remote(*args), timeout_s)
            self._answered.add(shard)
            return found
        except (RayActorError, GetTimeoutError, TimeoutError):
            raise StoreUnavailable(
                "the API's shared rate limits and Idempotency-Key claims do not answer (their actor "
                "is restarting); retry shortly",
                retry_after_s=2,
            ) from None
        except Exception as exc:
            raise unwrap(exc) from None
