"""Clients and adapters close what they open (issue 45: the LlamaIndex and Agents SDK examples
ended with "Unclosed client session", and ``StrataSession`` had no ``close()``), against a
server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from strata_adapters._common import Closes, StrataConnection
from strata_adapters.langchain import StrataChatMessageHistory
from strata_adapters.langgraph import StrataStore
from strata_adapters.llamaindex import StrataMemoryBlock
from strata_adapters.openai_agents import StrataSession
from strata_serve.client import AsyncStrataClient
from tests.strata_server import strata_server


@pytest.fixture()
def url() -> Iterator[str]:
    with strata_server(lambda n: None) as (base, _):
        yield base


def _session(client: AsyncStrataClient) -> aiohttp.ClientSession:
    session = client._http._session  # type: ignore[attr-defined]
    assert isinstance(session, aiohttp.ClientSession)
    return session


def test_a_client_nobody_closed_is_closed_when_asyncio_run_ends_its_loop(url: str) -> None:
    """What a framework's sync path does: ``asyncio.run`` around one call, no caller to close."""
    client = AsyncStrataClient(url, "sk-x")

    async def once() -> aiohttp.ClientSession:
        await client.list_sessions()
        return _session(client)

    first = asyncio.run(once())
    second = asyncio.run(once())  # another loop: a session of its own
    assert first is not second and first.closed and second.closed


def test_closing_a_connection_closes_the_async_client_of_a_loop_that_is_not_running(url: str) -> None:
    """LlamaIndex's ``Memory.get`` / ``put`` run the block in a loop that stays open, not running."""
    connection = StrataConnection(url, "sk-x")
    loop = asyncio.new_event_loop()

    async def use() -> aiohttp.ClientSession:
        await connection.async_client.list_sessions()
        return _session(connection.async_client)

    try:
        session = loop.run_until_complete(use())
        connection.close()
        assert session.closed
    finally:
        loop.close()


async def test_the_agents_sdk_session_closes_its_connection(url: str) -> None:
    async with StrataSession("s1", StrataConnection(url, "sk-x")) as session:
        assert await session.get_items() == []
        opened = _session(session.connection.async_client)
    assert opened.closed
    await session.close()  # twice is no error


ADAPTERS: dict[str, Callable[[StrataConnection], Closes]] = {
    "langgraph": StrataStore,
    "langchain": lambda connection: StrataChatMessageHistory("s1", connection),
    "llamaindex": lambda connection: StrataMemoryBlock(connection=connection),
}


@pytest.mark.parametrize("make", ADAPTERS.values(), ids=ADAPTERS.keys())
async def test_every_adapter_closes_its_connection_with_and_async_with(
    url: str, make: Callable[[StrataConnection], Any]
) -> None:
    connection = StrataConnection(url, "sk-x")
    async with make(connection):
        await connection.async_client.list_sessions()
        opened = _session(connection.async_client)
    assert opened.closed
    with make(connection):
        connection.client.list_sessions()
        blocking = connection.client
    assert blocking._http.is_closed
