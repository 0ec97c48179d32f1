"""Counting each tenant's calls in the Api replica, writing the replica's counts, and reading usage back.

:class:`CountCalls`, a middleware inside :class:`~strata_serve.auth.Authenticate`, counts a
call once the route answered: the key's tenant and the route's name (a tenant route of
:data:`~strata_serve.auth.ROUTES`; admin, open and unknown paths are not counted). The count
is a dict increment in the replica's :class:`~strata.counting.UsageCounter` (the process's
:data:`~strata.counting.COUNTER`, which also holds the tokens the replica embedded and sent to
the LLM for each tenant); :class:`UsageBook` writes the counts to the store every
``serve.usage_flush_s`` and when the replica stops, never on the request's path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress

from starlette.types import ASGIApp, Receive, Scope, Send

from strata.access.usage import USAGE_KIND, UsageCounter, Window, counts_from_rows, held_items
from strata.config import StrataSettings
from strata.errors import StrataError
from strata.ids import SYSTEM_TENANT
from strata.store.layout import Collections, open_store
from strata.store.records import RecordStore
from strata_serve.auth import ROUTES, current_key

__all__ = ["CountCalls", "UsageBook"]

_log = logging.getLogger(__name__)


class UsageBook:
    """One Api replica's usage: its call counter, the task that writes it, the usage reads.

    Args:
        settings: ``serve.usage_flush_s``, and the store to open on first use.
        backend: the store and its collections (tests pass an in-memory one).
        counter: by default a new one, with a replica id of its own (the Api replica passes
            its process's, :func:`~strata.counting.process_counter`).
    """

    def __init__(
        self, settings: StrataSettings, *, backend: tuple[RecordStore, Collections] | None = None,
        counter: UsageCounter | None = None,
    ) -> None:
        self._settings = settings
        self._backend = backend
        self.counter = counter if counter is not None else UsageCounter()
        self._flush_s = settings.serve.usage_flush_s
        self._task: asyncio.Future[None] | None = None
        self._flushing = asyncio.Lock()

    def count(self, tenant: str, route: str) -> None:
        """One call; the first starts the task that writes the counts (in the serving loop)."""
        self.counter.count(tenant, route)
        self.start()

    def start(self) -> None:
        """Start the task that writes the counts, if not yet (in the serving loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def backend(self) -> tuple[RecordStore, Collections]:
        if self._backend is None:
            self._backend = await asyncio.to_thread(open_store, self._settings)
        return self._backend

    async def flush(self) -> int:
        """Write what was counted since the last flush; a failure keeps it for the next.

        Raises:
            strata.errors.StoreUnavailable: the store did not take the rows.
        """
        async with self._flushing:  # two flushes at once would write the same rows twice
            rows = self.counter.pending()
            if not rows:
                return 0
            store, names = await self.backend()
            await asyncio.to_thread(store.upsert, names.state, rows)
            self.counter.written(rows)  # on the loop, where counts are made
            return len(rows)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._flush_s)
            try:
                await self.flush()
            except StrataError as exc:
                _log.warning("usage counts not written, kept for the next flush: %s", exc.message)

    async def aclose(self) -> None:
        """Stop the task and write what is left (when the replica stops)."""
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        with suppress(StrataError):
            await self.flush()

    async def counts(
        self, window: Window, tenant: str | None
    ) -> tuple[dict[str, dict[int, dict[str, int]]], dict[str, dict[int, dict[str, int]]]]:
        """Calls (per route) and tokens (per kind) per tenant (``tenant``'s only, or every
        one's) and hour in ``window``: this replica's counts written first, the other
        processes' as of their last flush."""
        with suppress(StrataError):  # the read still answers, with this replica's last flush
            await self.flush()
        store, names = await self.backend()
        rows = await asyncio.to_thread(
            store.scan, names.state, tenant=SYSTEM_TENANT, session=tenant, kinds=[USAGE_KIND], with_vectors=False
        )
        return counts_from_rows(rows, window, group="calls"), counts_from_rows(rows, window, group="tokens")

    async def items(self, tenant: str) -> dict[str, dict[str, int]]:
        """What ``tenant`` holds now, per layer (:func:`~strata.access.usage.held_items`)."""
        store, names = await self.backend()
        return await asyncio.to_thread(held_items, store, names, tenant)


class CountCalls:
    """Count each call of a tenant route by its key's tenant (pure ASGI, inside Authenticate).

    Args:
        app: the ASGI app whose calls are counted.
        book: the :class:`UsageBook` of the replica serving the request (read per request).
    """

    def __init__(self, app: ASGIApp, *, book: Callable[[], UsageBook]) -> None:
        self.app = app
        self.book = book

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            # The router put the route it chose in the scope (FastAPI's "route"); an Idempotency-Key
            # replay is answered before the router and is not counted again.
            name = getattr(scope.get("route"), "name", None)
            key = current_key()
            if key is not None and not key.admin and name in ROUTES:
                self.book().count(key.tenant, str(name))
