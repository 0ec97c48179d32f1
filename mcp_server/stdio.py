"""``strata mcp``: the memory tools over stdio, for desktop and coding agents that start the
server themselves: one client and one key (``STRATA_API_KEY``) for the life of the process.
stdout carries the protocol only; logs go to stderr."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.mcpserver import Context, MCPServer

from strata_serve.client import AsyncStrataClient
from strata_serve.mcp_tools import Connect, build_server

__all__ = ["serve_stdio", "stdio_server"]


def stdio_server(url: str, api_key: str, *, timeout_s: float = 60.0) -> MCPServer:
    """The MCP server whose tools call the Strata API at ``url`` with ``api_key``."""

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[Connect]:
        async with AsyncStrataClient(url, api_key, timeout_s=timeout_s) as client:

            @asynccontextmanager
            async def connect(_: Context) -> AsyncIterator[AsyncStrataClient]:
                yield client

            yield connect

    return build_server(lifespan)


def serve_stdio(url: str, api_key: str) -> None:
    """Serve MCP over this process's stdin and stdout until the client closes them. While it
    serves, the SDK points file descriptor 1 at stderr: a stray print cannot corrupt the protocol."""
    anyio.run(stdio_server(url, api_key).run_stdio_async)
