"""The working layer's shard actor: per-session context windows, versioned per session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from strata.access.idempotency import IDEM_KIND, IDEM_SESSION
from strata.clock import from_ms_or_none
from strata.providers.tokens import TiktokenCounter
from strata.store.layout import Collections
from strata.store.records import RecordStore
from strata.working.memory import WorkingItem
from strata.working.sessions import KIND as WORKING_KIND
from strata.working.sessions import TURN_ID, WorkingSessions
from strata_actors.shard import LayerShard

__all__ = ["WorkingShard"]


def _item(item: WorkingItem, expires: int | None) -> dict[str, Any]:
    return {
        "id": item.id,
        "role": item.role,
        "content": item.content,
        "importance": item.importance,
        "tokens": item.tokens,
        "summarized": item.summarized,
        "created_at": item.created_at,
        "reasons": list(item.reasons),
        "expires_at": from_ms_or_none(expires),
        "turn_id": item.metadata.get(TURN_ID),
    }


class WorkingShard(LayerShard[WorkingSessions]):
    layer_name = "working"
    batched_reads = frozenset({"messages"})
    # The answers kept for idempotent writes live beside working items and expire the same way.
    expiring_kinds = (WORKING_KIND, IDEM_KIND)

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        super().__init__(settings, shard)
        self._counter = TiktokenCounter(self.settings.working.encoding)

    def make_layer(self, tenant: str, store: RecordStore, collections: Collections) -> WorkingSessions:
        return WorkingSessions(
            tenant, store=store, collection=collections.state, settings=self.settings.working,
            counter=self._counter, ttl=self.settings.ttl,
        )

    def tenant_rows(self, collections: Collections) -> tuple[str, list[str] | None]:
        return collections.state, [WORKING_KIND, IDEM_KIND]

    # -- expiry: items, by session (the version scope) ------------------------------

    def due(self, layer: WorkingSessions) -> int | None:
        return layer.expiries.due()

    def expiring(self, layer: WorkingSessions, at_ms: int) -> dict[str, Any]:
        return layer.expired(at_ms)

    def delete_expired(self, layer: WorkingSessions, scope: str, expired: Any) -> int:
        return layer.delete_items(scope, expired)

    def drop_expired(self, layer: WorkingSessions, scope: str, expired: Any) -> None:
        layer.drop_items(scope, expired)

    def load_for_expiry(self, layer: WorkingSessions, sessions: set[str]) -> None:
        for session_id in sessions - {IDEM_SESSION}:
            layer.session(session_id)

    async def _load_session(self, tenant: str, sessions: WorkingSessions, session_id: str) -> None:
        """Load a session (off the event loop) and purge what has expired in it (under the lock)."""
        if not sessions.loaded(session_id):
            await asyncio.to_thread(sessions.session, session_id)
        await self._tenant(tenant)

    def _view(self, sessions: WorkingSessions, session_id: str, budget_tokens: int | None) -> dict[str, Any]:
        memory = sessions.session(session_id)
        return {
            "session_id": session_id,
            "items": [_item(i, sessions.expiries.get((session_id, i.id))) for i in memory.items],
            "messages": memory.messages(budget_tokens=budget_tokens, now=datetime.now(UTC)),
            "total_tokens": memory.total_tokens,
            "max_tokens": self.settings.working.max_tokens,
        }

    async def get(self, tenant: str, session_id: str, *, budget_tokens: int | None = None) -> dict[str, Any]:
        """The session's items and its messages (fitted to ``budget_tokens`` if given)."""
        return await self._read_session(
            tenant, session_id, lambda sessions: self._view(sessions, session_id, budget_tokens)
        )

    async def messages(self, tenant: str, session_id: str, *, budget_tokens: int | None = None) -> dict[str, Any]:
        """The session's messages fitted to ``budget_tokens``, and its version: what a context
        reads of it (no items: building and sending them cost more than the messages)."""
        return await self._read_session(
            tenant,
            session_id,
            lambda sessions: {
                "messages": sessions.session(session_id).messages(budget_tokens=budget_tokens, now=datetime.now(UTC))
            },
        )

    async def _read_session(
        self, tenant: str, session_id: str, read: Callable[[WorkingSessions], dict[str, Any]]
    ) -> dict[str, Any]:
        """``read`` of the session under the tenant's lock, with the session's version."""

        async def view(sessions: WorkingSessions) -> dict[str, Any]:
            if not sessions.loaded(session_id):
                # The first read of a session loads it from the store, off the event loop, and its
                # durable version beside it: two strong reads at once on a Milvus server, not in
                # turn. Both are plain store reads: anything that may take the tenant's lock (the
                # purge in _load_session) stays in this task, which holds it.
                slot = self._tenants[tenant]  # run_locked's slot: it holds the lock
                await asyncio.gather(
                    asyncio.to_thread(sessions.session, session_id), self._version(tenant, slot, session_id)
                )
            await self._load_session(tenant, sessions, session_id)  # loaded now: purges what has expired
            # Read under the same lock as the view, so the two belong together (the version
            # is the one now in memory: a purge of expired items may have moved it).
            return {**read(sessions), "version": await self.version(tenant, session_id)}

        return await self.run_locked(tenant, view)

    async def add_items(
        self,
        tenant: str,
        session_id: str,
        items: list[dict[str, Any]],
        *,
        task: str | None = None,
        expected_version: int | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Add items; returns the session's state as of this write, with its version."""
        now = now or datetime.now(UTC)

        async def load(sessions: WorkingSessions) -> list[dict[str, Any]]:
            # Expired items must not count against the budget, nor show in the state returned.
            await self._load_session(tenant, sessions, session_id)
            return sessions.unrecorded(session_id, items)

        fresh = await self.run_locked(tenant, load)
        if items and not fresh:
            # A retried turn whose items are all there already: nothing to write.
            return {**await self.get(tenant, session_id), "compression": None}

        def write(sessions: WorkingSessions) -> tuple[Any, dict[str, Any]]:
            _, report = sessions.add(session_id, sessions.unrecorded(session_id, items), now=now, task=task)
            return report, self._view(sessions, session_id, None)

        (report, state), version = await self.mutate(tenant, session_id, expected_version, write)
        compression = None
        if report is not None:
            compression = {"summarized": list(report.summarized_ids), "dropped": list(report.dropped_ids)}
        return {**state, "version": version, "compression": compression}

    async def forget_session(
        self, tenant: str, session_id: str, *, expected_version: int | None = None
    ) -> dict[str, Any]:
        removed, version = await self.mutate(tenant, session_id, expected_version, lambda s: s.forget(session_id))
        return {"removed": removed, "version": version}

    async def forget_turn(self, tenant: str, session_id: str, turn_id: str) -> dict[str, Any]:
        """Forget the items that copy one turn of the session."""
        removed, version = await self.mutate(tenant, session_id, None, lambda s: s.forget_turn(session_id, turn_id))
        return {"removed": removed, "version": version}
