"""What Ray Serve runs, installed as ``strata_serve``, and the HTTP clients that call it.

- ``app``: the application graph, ``strata_serve.app:build_app`` (``configs/serve.yaml``)
- ``api``: the HTTP ingress (FastAPI under Serve): the app, its middleware, the deployment
- ``routes``: the ingress's routes, one module per group (turns, context, documents, skills …)
- ``auth``: the bearer key of a request, its tenant, scope and rate limit
- ``deployments``: the embedding deployment behind the ingress
- ``errors``: Strata errors to HTTP responses
- ``guards``: the body limit (413), deadline (504) and unexpected-error (500) middleware
- ``idempotent``: the ``Idempotency-Key`` middleware
- ``mcp_tools``, ``mcp_http``: the MCP tools, and the ``/mcp`` endpoint that serves them
- ``client``: :class:`~strata_serve.client.StrataClient` and its async twin

Import from the modules; the package itself exports nothing.
"""

__all__: list[str] = []
