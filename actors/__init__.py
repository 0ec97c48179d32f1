"""Ray actors that own the memory layers per tenant, installed as ``strata_actors``.

- ``shard``: ownership, versioning, eviction and expiry every layer actor shares
- ``working``, ``episodic``, ``semantic``, ``procedural``: one shard actor per layer
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
