"""What every adapter needs: where Strata is and with which key (:class:`StrataConnection`),
and one way to write logic once for a framework's sync and async interfaces (:func:`run_sync`,
:func:`run_async`).

An async client belongs to the event loop it first ran in, and frameworks run their async
paths in whatever loop the caller has (``asyncio.run`` twice is two loops), so a connection
keeps one async client per loop, made on first use in that loop. Each adapter closes its
connection (:class:`Closes`: ``close()``, ``aclose()``, ``with`` and ``async with``).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from strata.errors import StrataError
from strata_serve.client import AsyncStrataClient, StrataClient
from strata_serve.retry import Retry

__all__ = ["DEFAULT_URL", "Closes", "Flow", "Request", "StrataConnection", "call", "run_async", "run_sync"]

#: Where ``strata up`` serves by default.
DEFAULT_URL = "http://127.0.0.1:8000"


class _ClosedByWith:
    """``with`` and ``async with`` for a class with ``close()`` and ``aclose()``."""

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class StrataConnection(_ClosedByWith):
    """A Strata API endpoint and key: a blocking client, and an async client per event loop.

    Args:
        url: the API's base URL, e.g. ``http://127.0.0.1:8000``.
        api_key: a Strata key (``sk-strata-...``); its tenant is the one the adapter reads and writes.
        timeout_s: per request.
        retry: when a call that met a 429 or a 503 is tried again (:class:`~strata_serve.retry.Retry`).
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout_s: float = 30.0,
        retry: Retry = Retry(),  # noqa: B008 (frozen: one shared default is safe)
    ) -> None:
        if not api_key:
            raise ValueError("api_key is empty: pass a Strata key (sk-strata-...) or set STRATA_API_KEY")
        self.url, self._api_key, self._timeout_s, self._retry = url, api_key, timeout_s, retry
        self._client: StrataClient | None = None
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncStrataClient] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def from_env(
        cls,
        *,
        timeout_s: float = 30.0,
        retry: Retry = Retry(),  # noqa: B008 (frozen: one shared default is safe)
    ) -> StrataConnection:
        """``STRATA_URL`` (default :data:`DEFAULT_URL`) and ``STRATA_API_KEY`` (required).

        Raises:
            ValueError: ``STRATA_API_KEY`` is not set.
        """
        key = os.environ.get("STRATA_API_KEY", "")
        if not key:
            raise ValueError("STRATA_API_KEY is not set: export a Strata key (`strata keys create <tenant>` makes one)")
        return cls(os.environ.get("STRATA_URL") or DEFAULT_URL, key, timeout_s=timeout_s, retry=retry)

    @property
    def client(self) -> StrataClient:
        """The blocking client (made on first use)."""
        if self._client is None:
            self._client = StrataClient(self.url, self._api_key, timeout_s=self._timeout_s, retry=self._retry)
        return self._client

    @property
    def async_client(self) -> AsyncStrataClient:
        """The async client of the running event loop (made on first use in it)."""
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            client = self._async[loop] = AsyncStrataClient(
                self.url, self._api_key, timeout_s=self._timeout_s, retry=self._retry
            )
        return client

    def close(self) -> None:
        """Close the blocking client, and the async clients of event loops not running now;
        one of a running loop is closed in it, soon after (:meth:`aclose` awaits it). A closed
        connection opens new clients if it is used again."""
        if self._client is not None:
            self._client.close()
            self._client = None
        for loop, client in list(self._async.items()):
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)
            elif not loop.is_closed():  # a closed loop closed its clients' sessions as it shut down
                loop.run_until_complete(client.aclose())
        self._async.clear()

    async def aclose(self) -> None:
        """Close the running loop's async client, awaited, and the others as :meth:`close` does."""
        client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        self.close()


class Closes(_ClosedByWith):
    """``close()``, ``aclose()``, ``with`` and ``async with`` for an adapter: each closes the
    adapter's :class:`StrataConnection` (which opens clients again if the adapter is used after)."""

    if TYPE_CHECKING:  # the adapter's; not a class attribute (pydantic would take it for a field)
        connection: StrataConnection

    def close(self) -> None:
        self.connection.close()

    async def aclose(self) -> None:
        await self.connection.aclose()


# -- one implementation, two drivers ---------------------------------------------------
#
# An adapter's logic is written once, as a generator (a "flow") that yields the client calls it
# needs, ``doc = yield call("get_document", doc_id)``, and gets each reply back (or the Strata error
# thrown in at the yield, so ``except NotFound`` reads as usual). :func:`run_sync` answers a flow
# with the blocking client, :func:`run_async` with the async one: the two clients have the same
# method names, so the framework's sync and async interfaces share every line of logic.

Request = tuple[str, tuple[Any, ...], dict[str, Any]]
T = TypeVar("T")
Flow = Generator[Request, Any, T]


def call(method: str, *args: Any, **kwargs: Any) -> Request:
    """A request for a flow to yield: the client method's name and its arguments."""
    return method, args, kwargs


def run_sync(client: StrataClient, flow: Flow[T]) -> T:
    """Run ``flow`` to its end, each request answered by the blocking ``client``."""
    try:
        request = next(flow)
        while True:
            method, args, kwargs = request
            try:
                reply = getattr(client, method)(*args, **kwargs)
            except StrataError as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(reply)
    except StopIteration as done:
        return cast(T, done.value)
    finally:
        flow.close()


async def run_async(client: AsyncStrataClient, flow: Flow[T]) -> T:
    """Run ``flow`` to its end, each request awaited on the async ``client``."""
    try:
        request = next(flow)
        while True:
            method, args, kwargs = request
            try:
                reply = await getattr(client, method)(*args, **kwargs)
            except StrataError as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(reply)
    except StopIteration as done:
        return cast(T, done.value)
    finally:
        flow.close()
