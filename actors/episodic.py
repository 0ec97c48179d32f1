"""The episodic layer's shard actor: turns in, similar turns and summaries out.

Summaries are made in the background after a write returns: the turns are
already durable, and a summary not made yet (a crash, the LLM down, Milvus
down, the tenant moved to another shard) is made when the tenant next loads
on its owner, or at its next write, because "not covered by a summary" is
derived from the durable rows. A summary made from turns that a forget of
the tenant removed meanwhile is dropped, not written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import numpy as np

from strata.clock import from_ms_or_none
from strata.episodic.memory import EpisodicMemory
from strata.episodic.summarize import EpisodeSummary, ExtractiveSummarizer, LLMSummarizer, Summarizer
from strata.episodic.turns import SUMMARY, TURN, EpisodicHit, Turn, TurnInput, summary_inputs, summary_vector_text
from strata.providers.llm import make_llm
from strata.providers.routes import script_route
from strata.store.layout import Collections
from strata.store.records import RecordStore
from strata_actors.shard import LayerShard

__all__ = ["SPEAKERS_SENT_MAX", "EpisodicShard", "hit_out", "turn_text"]

_log = logging.getLogger(__name__)
_SCOPE = "episodic"
#: The most speaker labels a search answer carries (see :meth:`EpisodicShard.search`): a tenant
#: with more has its queries' names taken out here, as before callers kept them.
SPEAKERS_SENT_MAX = 64


def turn_text(turn: dict[str, Any]) -> str:
    """The text a turn is embedded as (the same as :attr:`Turn.text`)."""
    return Turn("", "", 0, datetime.now(UTC), turn.get("user"), turn.get("agent"), turn.get("speaker"), {}).text


def hit_out(hit: EpisodicHit) -> dict[str, Any]:
    """An episodic hit as a search answer carries it to the caller (and the bench's floor builds it)."""
    return {
        "layer": "episodic",
        "kind": hit.kind,
        "id": hit.id,
        "text": hit.text,
        "score": hit.score,
        "relevance": hit.relevance,
        "timestamp": hit.timestamp,
        "session_id": hit.session_id,
        "turn_ids": list(hit.turn_ids),
        "ranks": hit.ranks,
        **({"span": {"side": hit.span[0], "start": hit.span[1], "end": hit.span[2]}} if hit.span else {}),
        **({"superseded_by": hit.superseded_by} if hit.superseded_by else {}),
        **({"speaks_of": {"start": hit.speaks_of[0], "end": hit.speaks_of[1]}} if hit.speaks_of else {}),
    }


def _turn_view(turn: Turn) -> dict[str, Any]:
    """A turn as ``GET /v1/sessions/{id}/turns`` shows it (``SessionTurn`` fields)."""
    return {
        "turn_id": turn.turn_id,
        "timestamp": turn.timestamp,
        "text": turn.text,
        "user": turn.user,
        "agent": turn.agent,
        "speaker": turn.speaker,
        "metadata": turn.metadata,
        "expires_at": from_ms_or_none(turn.expires_ms),
    }


class EpisodicShard(LayerShard[EpisodicMemory]):
    layer_name = "episodic"
    vectors_in = "episodic"
    batched_reads = frozenset({"search"})
    expiring_kinds = (TURN, SUMMARY)

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        super().__init__(settings, shard)
        self.llm = make_llm(self.settings.llm)
        self._summarizer: Summarizer = LLMSummarizer(self.llm) if self.llm else ExtractiveSummarizer()
        self._summarising: dict[str, asyncio.Task[None]] = {}
        self._embedding: dict[str, asyncio.Task[None]] = {}  # per tenant: its long turns' passages
        self._refreshing: dict[str, asyncio.Task[None]] = {}  # per tenant: its rows written before
        self._passage_slot = asyncio.Lock()  # one long turn's passages embedded at a time
        #: Summaries being made at once, every tenant's: as many as the LLM's slots in this process
        #: (``llm.max_concurrency``), so the others wait on the event loop, not in worker threads
        #: parked on those slots (the shard's store calls need the threads).
        self._summary_slots = asyncio.Semaphore(self.settings.llm.max_concurrency)
        #: Searches whose query this shard embedded itself (its speakers taken out), since it
        #: started: a caller that keeps the tenant's speakers sends that vector along instead.
        self.query_embeds = 0

    def make_layer(self, tenant: str, store: RecordStore, collections: Collections) -> EpisodicMemory:
        return EpisodicMemory(
            tenant, store=store, collection=collections.episodic, settings=self.settings.episodic,
            ttl=self.settings.ttl, route=script_route(self.settings.embedding),
        )

    def tenant_rows(self, collections: Collections) -> tuple[str, list[str] | None]:
        return collections.episodic, None

    def load_layer(self, layer: EpisodicMemory) -> None:
        layer.load()

    def loaded(self, tenant: str, layer: EpisodicMemory) -> None:
        """Background work the stored rows say is owed (the shard that owed it may have died, or
        the tenant moved here): passages' vectors, and summaries of turns no summary covers."""
        if layer.unembedded():  # written before a stop that came before their vectors
            self._schedule_passages(tenant)
        self._schedule_summaries(tenant)
        if layer.stale(1):  # rows an earlier version wrote: what this one reads at a write, once
            _schedule(self._refreshing, tenant, self._refresh)

    # -- expiry: turns, and the summaries made from them ------------------------------

    def due(self, layer: EpisodicMemory) -> int | None:
        return layer.expiries.due()

    def expiring(self, layer: EpisodicMemory, at_ms: int) -> dict[str, Any]:
        turns, summaries = layer.expired(at_ms)
        return {_SCOPE: (turns, summaries)} if turns or summaries else {}

    def delete_expired(self, layer: EpisodicMemory, scope: str, expired: Any) -> int:
        return layer.delete_keys(*expired)

    def drop_expired(self, layer: EpisodicMemory, scope: str, expired: Any) -> None:
        layer.drop_keys(*expired)

    def after_expiry(self, tenant: str) -> None:
        self._schedule_summaries(tenant)  # the turns a dropped summary covered, from what remains

    # -- writes ---------------------------------------------------------------

    async def record_turns(
        self,
        tenant: str,
        session_id: str,
        turns: list[dict[str, Any]],
        *,
        vectors: np.ndarray | None = None,
        expected_version: int | None = None,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Record turns (dicts of :class:`TurnInput` fields); returns them and the new version.

        ``vectors`` are the turns' embeddings when the caller has them (the
        orchestrator batches them); otherwise this actor embeds.
        """
        inputs = [TurnInput(**t) for t in turns]
        # A retry of turns that were recorded (same ids, same text) answers as the first
        # attempt would have, whatever version it expected, and writes nothing.
        layer = (await self._tenant(tenant)).layer
        replay = layer.replayed(session_id, inputs)
        if replay is not None:
            return self._recorded(replay, await self.version(tenant, _SCOPE), replayed=True)
        if vectors is None:
            vectors = await self.embed([turn_text(t) for t in turns], tenant=tenant)
        # Turns in a script the first model does not read, by the second: before the write's lock.
        routed = None
        if layer.routes_any(inputs):
            self.count_usage()  # the second model's tokens count as the tenant's
            routed = await asyncio.to_thread(layer.routed_vectors, inputs)
        now = now or datetime.now(UTC)
        vecs = np.asarray(vectors, dtype=np.float32)

        def write(layer: EpisodicMemory) -> tuple[list[Turn], bool]:
            # Checked again under the lock: the same retry may have been waiting for it.
            replay = layer.replayed(session_id, inputs)
            if replay is not None:
                return replay, True
            prepared = layer.prepare(session_id, inputs, now=now, routed_vectors=routed)
            layer.write(prepared, vecs)  # a long turn's passages are embedded after: _embed_passages
            return prepared, False

        def apply(layer: EpisodicMemory, written: tuple[list[Turn], bool]) -> tuple[list[Turn], bool]:
            if not written[1]:
                layer.index(written[0], vecs)
            return written

        (recorded, replayed), version = await self.mutate(tenant, _SCOPE, expected_version, write, apply)
        if not replayed:
            self._schedule_summaries(tenant)
            # A side this long may have passages (a quarter of passage_chars: CJK text); no task else.
            shortest = self.settings.episodic.passage_chars // 4
            if any(len(t.user or "") > shortest or len(t.agent or "") > shortest for t in recorded):
                self._schedule_passages(tenant)
        return self._recorded(recorded, version, replayed=replayed)

    @staticmethod
    def _recorded(turns: list[Turn], version: int, *, replayed: bool) -> dict[str, Any]:
        return {
            "turns": [
                {"session_id": t.session_id, "turn_id": t.turn_id, "timestamp": t.timestamp,
                 "expires_at": from_ms_or_none(t.expires_ms)}
                for t in turns
            ],
            "version": version,
            "replayed": replayed,
        }

    async def forget_session(
        self, tenant: str, session_id: str, *, expected_version: int | None = None
    ) -> dict[str, Any]:
        removed, version = await self.remove(
            tenant,
            _SCOPE,
            expected_version,
            lambda layer: layer.delete_session(session_id),
            lambda layer: layer.drop_session(session_id),
        )
        return {"removed": removed, "version": version}

    async def forget_turn(
        self, tenant: str, session_id: str, turn_id: str, *, expected_version: int | None = None
    ) -> dict[str, Any]:
        """Forget one turn: its row and vector, and the summaries that cover it."""
        keys: list[tuple[list[str], list[str]]] = []

        def delete(layer: EpisodicMemory) -> int:
            keys.append(layer.turn_keys(session_id, turn_id))
            return layer.delete_keys(*keys[0])

        removed, version = await self.remove(
            tenant, _SCOPE, expected_version, delete, lambda layer: layer.drop_keys(*keys[0])
        )
        return {"removed": removed, "version": version}

    async def ping(self) -> dict[str, Any]:
        """:meth:`LayerShard.ping`, and how many queries this shard embedded itself."""
        return {**await super().ping(), "query_embeds": self.query_embeds}

    # -- reads ----------------------------------------------------------------

    async def search(
        self,
        tenant: str,
        *,
        query: str | None = None,
        vector: np.ndarray | None = None,
        top_k: int = 8,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        include_summaries: bool = True,
        prefer: tuple[datetime, datetime] | None = None,
        dense_text: str | None = None,
        speakers_seen: int | None = None,
    ) -> dict[str, Any]:
        """Hits for ``query`` (text, for the lexical path) and ``vector`` (its embedding,
        made here when not given); dense only when no text is given.

        The dense path embeds the query without the speaker names it mentions
        (:meth:`EpisodicMemory.dense_query`). ``vector`` is taken as the embedding of
        ``dense_text`` (of ``query`` when None); when that is not the text the dense path
        wants, the wanted one is embedded here. A caller that keeps the tenant's speakers
        makes that text itself and sends its vector, and says which speakers it knows by their
        token (``speakers_seen``; -1 for none): the answer then has ``speakers``, the current
        token, and the labels themselves when the caller's token is not it (None when there
        are more than :data:`SPEAKERS_SENT_MAX`)."""
        if vector is None and query is None:
            raise ValueError("give query or vector")
        speakers: dict[str, Any] | None = None
        routed_query: np.ndarray | None = None
        if query is not None:
            slot = await self._tenant(tenant, scope=_SCOPE)  # the read below needs its version
            wanted = slot.layer.dense_query(query)
            if vector is None or wanted != (query if dense_text is None else dense_text):
                self.query_embeds += 1
                vector = (await self.embed_query([wanted], tenant=tenant))[0]
            if slot.layer.wants_routed_query:  # turns the second model embedded: the query by it too
                self.count_usage()
                routed_query = await asyncio.to_thread(slot.layer.routed_query, query)
            if speakers_seen is not None:
                speakers = {"token": slot.layer.speakers_token, "names": None}
                if speakers["token"] != speakers_seen:
                    names = slot.layer.speakers()
                    speakers["names"] = names if len(names) <= SPEAKERS_SENT_MAX else None
        hits, version = await self.read(
            tenant,
            _SCOPE,
            lambda layer: layer.search(
                np.asarray(vector, dtype=np.float32),
                query_text=query,
                top_k=top_k,
                session_id=session_id,
                start=start,
                end=end,
                include_summaries=include_summaries,
                prefer=prefer,
                routed_query=routed_query,
            ),
        )
        found = {"hits": [hit_out(h) for h in hits], "version": version}
        if speakers is not None:
            found["speakers"] = speakers
        return found

    async def list_sessions(self, tenant: str, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
        """The sessions with turns, by id, ``limit`` after the session ``after`` (``SessionList`` fields)."""
        (page, total, more), _ = await self.read(
            tenant, _SCOPE, lambda layer: layer.sessions_page(after=after, limit=limit)
        )
        return {
            "sessions": [dataclasses.asdict(s) for s in page],
            "total": total,
            "next_after": page[-1].session_id if more else None,
        }

    async def list_turns(
        self, tenant: str, session_id: str, *, after: str | None = None, limit: int = 50, newest_first: bool = False
    ) -> dict[str, Any]:
        """The session's turns in time order (``newest_first``: the other way), ``limit`` after the
        turn ``after`` in that order (``SessionTurns`` fields).

        Raises:
            NotFound: the session has no turns.
            InvalidInput: ``after`` names no turn of the session.
        """
        (page, total, more), _ = await self.read(
            tenant, _SCOPE,
            lambda layer: layer.turns_page(session_id, after=after, limit=limit, newest_first=newest_first),
        )
        return {
            "session_id": session_id,
            "turns": [_turn_view(t) for t in page],
            "total": total,
            "next_after": page[-1].turn_id if more and page else None,
        }

    async def list_summaries(self, tenant: str, session_id: str) -> list[dict[str, Any]]:
        """The session's summaries, oldest first: id, the turns each covers, and its content."""
        found, _ = await self.read(
            tenant, _SCOPE,
            lambda layer: [
                {"summary_id": s.summary_id, "turn_ids": list(s.turn_ids), **s.content.to_dict()}
                for s in layer.summaries(session_id)
            ],
        )
        return list(found)

    async def session_state(self, tenant: str, session_id: str) -> dict[str, Any]:
        """The session's raw window and its summaries."""
        def view(layer: EpisodicMemory) -> dict[str, Any]:
            return {
                "window": [t.to_dict() for t in layer.raw_window(session_id)],
                "summaries": [
                    {"summary_id": s.summary_id, "turn_ids": list(s.turn_ids), **s.content.to_dict()}
                    for s in layer.summaries(session_id)
                ],
                "turns": layer.session_length(session_id),
            }

        state, version = await self.read(tenant, _SCOPE, view)
        return {**state, "version": version}

    async def wait_for_summaries(self, tenant: str) -> int:
        """Wait until background summarising of ``tenant`` is done; returns pending chunks."""
        task = self._summarising.get(tenant)
        if task is not None:
            await asyncio.shield(task)
        slot = await self._tenant(tenant)
        return len(slot.layer.pending_summaries())

    # -- long turns' passages, embedded after the write -------------------------------

    def _schedule_passages(self, tenant: str) -> None:
        _schedule(self._embedding, tenant, self._embed_passages)

    async def _embed_passages(self, tenant: str) -> None:
        """Embed the passages of the tenant's long turns that wait for their vectors, one turn at
        a time and one tenant at a time in this actor (a 100,000-character turn is ~100 passages,
        seconds of model: the searches in between keep their share of the cores). Until then a
        passage is found by its words; a turn forgotten meanwhile gets nothing written back."""
        try:
            while True:
                slot = await self._tenant(tenant)
                keys = slot.layer.unembedded()
                if not keys:
                    return
                for key in keys:
                    generation = self.generation(tenant)
                    texts = slot.layer.texts_to_embed(key)
                    if not texts:
                        continue
                    async with self._passage_slot:
                        vectors = np.asarray(await self.embed(texts, tenant=tenant), dtype=np.float32)
                        # A turn the second model embedded: its passages by it too (strata.providers.routes).
                        routed = await asyncio.to_thread(slot.layer.routed_passage_vectors, key, texts)

                    async def store(
                        layer: EpisodicMemory, key: str = key, texts: list[str] = texts,
                        vectors: np.ndarray = vectors, routed: list[np.ndarray] = routed, generation: int = generation,
                    ) -> None:
                        if generation != self.generation(tenant):
                            return  # the tenant was forgotten: the turn is gone
                        if await asyncio.to_thread(layer.write_passage_vectors, key, texts, vectors, routed):
                            layer.index_passage_vectors(key, vectors, routed)

                    await self.run_locked(tenant, store)
                if slot.layer.unembedded() == keys:
                    return  # none could be written (each went or changed): the next write retries
        except Exception as exc:
            _log.warning("embedding the passages of tenant %s stopped: %s", tenant, exc)

    async def _refresh(self, tenant: str) -> None:
        """Bring the tenant's rows written by an earlier version up to date, 64 turns at a time:
        the time each speaks of, and the second model's vector of those it takes
        (:meth:`EpisodicMemory.refreshed`), so no later load reads them again. Until then a
        load reads their time (58-203 us a turn) and they are searched without the route."""
        try:
            while True:
                slot = await self._tenant(tenant)
                keys = slot.layer.stale()
                if not keys:
                    return
                generation = self.generation(tenant)
                pairs = await asyncio.to_thread(slot.layer.refreshed, keys)

                async def store(
                    layer: EpisodicMemory, pairs: list[tuple[Turn, Turn]] = pairs, generation: int = generation,
                ) -> None:
                    if generation != self.generation(tenant):
                        return  # the tenant was forgotten
                    layer.index_refreshed(await asyncio.to_thread(layer.write_refreshed, pairs))

                await self.run_locked(tenant, store)
                if slot.layer.stale() == keys:
                    return  # none could be written (each went or changed): the next load retries
        except Exception as exc:
            _log.warning("updating the rows of tenant %s stopped: %s", tenant, exc)

    async def wait_for_passages(self, tenant: str) -> int:
        """Wait until background embedding of ``tenant``'s passages is done; returns the long
        turns still waiting for their vectors."""
        slot = await self._tenant(tenant)  # a tenant loading now starts what its rows left waiting
        task = self._embedding.get(tenant)
        if task is not None:
            await asyncio.shield(task)
        return len(slot.layer.unembedded())

    # -- background summaries ---------------------------------------------------

    def _schedule_summaries(self, tenant: str) -> None:
        _schedule(self._summarising, tenant, self._summarise)

    async def _summarise(self, tenant: str) -> None:
        try:
            while True:
                generation = self.generation(tenant)
                slot = await self._tenant(tenant)
                chunks = slot.layer.pending_summaries()
                if not chunks:
                    return
                for chunk in chunks:
                    async with self._summary_slots, self.on_behalf_of(tenant):
                        content = await asyncio.to_thread(self._summarizer.summarize, summary_inputs(chunk))
                    vector = (await self.embed([summary_vector_text(content, chunk[0])], tenant=tenant))[0]

                    async def store(
                        layer: EpisodicMemory,
                        chunk: list[Turn] = chunk,
                        content: EpisodeSummary = content,
                        vector: np.ndarray = vector,
                        generation: int = generation,
                    ) -> None:
                        if generation != self.generation(tenant):
                            return  # the tenant was forgotten: these turns are gone
                        pending = layer.pending_summaries(chunk[0].session_id)
                        if [t.turn_id for t in chunk] not in [[t.turn_id for t in c] for c in pending]:
                            return  # forgotten or summarised meanwhile
                        record = await asyncio.to_thread(layer.write_summary, chunk, content, vector)
                        layer.index_summary(record, vector)

                    await self.run_locked(tenant, store)
        except Exception as exc:
            _log.warning("summarising tenant %s stopped: %s", tenant, exc)


def _schedule(
    tasks: dict[str, asyncio.Task[None]], tenant: str, work: Callable[[str], Coroutine[Any, Any, None]]
) -> None:
    """Start ``work(tenant)`` unless one runs for the tenant already (in ``tasks``). It leaves
    ``tasks`` once done: a shard serving thousands of tenants keeps no task per tenant ever seen."""
    running = tasks.get(tenant)
    if running is None or running.done():
        task = tasks[tenant] = asyncio.get_running_loop().create_task(work(tenant))
        task.add_done_callback(lambda done: tasks.pop(tenant, None) if tasks.get(tenant) is done else None)
