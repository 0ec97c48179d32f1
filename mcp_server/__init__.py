"""``strata mcp``: Strata's memory tools for MCP clients over stdio, a client of the REST API.

- :mod:`.stdio`: the stdio transport (one key, from the environment)

The tools themselves (:mod:`strata_serve.mcp_tools`) and the ``/mcp`` endpoint that serves
them over streamable HTTP on the API's own port (:mod:`strata_serve.mcp_http`) are part of
what Serve runs; this package only calls them, as it calls the API.
"""

from __future__ import annotations

from strata_mcp.stdio import serve_stdio, stdio_server

__all__ = ["serve_stdio", "stdio_server"]
