"""What Ray Serve runs, installed as ``strata_serve``, and the HTTP clients that call it.

- ``app``: the application graph, ``strata_serve.app:build_app`` (``configs/serve.yaml``)
- ``api``: the HTTP ingress (FastAPI under Serve), one method per route
- ``auth``: the bearer key of a request, its tenant, scope and rate limit
- ``deployments``: the embedding and orchestrator deployments behind the ingress
- ``errors``: Strata errors to HTTP responses; the body limit (413) and deadline (504) middleware
- ``idempotent``: the ``Idempotency-Key`` middleware
- ``client``: :class:`~strata_serve.client.StrataClient` and its async twin

Import from the modules; the package itself exports nothing.
"""

__all__: list[str] = []
