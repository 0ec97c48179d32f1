"""Working memory of all sessions of one tenant, persisted item by item.

:class:`~strata.working.memory.WorkingMemory` is the logic of one session; this
module keeps one per session, loads it from the record store on first use,
and after every change writes exactly the items that changed and deletes
the ones that compression dropped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from strata.clock import to_ms
from strata.config import TTLSettings, WorkingSettings
from strata.errors import InvalidInput, NotFound
from strata.ids import validate_id
from strata.providers.tokens import TokenCounter
from strata.store.records import Record, RecordStore
from strata.store.ttl import EXPIRES, Expiries, expires_ms
from strata.working.memory import CompressionReport, WorkingItem, WorkingMemory

__all__ = ["KIND", "TURN_ID", "WorkingSessions"]

KIND = "working"
#: The metadata key of an item that copies a recorded turn: the turn's id.
TURN_ID = "turn_id"


class WorkingSessions:
    def __init__(
        self,
        tenant: str,
        *,
        store: RecordStore,
        collection: str,
        settings: WorkingSettings,
        counter: TokenCounter,
        ttl: TTLSettings | None = None,
    ) -> None:
        self.tenant = validate_id(tenant, field="tenant")
        self._ttl = ttl or TTLSettings()
        #: Deadlines of the loaded sessions' items, keyed (session, item id).
        self.expiries: Expiries[tuple[str, str]] = Expiries()
        self._store = store
        self._collection = collection
        self._settings = settings
        self._counter = counter
        self._sessions: dict[str, WorkingMemory] = {}
        # Per session: each item's insertion number, never renumbered, so a
        # reload keeps the order of items with equal timestamps.
        self._seqs: dict[str, dict[str, int]] = {}

    def _new(self) -> WorkingMemory:
        s = self._settings
        return WorkingMemory(
            counter=self._counter,
            max_tokens=s.max_tokens,
            keep_ratio=s.keep_ratio,
            summarize_above=s.summarize_above,
            summary_tokens=s.summary_tokens,
            system_prompt=s.system_prompt,
        )

    def loaded(self, session_id: str) -> bool:
        """Whether the session is in memory: :meth:`session` answers it without a store read."""
        return session_id in self._sessions

    def session(self, session_id: str) -> WorkingMemory:
        """The session's working memory, loaded from the store on first use."""
        validate_id(session_id, field="session_id")
        memory = self._sessions.get(session_id)
        if memory is None:
            rows = self._store.scan(
                self._collection, tenant=self.tenant, session=session_id, kinds=[KIND], with_vectors=False
            )
            memory = self._new()
            rows.sort(key=lambda r: (r.ts_ms, int(r.payload.get("seq", 0))))
            if rows:
                state = memory.to_dict()
                state["items"] = [{k: v for k, v in r.payload.items() if k != "seq"} for r in rows]
                memory = WorkingMemory.from_dict(state, counter=self._counter)
            self._seqs[session_id] = {r.payload["id"]: int(r.payload.get("seq", 0)) for r in rows}
            for r in rows:
                self.expiries.set((session_id, r.payload["id"]), r.payload.get(EXPIRES))
            self._sessions[session_id] = memory
        return memory

    def unrecorded(self, session_id: str, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``items`` less those a turn already put in the session (same ``metadata.turn_id``
        and role): a retried turn adds its items once. Items without a turn id all stay."""
        memory = self.session(session_id)
        present = {(i.metadata.get(TURN_ID), i.role) for i in memory.items if i.metadata.get(TURN_ID)}

        def known(item: dict[str, Any]) -> bool:
            turn = (item.get("metadata") or {}).get(TURN_ID)
            return turn is not None and (turn, item["role"]) in present

        return [item for item in items if not known(item)]

    def add(
        self,
        session_id: str,
        items: Sequence[dict[str, Any]],
        *,
        now: datetime,
        task: str | None = None,
    ) -> tuple[list[WorkingItem], CompressionReport | None]:
        """Add items (``role``, ``content``, optional ``importance``, ``created_at``,
        ``metadata``) and persist the change. Returns the added items as stored
        and the compression report if the budget forced one."""
        memory = self.session(session_id)
        before = {item.id: item for item in memory.items}
        try:
            added = [
                memory.add(
                    item["role"],
                    item["content"],
                    now=now,
                    created_at=item.get("created_at"),
                    importance=item.get("importance"),
                    task=task,
                    metadata=item.get("metadata") or None,
                )
                for item in items
            ]
            for spec, item in zip(items, added, strict=True):
                deadline = expires_ms(self._ttl.seconds(self.tenant, "working", spec.get("ttl_s")), now=now)
                self.expiries.set((session_id, item.id), deadline)
            after = {item.id: item for item in memory.items}
            self._persist(session_id, before, after)
        except ValueError as exc:
            self._unload(session_id)
            raise InvalidInput(str(exc)) from None
        except BaseException:
            # Invalid input or a failed write: forget the half-made change, so a
            # call is all or nothing and memory always matches the store.
            self._unload(session_id)
            raise
        report = None
        dropped = tuple(i for i in [*before, *(a.id for a in added)] if i not in after)
        summarized = tuple(
            i for i, v in after.items() if v.summarized and not (i in before and before[i].summarized)
        )
        if dropped or summarized:
            report = CompressionReport(
                kept_ids=tuple(after),
                summarized_ids=summarized,
                dropped_ids=dropped,
                tokens_before=sum(v.tokens for v in before.values()) + sum(a.tokens for a in added),
                tokens_after=sum(v.tokens for v in after.values()),
            )
        return [after.get(a.id, a) for a in added], report

    def forget(self, session_id: str) -> int:
        """Delete the session's working memory everywhere.

        Raises:
            NotFound: the session has no working memory.
        """
        memory = self.session(session_id)
        if not memory.items:
            self._sessions.pop(session_id, None)
            raise NotFound(f"session {session_id!r} has no working memory")
        # Only working rows: version counters share the collection.
        removed = self._store.delete(self._collection, tenant=self.tenant, session=session_id, kinds=[KIND])
        self._unload(session_id)
        return removed

    def forget_turn(self, session_id: str, turn_id: str) -> int:
        """Delete the items that copy the turn ``turn_id`` (their ``metadata.turn_id``); the rows removed.

        Raises:
            NotFound: no item of the session copies that turn.
        """
        memory = self.session(session_id)
        ids = [i.id for i in memory.items if i.metadata.get(TURN_ID) == turn_id]
        if not ids:
            raise NotFound(f"session {session_id!r} has no working item of turn {turn_id!r}")
        removed = self.delete_items(session_id, ids)
        self.drop_items(session_id, ids)
        return removed

    def _unload(self, session_id: str) -> None:
        """Drop a session from memory (it reloads from the store on next use)."""
        self._sessions.pop(session_id, None)
        self._seqs.pop(session_id, None)
        # Expiries is no dict: keys() is its only way to iterate.
        self.expiries.drop([key for key in self.expiries.keys() if key[0] == session_id])  # noqa: SIM118  not a dict

    # -- expiry ---------------------------------------------------------------

    def expired(self, at_ms: int) -> dict[str, list[str]]:
        """Ids of the items expired at ``at_ms``, by session."""
        found: dict[str, list[str]] = {}
        for session_id, item_id in self.expiries.expired(at_ms):
            found.setdefault(session_id, []).append(item_id)
        return found

    def delete_items(self, session_id: str, item_ids: Sequence[str]) -> int:
        """Delete items from the store (blocking); the rows removed."""
        pks = [self._pk(session_id, item_id) for item_id in item_ids]
        return self._store.delete(self._collection, tenant=self.tenant, session=session_id, pks=pks)

    def drop_items(self, session_id: str, item_ids: Sequence[str]) -> None:
        """Remove items from memory (after :meth:`delete_items`)."""
        memory = self._sessions.get(session_id)
        for item_id in item_ids:
            if memory is not None:
                memory.remove(item_id)
            self._seqs.get(session_id, {}).pop(item_id, None)
        self.expiries.drop([(session_id, item_id) for item_id in item_ids])

    def _pk(self, session_id: str, item_id: str) -> str:
        return f"{self.tenant}/{KIND}/{session_id}/{item_id}"

    def _persist(self, session_id: str, before: dict[str, WorkingItem], after: dict[str, WorkingItem]) -> None:
        changed = [item for item_id, item in after.items() if before.get(item_id) != item]
        gone = [item_id for item_id in before if item_id not in after]
        seqs = self._seqs.setdefault(session_id, {})
        next_seq = max(seqs.values(), default=-1) + 1
        assigned: dict[str, int] = {}
        for item in changed:
            if item.id not in seqs:
                assigned[item.id] = next_seq
                next_seq += 1

        def pk(item_id: str) -> str:
            return self._pk(session_id, item_id)

        self._store.upsert(
            self._collection,
            [
                Record(
                    pk=pk(item.id),
                    tenant=self.tenant,
                    session=session_id,
                    kind=KIND,
                    ts_ms=to_ms(item.created_at),
                    text=item.content,
                    payload={
                        **item.to_dict(), "seq": seqs.get(item.id, assigned.get(item.id)),
                        **({EXPIRES: at} if (at := self.expiries.get((session_id, item.id))) else {}),
                    },
                )
                for item in changed
            ],
        )
        if gone:
            try:
                self._store.delete(
                    self._collection, tenant=self.tenant, session=session_id, pks=[pk(i) for i in gone]
                )
            except BaseException:
                # Undo the new rows (best effort), so a failed call leaves the store as it was.
                with contextlib.suppress(Exception):
                    self._store.delete(
                        self._collection, tenant=self.tenant, session=session_id, pks=[pk(i) for i in assigned]
                    )
                raise
        seqs.update(assigned)
        for item_id in gone:
            seqs.pop(item_id, None)
        self.expiries.drop([(session_id, item_id) for item_id in gone])
