"""Ray actors that own the memory layers per tenant, installed as ``strata_actors``.

- ``placement``: which shard of a layer owns a tenant, and the fence of a move
- ``directory``: each layer's shard count and epoch, and the one place they change (scaling)
- ``residency``: which tenants a shard holds in memory: loading, locks, eviction
- ``expiry``: purging what has expired before a call is answered, and the TTL sweep
- ``shard``: the calls every layer actor answers: versioned reads and mutations, forgets
- ``working``, ``episodic``, ``semantic``, ``procedural``: one shard actor per layer
  (``skill_jobs``: the procedural shard's skill-extraction jobs)
- ``router``: which actor owns which tenant; the one place ``ray.remote`` is applied
- ``handles``: one typed handle per layer, the only code that calls ``.remote()`` on the actors
- ``orchestration``: one request's work across the layers (the Serve orchestrator's and
  the in-cluster client's)
- ``client``: the in-cluster client, bound to one tenant
- ``limits``: the API replicas' shared rate limits and Idempotency-Key claims, one actor per
  tenant range, and their typed handle
- ``errors``: Ray's failures mapped to Strata's errors; ``ray_auth``: joining the stack's cluster

Import from the modules; the package itself exports nothing (importing it starts no Ray).
"""

__all__: list[str] = []
