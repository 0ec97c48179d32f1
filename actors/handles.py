"""Typed handles on the layer actors: the only code that calls ``.remote()`` on them.

One handle per layer wraps one shard actor (the router hands them out:
``router.episodic(tenant)``). Each operation the orchestration asks of a shard is one async
method with typed parameters and a typed result; the call is awaited and a failure mapped to
Strata's errors (:func:`~strata_actors.errors.unwrap`) in one place, :meth:`LayerHandle._call`.

A handle the router binds to a tenant (``router.episodic(tenant)``) does not hold one shard: it
asks its :class:`Route` for the tenant's owner under the router's current placement view at each
call, sends the view's epoch with the call, and when the shard refuses it
(:class:`~strata.errors.TenantMoved`: the layer was scaled) or is gone, sends it again to the
owner under the newer view (docs/scaling.md).

Results keep the shape the shard sends. Where the API model is all a caller makes of it
(a document, a skill, a page of them), the handle returns that model; where callers read
parts of it or make different models of it (hits become ``SearchHit`` or ``ContextItem``),
it returns the dict, typed here as a ``TypedDict``.

Example::

    found = await router.episodic(tenant).search(tenant, query="when is the gate open?", vector=v, top_k=8)
    hits = [SearchHit(**h) for h in found["hits"]]
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, NotRequired, Protocol, TypedDict

import numpy as np
from ray.exceptions import RayActorError

from strata.errors import StoreUnavailable, TenantMoved
from strata.layers import Layer, RetrievalPath
from strata.providers.llm import LLMUsage
from strata.schema import (
    DocumentDeleted,
    DocumentList,
    DocumentOut,
    SkillDeleted,
    SkillHistory,
    SkillJobOut,
    SkillList,
    SkillOut,
    SkillVersionOut,
)
from strata.schema.outputs import SessionList, SessionTurns
from strata.store.tombstones import Tombstone
from strata_actors.errors import unwrap

__all__ = [
    "EpisodicHandle",
    "EpisodicHits",
    "FoundSkill",
    "Hit",
    "LayerHandle",
    "Ping",
    "ProceduralHandle",
    "ReadBatcher",
    "RecordedTurn",
    "RecordedTurns",
    "Removed",
    "Route",
    "SemanticHandle",
    "SessionLayerHandle",
    "Speakers",
    "WorkingHandle",
    "WorkingMessages",
    "WorkingView",
]


# -- what the shards answer, where callers read it as a dict ------------------------------


class Hit(TypedDict):
    """An episodic or semantic hit: the fields of ``SearchHit`` (and ``ContextItem``)."""

    layer: Layer
    kind: str
    id: str
    text: str
    score: float
    relevance: NotRequired[float | None]
    timestamp: NotRequired[datetime | None]
    session_id: NotRequired[str | None]
    turn_ids: NotRequired[list[str]]
    ranks: NotRequired[dict[str, int]]
    #: Semantic passages: ``doc_id``, ``title``, ``start``, ``end`` (a ``SourceRef``).
    source: NotRequired[dict[str, Any] | None]
    #: Semantic passages: the children that matched (``MatchedSpan`` fields).
    matched: NotRequired[list[dict[str, Any]]]
    #: A long turn: the passage its text quotes, ``side``, ``start``, ``end`` (a ``TurnSpan``).
    span: NotRequired[dict[str, Any] | None]
    #: A turn: the id of a later turn among the hits that states the same thing.
    superseded_by: NotRequired[str | None]
    #: A turn: the time it speaks of, ``start`` and ``end`` (a ``TimeRangeOut``).
    speaks_of: NotRequired[dict[str, Any] | None]


class Speakers(TypedDict):
    """A tenant's speaker labels, as a search answer carries them (``speakers_seen``)."""

    #: Changes when the labels do.
    token: int
    #: The labels, sent when the caller's token was another; None when it was the same, or
    #: when the tenant has too many to send.
    names: list[str] | None


class EpisodicHits(TypedDict):
    hits: list[Hit]
    #: The episodic version the hits were read at.
    version: int
    #: When asked for with ``speakers_seen``.
    speakers: NotRequired[Speakers]


class FoundSkill(TypedDict):
    """A skill found for a task: every field of ``SkillOut`` (those named here are the ones
    read besides), and its ``brief``."""

    skill_id: str
    version: int
    brief: str
    similarity: float
    score: float
    relevance: float
    updated_at: datetime


class RecordedTurn(TypedDict):
    session_id: str
    turn_id: str
    timestamp: datetime
    expires_at: datetime | None


