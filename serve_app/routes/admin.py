"""Admin routes (an admin key only): API keys, forgetting a whole tenant, scaling a layer's
shards, and the LLM's counts for Prometheus (``/metrics``)."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

import asyncio

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import PlainTextResponse

from strata.access.keys import KEY_ID_PATTERN, KeyCreated, KeyCreateIn, KeyInfo, KeyList
from strata.errors import InvalidInput, StoreUnavailable
from strata.ids import ID_PATTERN, SYSTEM_TENANT
from strata.providers.llm_meter import MeterCounts, prometheus_text
from strata.schema import LayerPlacement, ScaleIn, TenantForgotten
from strata_actors.directory import check_scale
from strata_actors.meter import collector
from strata_serve.routes.common import Routes, id_path

__all__ = ["AdminRoutes", "router"]

router = APIRouter()

_TENANT_ID = id_path("Tenant id")
_KEY_ID = Path(pattern=KEY_ID_PATTERN.pattern.join("^$"), description="Key id (12 hex characters)")


class AdminRoutes(Routes):
    """API keys, forgetting a tenant, and scaling a layer."""

    @router.post("/v1/admin/keys", status_code=201, response_model=KeyCreated, tags=["admin"])
    async def admin_create_key(self, body: KeyCreateIn, authorization: str | None = Header(default=None)) -> KeyCreated:
        """A new key for a tenant (not ``system``), optionally read-only, limited to one session,
        or kept from documents and skills (``shared``: by default only a session key is). The
        secret is in this response only; Strata stores its hash."""
        await self._gate.admin(authorization)
        keys = await self._gate.key_store()
        return await asyncio.to_thread(
            keys.issue,
            body.tenant,
            read_only=body.read_only,
            session_id=body.session_id,
            shared=body.shared,
            name=body.name,
        )

    @router.get("/v1/admin/keys", response_model=KeyList, tags=["admin"])
    async def admin_list_keys(
        self,
        tenant: str | None = Query(
            default=None, pattern=ID_PATTERN.pattern.join("^$"), description="Only this tenant's keys"
        ),
        authorization: str | None = Header(default=None),
    ) -> KeyList:
        """Every key by id, with its tenant, scopes and dates, revoked ones too; never a secret."""
        await self._gate.admin(authorization)
        keys = await self._gate.key_store()
        return KeyList(keys=await asyncio.to_thread(keys.list, tenant))

    @router.post("/v1/admin/keys/{key_id}:rotate", status_code=201, response_model=KeyCreated, tags=["admin"])
    async def admin_rotate_key(
        self, key_id: str = _KEY_ID, authorization: str | None = Header(default=None)
    ) -> KeyCreated:
        """A new key with the same tenant, scopes and name; the old one stops working at once on
        this replica, within ``auth.key_cache_ttl_s`` (1 s) on the others."""
        await self._gate.admin(authorization)
        return await self._gate.rotate(key_id)

    @router.delete("/v1/admin/keys/{key_id}", response_model=KeyInfo, tags=["admin"])
    async def admin_revoke_key(
        self, key_id: str = _KEY_ID, authorization: str | None = Header(default=None)
    ) -> KeyInfo:
        """Revoke the key: its next request to this replica is a 401, on any replica within
        ``auth.key_cache_ttl_s`` (1 s)."""
        await self._gate.admin(authorization)
        return await self._gate.revoke(key_id)

    @router.delete("/v1/admin/tenants/{tenant}", response_model=TenantForgotten, tags=["admin"])
    async def admin_forget_tenant(
        self, tenant: str = _TENANT_ID, authorization: str | None = Header(default=None)
    ) -> TenantForgotten:
        """Forget a whole tenant: every row, vector, index entry, summary, skill and pending
        job in every layer, and revoke its keys. The audit trail (no content) stays."""
        await self._gate.admin(authorization)
        if tenant == SYSTEM_TENANT:  # before any key is revoked: those are the admin keys
            raise InvalidInput("the system tenant cannot be forgotten", field="tenant")
        keys = await self._gate.key_store()
        # Keys first: nothing may write to the tenant while it is being forgotten.
        revoked = [k.key_id for k in await asyncio.to_thread(keys.list, tenant) if k.revoked_at is None]
        for key_id in revoked:
            await self._gate.revoke(key_id)
        removed: dict[str, int] = await self._flow.forget_tenant(tenant, by="admin")
        return TenantForgotten(tenant=tenant, removed=removed, keys_revoked=revoked)

    @router.post("/v1/admin/layers/{layer}:scale", response_model=LayerPlacement, tags=["admin"])
    async def admin_scale_layer(
        self, body: ScaleIn, layer: str = Path(description="working, episodic, semantic or procedural"),
        authorization: str | None = Header(default=None),
    ) -> LayerPlacement:
        """Grow or shrink a layer's shards. The tenants whose owner changes move: their old shard
        finishes the writes in flight, drops them and refuses more; the new one loads them from
        the store on first use (their callers wait meanwhile). Answers once the new count is
        published (docs/scaling.md)."""
        await self._gate.admin(authorization)
        check_scale(layer, body.shards)  # 422 naming the field, before anything moves
        placement = await self._flow.router.directory.scale(layer, body.shards)
        return LayerPlacement(layer=placement.layer, shards=placement.shards, epoch=placement.epoch)

    @router.get(
        "/metrics",
        response_class=PlainTextResponse,
        tags=["admin"],
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format 0.0.4"}},
    )
    async def admin_metrics(self, authorization: str | None = Header(default=None)) -> PlainTextResponse:
        """The LLM's counts per feature (``refine``, ``summary``, ``skills``, ``entities``), summed
        over every process of the stack since the counts' collector started: requests by outcome,
        tokens in and out, request latency (a histogram), and each use's result — ``accepted``, or
        the fallback taken and why (``invalid``, ``timeout``, ``error``, ``busy``, ``breaker``,
        ``no_time``). For Prometheus, with the admin key as its bearer token."""
        await self._gate.admin(authorization)
        try:
            counts = await asyncio.wait_for(collector(self._settings).snapshot.remote(), timeout=5.0)
        except Exception as exc:
            raise StoreUnavailable(f"the metrics collector did not answer ({type(exc).__name__}): retry") from None
        return PlainTextResponse(prometheus_text(MeterCounts(counts)), media_type="text/plain; version=0.0.4")
