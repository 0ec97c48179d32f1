"""Usage: what a tenant holds now and the calls it made in a window (its own key), or every
tenant's calls (the admin key). Counted as :mod:`strata_serve.usage` says."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from datetime import UTC, datetime

from fastapi import APIRouter, Header, Query

from strata.access.usage import Window
from strata.ids import ID_PATTERN
from strata.schema import UsageHour, UsageOut, UsageReport
from strata_serve.routes.common import Routes
from strata_serve.usage import UsageBook

__all__ = ["UsageRoutes", "router"]

router = APIRouter()

_SINCE = Query(default=None, description="The window's start (ISO 8601; UTC unless it says); by default 24 hours "
               "before until. Rounded down to its hour")
_UNTIL = Query(default=None, description="The window's end; by default now. Rounded up to an hour; at most 31 days "
               "after since")


def _at(hour: int) -> datetime:
    return datetime.fromtimestamp(hour, tz=UTC)


def _usage(tenant: str, window: Window, hours: dict[int, dict[str, int]],
           items: dict[str, dict[str, int]] | None) -> UsageOut:
    calls: dict[str, int] = {}
    for counted in hours.values():
        for route, n in counted.items():
            calls[route] = calls.get(route, 0) + n
    return UsageOut(
        tenant=tenant, since=_at(window.since), until=_at(window.until), items=items, calls=dict(sorted(calls.items())),
        hours=[UsageHour(hour=_at(h), calls=dict(sorted(c.items()))) for h, c in sorted(hours.items())],
    )


class UsageRoutes(Routes):
    """Usage of the caller's tenant, and of every tenant for the admin."""

    _usage_book: UsageBook

    @router.get("/v1/usage", response_model=UsageOut, tags=["usage"])
    async def usage(
        self, since: datetime | None = _SINCE, until: datetime | None = _UNTIL,
        authorization: str | None = Header(default=None),
    ) -> UsageOut:
        """What your tenant holds now (items per layer) and the calls it made in the window (per
        route, and per hour). Calls are written every few seconds by each API replica: the last
        seconds' calls of another replica may not show yet. Any tenant-wide key, read-only too;
        not a session key (it would see every session's counts); items of the layers the key sees."""
        info = await self._gate.caller(authorization, "usage")  # a session key is refused (ROUTES says why)
        window = Window.resolve(since, until, now=datetime.now(UTC))
        calls = await self._usage_book.calls(window, info.tenant)
        held = await self._usage_book.items(info.tenant)
        items: dict[str, dict[str, int]] = {layer: n for layer, n in held.items() if layer in info.layers}
        return _usage(info.tenant, window, calls.get(info.tenant, {}), items)

    @router.get("/v1/admin/usage", response_model=UsageReport, tags=["admin"])
    async def admin_usage(
        self, since: datetime | None = _SINCE, until: datetime | None = _UNTIL,
        tenant: str | None = Query(default=None, pattern=ID_PATTERN.pattern.join("^$"),
                                   description="One tenant, with the items it holds; by default every tenant "
                                   "that made calls in the window, without items"),
        authorization: str | None = Header(default=None),
    ) -> UsageReport:
        """Every tenant's calls in the window, per route and hour; with ``tenant``, that one's,
        and the items it holds now. An admin key only."""
        await self._gate.admin(authorization)
        window = Window.resolve(since, until, now=datetime.now(UTC))
        calls = await self._usage_book.calls(window, tenant)
        if tenant is not None:
            tenants = [_usage(tenant, window, calls.get(tenant, {}), await self._usage_book.items(tenant))]
        else:
            tenants = [_usage(t, window, hours, None) for t, hours in sorted(calls.items())]
        return UsageReport(since=_at(window.since), until=_at(window.until), tenants=tenants)