class RecordedTurns(TypedDict):
    turns: list[RecordedTurn]
    version: int
    #: The turns were recorded already: nothing was written.
    replayed: bool


class WorkingView(TypedDict):
    """A session's working memory: the fields of ``WorkingState``."""

    session_id: str
    version: int
    items: list[dict[str, Any]]
    messages: list[dict[str, str]]
    total_tokens: int
    max_tokens: int
    #: After a write: the item ids summarized and dropped to fit, or None.
    compression: NotRequired[dict[str, list[str]] | None]


class WorkingMessages(TypedDict):
    """A session's messages fitted to a budget, and the version they were read at."""

    messages: list[dict[str, str]]
    version: int


class Removed(TypedDict):
    """A session forgotten in one layer: rows removed, and the new version."""

    removed: int
    version: int


class Ping(TypedDict):
    layer: Layer
    shard: int
    tenants_loaded: int
    #: Items purged because they expired, since the actor started.
    expired_items: int
    #: Episodic shards: searches whose query the shard embedded itself, since it started.
    query_embeds: NotRequired[int]
    #: Semantic shards: documents being indexed now, every tenant's.
    indexing: NotRequired[int]
    #: The placement epoch the shard serves by, and its layer's shard count at that epoch.
    epoch: NotRequired[int]
    shards: NotRequired[int]


# -- the handles ----------------------------------------------------------------------------


#: A read waiting for its batch: method, args, kwargs, and the caller's future.
_Read = tuple[str, tuple[Any, ...], dict[str, Any], "asyncio.Future[Any]"]


class ReadBatcher:
    """Reads of one shard asked for in the same turn of the event loop go in one actor call.

    An actor call costs about 1.5 ms of CPU between caller and shard whatever it carries
    (docs/benchmarks.md), a context's reads are three of them, and concurrent contexts ask
    for theirs together: the query embeddings of concurrent requests come back in one model
    call, so their searches start in the same turn. A read asked for alone goes alone, at
    once: nothing waits for company. Several go as one :meth:`LayerShard.reads
    <strata_actors.shard.LayerShard.reads>` call; a read whose tenant the shard has not
    loaded comes back "cold" and is sent again on its own, so no read waits for another
    tenant's load.

    Args:
        actor: the shard's Ray actor handle.
        epoch: the placement epoch its reads are sent with (:meth:`LayerShard.call
            <strata_actors.shard.LayerShard.call>`); None: the shard's methods are called directly.
    """

    def __init__(self, actor: Any, *, epoch: int | None = None) -> None:
        self.actor = actor
        self.epoch = epoch
        #: Reads waiting for this turn's flush, per event loop: one batcher may serve several
        #: loops (a client driven by ``asyncio.run`` per call, or from several threads).
        self._pending: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Read]] = weakref.WeakKeyDictionary()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Actor calls made and reads they carried, for the benchmark and the tests.
        self.calls = 0
        self.reads = 0

    async def read(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        pending.append((method, args, kwargs, future))
        return await future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._pending.pop(loop, [])
        if batch:
            self._spawn(self._one(*batch[0]) if len(batch) == 1 else self._many(batch))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _one(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], future: asyncio.Future[Any]
    ) -> None:
        self.calls += 1
        self.reads += 1
        try:
            if self.epoch is None:
                result = await getattr(self.actor, method).remote(*args, **kwargs)
            else:
                result = await self.actor.call.remote(self.epoch, method, args, kwargs)
        except Exception as exc:
            _settle(future, error=unwrap(exc))
        else:
            _settle(future, result)

    async def _many(self, batch: list[_Read]) -> None:
        self.calls += 1
        self.reads += len(batch)
        try:
            calls = [(method, args, kwargs) for method, args, kwargs, _ in batch]
            answers = await (self.actor.reads.remote(calls) if self.epoch is None
                             else self.actor.reads.remote(calls, self.epoch))
        except Exception as exc:
            error = unwrap(exc)
            for *_, future in batch:
                _settle(future, error=error)
            return
        for (method, args, kwargs, future), (status, value) in zip(batch, answers, strict=True):
            if status == "ok":
                _settle(future, value)
            elif status == "error":
                _settle(future, error=unwrap(value))
            elif not future.done():  # cold: on its own, after its tenant's load
                self._spawn(self._one(method, args, kwargs, future))


