"""Strata's MCP server: the memory tools for MCP clients, over stdio (``strata mcp``) and over
streamable HTTP at ``/mcp`` on the REST API's own port."""

__all__: list[str] = []
