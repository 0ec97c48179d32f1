"""Strata's MCP server: the memory tools for MCP clients, over stdio (``strata mcp``) and over
streamable HTTP at ``/mcp`` on the REST API's own port.

- :mod:`.tools`: the tools, each a thin wrapper over one call of the HTTP client
- :mod:`.stdio`: the stdio transport (one key, from the environment)
- :mod:`.http`: the ``/mcp`` endpoint mounted in the API's app (the caller's key, per request)
"""

from __future__ import annotations

from strata_mcp.http import McpHttp
from strata_mcp.stdio import serve_stdio, stdio_server
from strata_mcp.tools import INSTRUCTIONS, Connect, build_server

__all__ = ["INSTRUCTIONS", "Connect", "McpHttp", "build_server", "serve_stdio", "stdio_server"]