def _settle(future: asyncio.Future[Any], result: Any = None, *, error: BaseException | None = None) -> None:
    if future.done():  # its caller gave up (a deadline, a cancelled request)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Route(Protocol):
    """Where a handle bound to one tenant sends its calls (the router's side of it)."""

    async def target(self) -> tuple[Any, ReadBatcher, int]:
        """The tenant's owner under the current view: its actor, its read batcher, the epoch."""
        ...

    async def moved(self, error: StoreUnavailable, epoch: int) -> bool:
        """After the owner at ``epoch`` refused a call or was gone: whether the placement has
        changed since, so that the call is worth sending again (it may wait for a change in
        progress to be published)."""
        ...


#: One send of a routed call: to the actor or its batcher, with the epoch it was placed by.
_Send = Callable[[Any, ReadBatcher, int], Awaitable[Any]]


class LayerHandle:
    """One shard actor of a layer, or the owner of one tenant; the calls every layer's shard answers.

    Args:
        actor: the shard's Ray actor handle, for a handle on one shard (operating the shards).
        reads: the shard's :class:`ReadBatcher` (the router keeps one per shard), through which
            the hot reads go; None: every call on its own.
        route: for a handle bound to a tenant (:class:`~strata_actors.router.LayerRouter` makes
            them): where each call goes, at the time it is made; ``actor`` and ``reads`` unused.
    """

    layer: ClassVar[Layer]

    def __init__(self, actor: Any = None, reads: ReadBatcher | None = None, *, route: Route | None = None) -> None:
        self._actor = actor
        self._reads = reads
        self._route = route

    async def _read(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`_call` for a read the shard may answer in a batch (``batched_reads``)."""
        if self._route is not None:
            return await self._routed(lambda _, batcher, __: batcher.read(method, args, kwargs), read=True)
        if self._reads is None:
            return await self._call(method, *args, **kwargs)
        return await self._reads.read(method, args, kwargs)

    async def _call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` on the shard and await it.

        Raises:
            StrataError: the shard's own error, or ``StoreUnavailable`` for a lost or slow actor.
        """
        if self._route is not None:
            return await self._routed(
                lambda actor, _, epoch: actor.call.remote(epoch, method, args, kwargs), read=False)
        try:
            return await getattr(self._actor, method).remote(*args, **kwargs)
        except Exception as exc:
            raise unwrap(exc) from None

    async def _routed(self, send: _Send, *, read: bool) -> Any:
        """``send`` to the tenant's owner; again to the new owner while the placement moves on.

        Sent again: a call the shard refused (``TenantMoved``: it wrote nothing), one whose actor
        was gone before it answered (a shard a shrink retired), and a read; never a write whose
        fate is unknown (a store timeout), which the caller must decide to retry."""
        route = self._route
        if route is None:
            raise TypeError("a handle on one shard has no route")
        while True:
            actor, batcher, epoch = await route.target()
            try:
                return await send(actor, batcher, epoch)
            except Exception as exc:
                error = unwrap(exc)
                if isinstance(error, StoreUnavailable) and (
                    isinstance(error, TenantMoved) or read or isinstance(exc, RayActorError)
                ) and await route.moved(error, epoch):
                    continue  # each round is at a newer epoch than the last: this ends
                raise error from None

    async def forget_tenant(self, tenant: str) -> int:
        """Delete every row this layer holds for ``tenant``; returns how many."""
        return int((await self._call("forget_tenant", tenant))["removed"])

    async def forget(self, tombstone: Tombstone) -> dict[str, Any]:
        """This layer's part of the forget ``tombstone`` stands for (docs/scaling.md): what
        ``forget_tenant`` or ``forget_session`` answers. Raises ``NotFound`` for a session the
        layer holds nothing of."""
        removed: dict[str, Any] = await self._call("forget", tombstone)
        return removed

    async def lift_forget(self, tombstone: Tombstone) -> bool:
        """Take writes under ``tombstone``'s scope again: its forget is done in every layer."""
        return bool(await self._call("lift_forget", tombstone))

    async def ping(self) -> Ping:
        """The shard's health: tenants loaded; raises if its store does not answer."""
        found: Ping = await self._call("ping")
        return found

    async def llm_usage(self) -> LLMUsage:
        """The shard's LLM calls and tokens since it started (all tenants)."""
        usage: LLMUsage = await self._call("llm_usage")
        return usage


class SessionLayerHandle(LayerHandle):
    """A layer that keeps memory per session."""

    async def forget_session(self, tenant: str, session_id: str) -> Removed:
        """Raises ``NotFound`` when the layer holds nothing of the session."""
        removed: Removed = await self._call("forget_session", tenant, session_id)
        return removed

    async def forget_turn(self, tenant: str, session_id: str, turn_id: str) -> Removed:
        """Raises ``NotFound`` when the layer holds nothing of the turn."""
        removed: Removed = await self._call("forget_turn", tenant, session_id, turn_id)
        return removed


class WorkingHandle(SessionLayerHandle):
    layer = "working"

    async def get(self, tenant: str, session_id: str, *, budget_tokens: int | None = None) -> WorkingView:
        """The session's items, and its messages fitted to ``budget_tokens`` if given."""
        view: WorkingView = await self._call("get", tenant, session_id, budget_tokens=budget_tokens)
        return view

    async def messages(self, tenant: str, session_id: str, *, budget_tokens: int | None = None) -> WorkingMessages:
        """The session's messages fitted to ``budget_tokens``, and its version: what a context reads."""
        found: WorkingMessages = await self._read("messages", tenant, session_id, budget_tokens=budget_tokens)
        return found

    async def add_items(
        self,
        tenant: str,
        session_id: str,
        items: list[dict[str, Any]],
        *,
        task: str | None = None,
        expected_version: int | None = None,
    ) -> WorkingView:
        """Add items (``WorkingItemIn`` fields); the session as of this write, with ``compression``."""
        view: WorkingView = await self._call(
            "add_items", tenant, session_id, items, task=task, expected_version=expected_version
        )
        return view


class EpisodicHandle(SessionLayerHandle):
    layer = "episodic"

    async def record_turns(
        self,
        tenant: str,
        session_id: str,
        turns: list[dict[str, Any]],
        *,
        vectors: np.ndarray,
        expected_version: int | None = None,
    ) -> RecordedTurns:
        """Record turns (``TurnIn`` fields) with their embeddings, one row per turn."""
        recorded: RecordedTurns = await self._call(
            "record_turns", tenant, session_id, turns, vectors=vectors, expected_version=expected_version
        )
        return recorded

    async def search(
        self,
        tenant: str,
        *,
        query: str,
        vector: np.ndarray,
        top_k: int,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        prefer: tuple[datetime, datetime] | None = None,
        dense_text: str | None = None,
        speakers_seen: int | None = None,
    ) -> EpisodicHits:
        """Turns and summaries like ``query`` (``vector`` is the embedding of ``dense_text``, or
        of ``query`` when None), in ``[start, end)``, those in ``prefer`` ranked up; with
        ``speakers_seen``, the tenant's speakers too (``EpisodicShard.search``)."""
        found: EpisodicHits = await self._read(
            "search", tenant, query=query, vector=vector, top_k=top_k, session_id=session_id,
            start=start, end=end, prefer=prefer, dense_text=dense_text, speakers_seen=speakers_seen,
        )
        return found

    async def list_sessions(self, tenant: str, *, after: str | None = None, limit: int = 50) -> SessionList:
        """The sessions with turns, by id, a page at a time."""
        return SessionList(**await self._call("list_sessions", tenant, after=after, limit=limit))

    async def list_turns(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 50, newest_first: bool = False
    ) -> SessionTurns:
        """The session's turns in time order (or newest first), a page at a time (``NotFound`` without any)."""
        return SessionTurns(**await self._call(
            "list_turns", tenant, session_id, after=after, limit=limit, newest_first=newest_first
        ))

    async def list_summaries(self, tenant: str, session_id: str) -> list[dict[str, Any]]:
        """The session's summaries, oldest first (``SummaryRecord`` fields but the session)."""
        found: list[dict[str, Any]] = await self._call("list_summaries", tenant, session_id)
        return found

    async def wait_for_summaries(self, tenant: str) -> int:
        """Wait for the tenant's background summaries; returns chunks still pending."""
        return int(await self._call("wait_for_summaries", tenant))

    async def wait_for_passages(self, tenant: str) -> int:
        """Wait for the tenant's long turns' passages to be embedded; returns the turns still waiting."""
        return int(await self._call("wait_for_passages", tenant))


class SemanticHandle(LayerHandle):
    layer = "semantic"

    async def index_document(
        self, tenant: str, doc: dict[str, Any], *, expected_version: int | None = None, wait: bool = True
    ) -> DocumentOut:
        """Index or re-index a document (``DocumentIn`` fields); without ``wait``, at once, indexing."""
        return DocumentOut(
            **await self._call("index_document", tenant, doc, expected_version=expected_version, wait=wait)
        )

    async def delete_document(
        self, tenant: str, doc_id: str, *, expected_version: int | None = None
    ) -> DocumentDeleted:
        return DocumentDeleted(**await self._call("delete_document", tenant, doc_id, expected_version=expected_version))

    async def get_document(self, tenant: str, doc_id: str, *, with_text: bool = False) -> DocumentOut:
        return DocumentOut(**await self._call("get_document", tenant, doc_id, with_text=with_text))

    async def list_documents(self, tenant: str, *, after: str | None = None, limit: int = 50) -> DocumentList:
        return DocumentList(**await self._call("list_documents", tenant, after=after, limit=limit))

    async def search(
        self,
        tenant: str,
        *,
        query: str,
        vector: np.ndarray,
        top_k: int,
        weights: dict[RetrievalPath, float] | None = None,
        min_cosine: float | None = None,
        doc_ids: list[str] | None = None,
    ) -> list[Hit]:
        """Passages for ``query`` (``vector`` is its embedding), best first."""
        found = await self._read(
            "search", tenant, query=query, vector=vector, top_k=top_k, weights=weights, min_cosine=min_cosine,
            doc_ids=doc_ids,
        )
        hits: list[Hit] = found["hits"]
        return hits

    async def entity(self, tenant: str, name: str) -> dict[str, Any]:
        """What the knowledge graph knows of an entity (``EntityOut`` fields)."""
        found: dict[str, Any] = await self._call("entity", tenant, name)
        return found


class ProceduralHandle(LayerHandle):
    layer = "procedural"

    async def extract_skill(
        self, tenant: str, task: str, trace: list[Any], outcome: str | None, *, by: str, ttl_s: float | None = None
    ) -> SkillOut:
        """Learn a skill from a trace now (``merged``: into a near-duplicate)."""
        return SkillOut(**await self._call("extract_skill", tenant, task, trace, outcome, by=by, ttl_s=ttl_s))

    async def learn_later(
        self, tenant: str, task: str, trace: list[Any], outcome: str | None, *, by: str,
        extra: Mapping[str, Any] | None = None,
    ) -> SkillJobOut:
        """Keep the trace durably and learn from it in the background."""
        return SkillJobOut(**await self._call("learn_later", tenant, task, trace, outcome, by=by, extra=extra))

    async def skill_job(self, tenant: str, job_id: str) -> SkillJobOut:
        return SkillJobOut(**await self._call("skill_job", tenant, job_id))

    async def record_outcome(
        self, tenant: str, skill_id: str, success: bool, notes: str | None, *, expected_version: int | None, by: str
    ) -> SkillOut:
        return SkillOut(**await self._call(
            "record_outcome", tenant, skill_id, success, notes, expected_version=expected_version, by=by
        ))

    async def update_skill(
        self, tenant: str, skill_id: str, changes: dict[str, Any], *, expected_version: int | None, by: str
    ) -> SkillOut:
        return SkillOut(**await self._call(
            "update_skill", tenant, skill_id, changes, expected_version=expected_version, by=by
        ))

    async def delete_skill(self, tenant: str, skill_id: str, *, expected_version: int | None = None) -> SkillDeleted:
        return SkillDeleted(**await self._call("delete_skill", tenant, skill_id, expected_version=expected_version))

    async def get_skill(self, tenant: str, skill_id: str) -> SkillOut:
        return SkillOut(**await self._call("get_skill", tenant, skill_id))

    async def list_skills(self, tenant: str, *, after: str | None = None, limit: int = 50) -> SkillList:
        """All skills by id, a page at a time."""
        return SkillList(**await self._call("list_skills", tenant, after=after, limit=limit))

    async def search(
        self, tenant: str, *, query: str, vector: np.ndarray | None, top_k: int, min_success_rate: float | None = None
    ) -> list[FoundSkill]:
        """Skills for a task (``vector`` is its embedding; made by the shard if None), best first."""
        found = await self._read(
            "search", tenant, query=query, vector=vector, top_k=top_k, min_success_rate=min_success_rate
        )
        skills: list[FoundSkill] = found["skills"]
        return skills

    async def history(self, tenant: str, skill_id: str) -> SkillHistory:
        return SkillHistory(**await self._call("history", tenant, skill_id))

    async def import_skill(
        self, tenant: str, skill: SkillOut, history: Sequence[SkillVersionOut]
    ) -> tuple[SkillOut, bool]:
        """Write a skill as exported, with its history (``strata restore``); and whether it was
        written (False: it was there already, the same)."""
        out = await self._call("import_skill", tenant, skill.model_dump(mode="json"),
                               [version.model_dump(mode="json") for version in history])
        written = bool(out.pop("written"))
        return SkillOut(**out), written
