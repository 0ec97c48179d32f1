"""Usage: what a tenant holds now and the calls and tokens it used in a window (its own key),
or every tenant's (the admin key). Counted as :mod:`strata_serve.usage` says."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from datetime import UTC, datetime

from fastapi import APIRouter, Header, Query

from strata.access.usage import Window
from strata.ids import ID_PATTERN
from strata.schema import UsageHour, UsageOut, UsageReport, UsageTokens
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


def _summed(hours: dict[int, dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counted in hours.values():
        for name, n in counted.items():
            total[name] = total.get(name, 0) + n
    return total


def _usage(tenant: str, window: Window, calls: dict[int, dict[str, int]], tokens: dict[int, dict[str, int]],
           items: dict[str, dict[str, int]] | None) -> UsageOut:
    hours = [
        UsageHour(hour=_at(h), calls=dict(sorted(calls.get(h, {}).items())), tokens=UsageTokens(**tokens.get(h, {})))
        for h in sorted(set(calls) | set(tokens))
        if calls.get(h) or tokens.get(h)
    ]
    return UsageOut(
        tenant=tenant, since=_at(window.since), until=_at(window.until), items=items,
        calls=dict(sorted(_summed(calls).items())), tokens=UsageTokens(**_summed(tokens)), hours=hours,
    )


class UsageRoutes(Routes):
    """Usage of the caller's tenant, and of every tenant for the admin."""

    _usage_book: UsageBook

    @router.get("/v1/usage", response_model=UsageOut, tags=["usage"])
    async def usage(
        self, since: datetime | None = _SINCE, until: datetime | None = _UNTIL,
        authorization: str | None = Header(default=None),
    ) -> UsageOut:
        """What your tenant holds now (items per layer), the calls it made in the window (per
        route) and the tokens its work used (embedding, LLM in and out), in all and per hour.
        Counts are written every few seconds by each process that counts: the last seconds'
        counts of another process may not show yet. Any tenant-wide key, read-only too;
        not a session key (it would see every session's counts); items of the layers the key sees."""
        info = await self._gate.caller(authorization, "usage")  # a session key is refused (ROUTES says why)
        window = Window.resolve(since, until, now=datetime.now(UTC))
        calls, tokens = await self._usage_book.counts(window, info.tenant)
        held = await self._usage_book.items(info.tenant)
        items: dict[str, dict[str, int]] = {layer: n for layer, n in held.items() if layer in info.layers}
        return _usage(info.tenant, window, calls.get(info.tenant, {}), tokens.get(info.tenant, {}), items)

    @router.get("/v1/admin/usage", response_model=UsageReport, tags=["admin"])
    async def admin_usage(
        self, since: datetime | None = _SINCE, until: datetime | None = _UNTIL,
        tenant: str | None = Query(default=None, pattern=ID_PATTERN.pattern.join("^$"),
                                   description="One tenant, with the items it holds; by default every tenant "
                                   "that made calls or used tokens in the window, without items"),
        authorization: str | None = Header(default=None),
    ) -> UsageReport:
        """Every tenant's calls (per route) and tokens in the window, in all and per hour; with
        ``tenant``, that one's, and the items it holds now. An admin key only."""
        await self._gate.admin(authorization)
        window = Window.resolve(since, until, now=datetime.now(UTC))
        calls, tokens = await self._usage_book.counts(window, tenant)
        if tenant is not None:
            tenants = [
                _usage(tenant, window, calls.get(tenant, {}), tokens.get(tenant, {}),
                       await self._usage_book.items(tenant))
            ]
        else:
            tenants = [
                _usage(t, window, calls.get(t, {}), tokens.get(t, {}), None) for t in sorted(set(calls) | set(tokens))
            ]
        return UsageReport(since=_at(window.since), until=_at(window.until), tenants=tenants)
