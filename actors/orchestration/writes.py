"""Writes: turns and interactions, working-memory items, documents, and forgetting.

Each write redacts PII first, calls the owning layer actor, and appends to the
audit history; a write that reaches two layers says in ``missing`` what the
second one did not take.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from strata.counting import on_behalf_of
from strata.episodic.summarize import LLM_UTTERANCE_CHARS
from strata.errors import InvalidInput, NotFound, StrataError
from strata.ids import SYSTEM_TENANT, validate_id
from strata.limits import TASK_CHARS_MAX
from strata.schema import (
    LAYERS,
    DocumentDeleted,
    DocumentIn,
    DocumentOut,
    ForgetResult,
    InteractionIn,
    InteractionResult,
    Layer,
    RecordTurnsResult,
    SkillJobOut,
    TurnIn,
    TurnOut,
    WorkingItemsIn,
    WorkingState,
)
from strata.store.layout import open_store
from strata.store.tombstones import Tombstone, TombstoneStore
from strata.working.sessions import TURN_ID
from strata_actors.episodic import turn_text
from strata_actors.orchestration.audit import AuditFlow
from strata_actors.orchestration.base import plain_trace

__all__ = ["SESSION_LAYERS", "WriteFlow"]

#: Layers that keep memory per session (forgetting a session reaches these).
SESSION_LAYERS: tuple[Layer, ...] = ("working", "episodic")


class WriteFlow(AuditFlow):
    """Turns, interactions, working items and documents in; sessions and tenants forgotten."""

    #: The forget tombstones' rows, opened at the first forget.
    _tombstone_rows: TombstoneStore | None = None

    async def record_turns(
        self,
        tenant: str,
        session_id: str,
        turns: Sequence[TurnIn],
        *,
        expected_version: int | None = None,
        by: str = "",
    ) -> RecordTurnsResult:
        """Write turns to episodic memory (durable, embedded) and to the session's working memory."""
        validate_id(session_id, field="session_id")
        pii = self._pii.for_tenant(tenant)
        # Off the event loop: a batch is up to 1,000 turns of 16,000 characters each.
        dicts = await asyncio.to_thread(lambda: [pii.model(t).model_dump() for t in turns])
        with on_behalf_of(tenant):
            vectors = await self._embed([turn_text(d) for d in dicts])
        episodic = await self.router.episodic(tenant).record_turns(
            tenant, session_id, dicts, vectors=vectors, expected_version=expected_version
        )
        # Working memory follows the episodic write: the turn is durable first.
        # If working memory fails now, the turn stays recorded (a retry would
        # record it twice); the result says what is missing instead.
        # A turn's copies in working memory expire no later than the turn.
        items = []
        for d, out in zip(dicts, episodic["turns"], strict=True):  # one output per turn
            left = (out["expires_at"] - datetime.now(UTC)).total_seconds() if out["expires_at"] else None
            for role, text in (("user", d["user"]), ("assistant", d["agent"])):
                if text and text.strip():
                    items.append(
                        {
                            "role": role,
                            "content": text,
                            "created_at": out["timestamp"],
                            "ttl_s": max(left, 0.001) if left is not None else None,
                            "metadata": {TURN_ID: out["turn_id"]},
                        }
                    )
        versions = {"episodic": episodic["version"]}
        # A retry of recorded turns changed nothing in episodic memory; it still
        # completes working memory, which the first attempt may not have reached.
        if not episodic["replayed"]:
            await self._record(tenant, by, "record_turns", "episodic", session_id, episodic["version"])
        missing: dict[str, str] = {}
        try:
            working = await self.router.working(tenant).add_items(tenant, session_id, items)
            versions["working"] = working["version"]
        except StrataError as exc:
            missing["working"] = exc.message
        return RecordTurnsResult(
            session_id=session_id,
            turns=[TurnOut(**t) for t in episodic["turns"]],
            versions=versions,
            missing=missing,
            redacted=pii.report(),
            replayed=episodic["replayed"],
        )

    async def post_interaction(
        self, tenant: str, body: InteractionIn, *, by: str = "", learn: bool = True
    ) -> InteractionResult:
        """Record the exchange in working and episodic memory; a success of a learning
        task type queues a skill extraction (durable, in the background).
        ``learn=False``: never a skill (the caller's key may not write skills)."""
        # Redacted here once (the turn, and the trace the job keeps); record_turns
        # redacts again, which changes nothing: redaction is idempotent.
        pii = self._pii.for_tenant(tenant)
        body = await asyncio.to_thread(pii.model, body)
        recorded = await self.record_turns(tenant, body.session_id, [body.turn()], by=by)
        learn_from = self.settings.procedural.learn_from
        job: SkillJobOut | None = None
        missing = dict(recorded.missing)
        if not learn:
            learning = "not learned: this key may not write skills (a session key, or one without skills)"
        elif not body.success:
            learning = "not learned: only successful tasks teach a skill"
        elif body.task_type not in learn_from:
            learning = (
                f"not learned: task type {body.task_type!r} is not in procedural.learn_from ({', '.join(learn_from)})"
            )
        elif not body.trace and not self.settings.llm.enabled:
            learning = "not learned: give a trace (without an LLM, skills are built from structured traces)"
        else:
            # A side of a turn may be 1,000,000 characters; what a skill is learned from (the job's
            # row, the LLM's prompt) takes its opening, as summaries do.
            said = [(body.user or "")[:LLM_UTTERANCE_CHARS], (body.agent or "")[:LLM_UTTERANCE_CHARS]]
            trace = plain_trace(body.trace) if body.trace else [f"user: {said[0]}".strip(), f"agent: {said[1]}".strip()]
            task = body.task or (said[0] or said[1])[:TASK_CHARS_MAX]
            try:
                job = await self.router.procedural(tenant).learn_later(
                    tenant,
                    task,
                    trace,
                    body.outcome,
                    by=by,
                    extra={"session_id": body.session_id, "turn_id": recorded.turns[0].turn_id},
                )
                learning = "learning a skill in the background: see skill_job"
            except StrataError as exc:
                missing["procedural"] = exc.message
                learning = "not learned: the trace could not be kept (see missing); the turn is recorded"
        return InteractionResult(
            **{**recorded.model_dump(), "missing": missing, "redacted": pii.report()}, skill_job=job, learning=learning
        )

    async def add_working_items(
        self,
        tenant: str,
        session_id: str,
        body: WorkingItemsIn,
        *,
        expected_version: int | None = None,
        by: str = "",
    ) -> WorkingState:
        validate_id(session_id, field="session_id")
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        state = await self.router.working(tenant).add_items(
            tenant, session_id, [i.model_dump() for i in body.items], task=body.task, expected_version=expected_version
        )
        await self._record(tenant, by, "add_working_items", "working", session_id, state["version"])
        return WorkingState.model_validate(state)

    async def index_document(
        self, tenant: str, body: DocumentIn, *, expected_version: int | None = None, wait: bool = True, by: str = ""
    ) -> DocumentOut:
        """Index or re-index a document (atomically: searches see one version)."""
        # A document may be megabytes: its redaction runs off the event loop.
        body = await asyncio.to_thread(self._pii.for_tenant(tenant).model, body)
        doc = await self.router.semantic(tenant).index_document(
            tenant, body.model_dump(), expected_version=expected_version, wait=wait
        )
        # A background job's version is the one it will make; the audit records the request.
        await self._record(tenant, by, "index_document", "semantic", doc.doc_id, doc.version)
        return doc

    async def delete_document(
        self, tenant: str, doc_id: str, *, expected_version: int | None = None, by: str = ""
    ) -> DocumentDeleted:
        validate_id(doc_id, field="doc_id")
        deleted = await self.router.semantic(tenant).delete_document(tenant, doc_id, expected_version=expected_version)
        await self._record(tenant, by, "delete_document", "semantic", doc_id, deleted.version)
        return deleted

    # -- forgetting -------------------------------------------------------------

    async def forget_session(self, tenant: str, session_id: str, *, by: str = "") -> ForgetResult:
        """Forget a session in every layer, atomically across them (:meth:`_forget_under`);
        404 only if no layer knew it."""
        validate_id(session_id, field="session_id")
        tombstone = Tombstone.begin(tenant, SESSION_LAYERS, session=session_id)
        results = await self._forget_under(tombstone)
        missing = f"session {session_id!r} has no memory to forget"
        return await self._forgotten(tenant, by, "forget_session", session_id, session_id, results, missing)

    async def forget_turn(self, tenant: str, session_id: str, turn_id: str, *, by: str = "") -> ForgetResult:
        """Forget one turn of a session: its episodic row, vector and the summaries that cover
        it, and its copies in working memory; 404 only if no layer knew it. A layer that failed
        is forgotten by a retry (the other then answers 404, which a retry skips)."""
        validate_id(session_id, field="session_id")
        validate_id(turn_id, field="turn_id")
        owners = [self.router.session_layer(layer, tenant) for layer in SESSION_LAYERS]
        results = await asyncio.gather(
            *(h.forget_turn(tenant, session_id, turn_id) for h in owners), return_exceptions=True
        )
        record = f"{session_id}/{turn_id}"
        missing = f"turn {record!r} has no memory to forget"
        return await self._forgotten(tenant, by, "forget_turn", session_id, record, results, missing)

    async def _forgotten(
        self, tenant: str, by: str, op: str, session_id: str, record_id: str, results: list[Any], missing: str
    ) -> ForgetResult:
        """The result of a forget that each session layer answered (``results``, in
        SESSION_LAYERS' order), audited per layer; NotFound(``missing``) if none knew ``record_id``."""
        removed: dict[str, int] = {}
        versions: dict[str, int] = {}
        for layer, result in zip(SESSION_LAYERS, results, strict=True):
            if isinstance(result, NotFound):
                continue
            if isinstance(result, BaseException):
                raise result
            removed[layer], versions[layer] = result["removed"], result["version"]
        if not removed:
            raise NotFound(missing)
        for name, version in versions.items():
            await self._record(tenant, by, op, name, record_id, version)
        return ForgetResult(session_id=session_id, removed=removed, versions=versions)

    async def forget_tenant(self, tenant: str, *, by: str = "") -> dict[str, int]:
        """Delete everything every layer holds for ``tenant`` (rows, vectors, indexes, jobs),
        atomically across them (:meth:`_forget_under`); returns the rows removed per layer.
        Its keys are the caller's to revoke."""
        validate_id(tenant, field="tenant")
        if tenant == SYSTEM_TENANT:
            raise InvalidInput("the system tenant cannot be forgotten", field="tenant")
        results = await self._forget_under(Tombstone.begin(tenant, LAYERS))
        self._speakers.pop(tenant, None)  # its speakers' names (another ingress's go at its next search)
        await self._record(tenant, by, "forget_tenant", "all", tenant, None)
        return {layer: int(result["removed"]) for layer, result in zip(LAYERS, results, strict=True)}

    async def _forget_under(self, tombstone: Tombstone) -> list[Any]:
        """Run a forget across its layers under ``tombstone`` (docs/scaling.md, "Forget tombstones").

        The tombstone is written first; each layer then does its part, from which on it refuses
        writes under it; once every part is done the tombstone is removed and lifted, and only
        then does this return. Returns each layer's answer in ``tombstone.layers``' order
        (``NotFound`` among them for a session a layer did not hold).

        Raises:
            StrataError: a layer's part failed. The tombstone stands: writes stay refused, and
                the layer's shard does its part itself within ``RESUME_AFTER_S`` +
                ``FORGET_CHECK_S`` (:mod:`strata_actors.forgetting`), or a retry of the forget does.
        """
        rows = await self._tombstones()
        await asyncio.to_thread(rows.put, tombstone)
        tenant = tombstone.tenant
        handles = [self.router.layer(cast(Layer, layer), tenant) for layer in tombstone.layers]
        results = await asyncio.gather(*(h.forget(tombstone) for h in handles), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NotFound):
                raise result
        await asyncio.to_thread(rows.remove, tombstone)  # False: a later forget of the scope stands
        # Best effort: a shard not told now stops refusing at its next check (the row is gone).
        await asyncio.gather(*(h.lift_forget(tombstone) for h in handles), return_exceptions=True)
        return list(results)

    async def _tombstones(self) -> TombstoneStore:
        if self._tombstone_rows is None:
            store, names = await asyncio.to_thread(open_store, self.settings)
            self._tombstone_rows = TombstoneStore(store, names.state)
        return self._tombstone_rows
