"""The semantic layer's shard actor: documents in, passages out.

Indexing a document is CPU work (cutting, extracting entities, embedding
every child) followed by one durable write. The CPU part runs outside the
tenant's lock, so searches and other tenants go on meanwhile; the write and
the in-memory swap run under it (see :meth:`LayerShard.mutate`), so a
search sees the old version of a document or the new one.

With an LLM configured, a document is indexed with the rule extractor's entities and
answered; the LLM's entities replace them in the background (:meth:`_draw_entities`),
so a slow or dead LLM never holds a write. That work lives in this actor's memory: if
the actor dies first, the document keeps the rules' entities.

A large document may be indexed in the background (``wait=False``): the
call returns at once, :meth:`get_document` reports progress, and the old
version stays searchable until the new one is committed. Such a job is
durable (:mod:`strata.store.jobs`): the document is written as a job row
before the call is answered, and the shard that owns the tenant now runs it
(each shard scans the rows when it starts and every :data:`SCAN_S`), so it
survives its actor's death, a restart and a move of its tenant; a read of the
document finds the job's row where this shard does not run it. A job still
running when its tenant is forgotten writes nothing: its write is refused
(see :meth:`LayerShard.generation`), and the forget deletes its row.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from strata.errors import NotFound, StoreUnavailable, StrataError, VersionConflict
from strata.ids import validate_id
from strata.providers.embedder import embedding_dim
from strata.providers.llm import METER, make_llm
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.entities import EntityExtractor, LLMExtractor, RuleExtractor
from strata.semantic.chunking import make_chunker
from strata.semantic.documents import DOC, DocumentInput, PreparedDocument, SemanticHit
from strata.semantic.memory import SemanticMemory
from strata.store.jobs import SCAN_S, JobRow, JobRows
from strata.store.layout import Collections
from strata.store.records import RecordStore
from strata_actors.expiry import WholeRecordExpiry
from strata_actors.residency import CALLER_EPOCH
from strata_actors.shard import LayerShard

__all__ = ["SemanticShard", "document_job_id", "hit_out"]

_log = logging.getLogger(__name__)
_EMBED_BATCH = 64
_JOB_KEEP_S = 600.0
#: Documents waiting for their LLM entities at most (each holds its passages and vectors); past
#: it a document keeps the rules' entities (an import of thousands must not queue them all).
_MAX_DRAWING = 64


@dataclass
class _Job:
    doc_id: str
    status: str = "indexing"  # indexing | ready | failed
    stage: str = "chunking"  # chunking | embedding | writing | done
    done: int = 0
    total: int = 0
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    #: The job's row, for a background job (durable).
    row: JobRow | None = None

    def view(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "progress": {"stage": self.stage, "children_done": self.done, "children_total": self.total},
            "error": self.error,
        }

    @classmethod
    def of_row(cls, row: JobRow) -> _Job:
        """The job as its row says (no progress: the shard that runs it is elsewhere)."""
        status = {"done": "ready", "failed": "failed"}.get(row.status, "indexing")
        return cls(str(row.args.get("doc_id", "")), status=status, error=row.error, row=row)


def document_job_id(tenant: str, doc_id: str) -> str:
    """The id of the background job indexing ``doc_id``: one at a time per document."""
    return "index-" + hashlib.blake2b(f"{tenant}\0{doc_id}".encode(), digest_size=12).hexdigest()


def hit_out(hit: SemanticHit) -> dict[str, Any]:
    """A semantic hit as a search answer carries it to the caller (and the bench's floor builds it)."""
    return {
        "layer": "semantic",
        "kind": "passage",
        "id": hit.id,
        "text": hit.text,
        "score": hit.score,
        "relevance": hit.relevance,
        "ranks": hit.ranks,
        "source": {"doc_id": hit.doc_id, "title": hit.title, "start": hit.start, "end": hit.end},
        "matched": hit.matched,
    }


class SemanticShard(WholeRecordExpiry, LayerShard[SemanticMemory]):
    layer_name = "semantic"
    vectors_in = "semantic"
    batched_reads = frozenset({"search"})
    expiring_kinds = (DOC,)

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        super().__init__(settings, shard)
        self._counter = TiktokenCounter(self.settings.working.encoding)
        self.llm = make_llm(self.settings.llm)
        #: Entities while indexing: always the rules (fast, local); the LLM's come after.
        self._extractor: EntityExtractor = RuleExtractor()
        self._llm_extractor = LLMExtractor(self.llm) if self.llm is not None else None
        #: Documents whose LLM entities are being drawn (held so none is collected mid-run).
        self._drawing: set[asyncio.Task[None]] = set()
        #: One document's entities at a time: the others wait here, on the event loop, not in
        #: worker threads parked on the LLM's slots (the actor's store calls need those threads).
        self._one_drawing = asyncio.Lock()
        self._jobs: dict[tuple[str, str], _Job] = {}
        #: Indexing tasks running, every tenant's: held here so none is collected mid-run (the
        #: event loop keeps only weak references), and counted by :meth:`ping`.
        self._indexing: set[asyncio.Task[dict[str, Any]]] = set()
        self._jobs_loop: asyncio.Task[None] | None = None

    async def _backend(self) -> Any:
        backend = await super()._backend()
        if self._jobs_loop is None:
            self._jobs_loop = asyncio.get_running_loop().create_task(self._adopt_jobs())
        return backend

    async def ping(self) -> dict[str, Any]:
        """:meth:`LayerShard.ping`, and how many documents this shard is indexing now (every tenant's)."""
        return {**await super().ping(), "indexing": len(self._indexing)}

    def make_layer(self, tenant: str, store: RecordStore, collections: Collections) -> SemanticMemory:
        chunker = make_chunker(
            self.settings.semantic.chunking_for(tenant), self._counter,
            embed=lambda texts: self.embed_now(texts, tenant=tenant),
        )
        return SemanticMemory(
            tenant,
            store=store,
            collection=collections.semantic,
            settings=self.settings.semantic,
            chunker=chunker,
            extractor=self._extractor,
            ttl=self.settings.ttl,
        )

    def tenant_rows(self, collections: Collections) -> tuple[str, list[str] | None]:
        return collections.semantic, None

    async def forget_derived(self, tenant: str) -> int:
        """The tenant's indexing jobs: one still running is refused at the lock, none is
        reported any more, and the background jobs' rows (their documents) go."""
        for key in [key for key in self._jobs if key[0] == tenant]:
            del self._jobs[key]
        return len(await asyncio.to_thread((await self._job_rows()).drop_tenant, tenant))

    def load_layer(self, layer: SemanticMemory) -> None:
        layer.load()


    # -- writes ---------------------------------------------------------------

    async def index_document(
        self,
        tenant: str,
        doc: dict[str, Any],
        *,
        expected_version: int | None = None,
        wait: bool = True,
    ) -> dict[str, Any]:
        """Index (or re-index) a document: fields of :class:`DocumentInput`.

        Returns the document and its new version when ``wait``; otherwise at
        once, with ``status: indexing`` (poll :meth:`get_document`).

        Raises:
            VersionConflict: ``expected_version`` is not the document's version,
                or the document is being indexed already.
        """
        doc_id = doc.get("doc_id") or f"doc-{uuid.uuid4().hex[:12]}"
        validate_id(doc_id, field="doc_id")
        generation = self.generation(tenant)  # before the document is prepared from the tenant's state
        await self._tenant(tenant)
        # Refused now, not after its work (nor kept as a job to write into the emptied tenant later).
        await self.refuse_if_forgetting(tenant, doc_id)
        current = await self.version(tenant, doc_id)
        if expected_version is not None and expected_version != current:
            raise VersionConflict(
                f"document {doc_id!r} is at version {current}, not {expected_version}: read it again and retry",
                current_version=current,
                layer=self.layer_name,
            )
        self._forget_old_jobs()
        running = self._jobs.get((tenant, doc_id))
        if running is not None and running.status == "indexing":
            raise VersionConflict(
                f"document {doc_id!r} is being indexed already: wait until GET shows it ready",
                current_version=current,
                layer=self.layer_name,
            )
        job = self._jobs[(tenant, doc_id)] = _Job(doc_id)
        if not wait:
            try:
                job.row = await self._keep_job(tenant, doc_id, doc, expected_version, current)
            except BaseException:
                del self._jobs[(tenant, doc_id)]
                raise
        task = self._start(tenant, DocumentInput(**{**doc, "doc_id": doc_id}), expected_version, job, generation)
        if wait:
            return await asyncio.shield(task)
        return {"doc_id": doc_id, "version": current, **job.view()}

    def _start(
        self, tenant: str, doc: DocumentInput, expected_version: int | None, job: _Job, generation: int
    ) -> asyncio.Task[dict[str, Any]]:
        task = asyncio.get_running_loop().create_task(self._run(tenant, doc, expected_version, job, generation))
        self._indexing.add(task)
        task.add_done_callback(self._indexing.discard)
        if job.row is not None:
            task.add_done_callback(lambda t: t.exception())  # retrieved: a failure is on the job
        return task

    async def _run(
        self, tenant: str, doc: DocumentInput, expected_version: int | None, job: _Job, generation: int
    ) -> dict[str, Any]:
        try:
            slot = await self._tenant(tenant)
            now = datetime.now(UTC)
            prepared = await asyncio.to_thread(slot.layer.prepare, doc, now=now)
            texts = prepared.embed_texts()
            job.stage, job.total = "embedding", len(texts)
            batches = []
            for i in range(0, len(texts), _EMBED_BATCH):
                batches.append(await self.embed(texts[i : i + _EMBED_BATCH], tenant=tenant))
                job.done += len(texts[i : i + _EMBED_BATCH])
            dim = embedding_dim(self.settings.embedding)
            vectors = np.vstack(batches) if batches else np.zeros((0, dim), np.float32)
            job.stage = "writing"
            document, version = await self.mutate(
                tenant,
                prepared.document.doc_id,
                expected_version,
                lambda layer: layer.write(prepared, vectors),
                lambda layer, _: layer.index(prepared, vectors),
                generation=generation,
            )
            job.status, job.stage = "ready", "done"
            await self._end_job(tenant, job, generation, result={"version": version})
            if self._llm_extractor is not None and len(self._drawing) >= _MAX_DRAWING:
                METER.result("entities", "busy")  # it keeps the rules' entities
            elif self._llm_extractor is not None:
                task = asyncio.get_running_loop().create_task(
                    self._draw_entities(tenant, prepared, vectors, self._llm_extractor)
                )
                self._drawing.add(task)
                task.add_done_callback(self._drawing.discard)
            return {**document.to_dict(), "version": version, **job.view()}
        except StoreUnavailable:
            # The tenant moved (its new owner takes the job up from its row), or the store did
            # not answer (the row stays pending: the next scan takes the job up again).
            if self._jobs.get((tenant, job.doc_id)) is job:
                del self._jobs[(tenant, job.doc_id)]
            raise
        except BaseException as exc:
            job.status = "failed"
            job.error = exc.message if isinstance(exc, StrataError) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, Exception):
                with contextlib.suppress(StrataError):  # the row stays pending: it runs again
                    await self._end_job(tenant, job, generation)  # the same input fails the same way
            raise
        finally:
            job.finished = time.monotonic()

    # -- background jobs, durable ------------------------------------------------------

    async def _job_rows(self) -> JobRows:
        store, collections, _ = await self._backend()
        return JobRows(store, collections.state, self.layer_name)

    async def _keep_job(
        self, tenant: str, doc_id: str, doc: dict[str, Any], expected_version: int | None, current: int
    ) -> JobRow:
        """Write the background job's row, with the document, before the call is answered.

        Raises:
            VersionConflict: a job of another life of this shard, or of another shard, is
                indexing the document (its row is not ended).
        """
        table = await self._job_rows()
        job_id = document_job_id(tenant, doc_id)
        earlier = await asyncio.to_thread(table.get, job_id)
        if earlier is not None and not earlier.ended:
            raise VersionConflict(
                f"document {doc_id!r} is being indexed already: wait until GET shows it ready",
                current_version=current,
                layer=self.layer_name,
            )
        args = {k: v for k, v in doc.items() if k != "text"}
        row = JobRow(job_id, tenant, "document", {**args, "doc_id": doc_id, "expected_version": expected_version})
        return await asyncio.to_thread(table.put, row, str(doc.get("text", "")))

    async def _end_job(
        self, tenant: str, job: _Job, generation: int, *, result: dict[str, Any] | None = None
    ) -> None:
        """Mark a background job's row ready or failed (not after a forget: it deleted the row)."""
        if job.row is None or generation != self.generation(tenant):
            return
        ended = job.row.end("done" if job.status == "ready" else "failed", error=job.error, result=result)
        job.row = await asyncio.to_thread((await self._job_rows()).put, ended)

    async def _adopt_jobs(self) -> None:
        """Take up the background jobs of the tenants this shard owns that it does not run
        (its own after a restart, a dead or retired shard's, a moved tenant's); runs for the
        life of the actor."""
        CALLER_EPOCH.set(None)  # a loop of the shard's own, not of a call
        while True:
            try:
                await self._adopt_once()
            except StrataError as exc:
                _log.warning("cannot read indexing jobs now: %s", exc.message)
            except Exception:
                _log.exception("taking up indexing jobs failed")
            await asyncio.sleep(SCAN_S)

    async def _adopt_once(self) -> None:
        table = await self._job_rows()
        running = {j.row.job_id for j in self._jobs.values() if j.row is not None and j.status == "indexing"}
        generations = dict(self._generations)  # a forget while the rows are read deletes some of them
        rows = await asyncio.to_thread(table.sweep, owns=self._owns, running=running, keep_s=_JOB_KEEP_S)
        for row in rows:
            tenant, doc_id = row.tenant, str(row.args.get("doc_id", ""))
            generation = self.generation(tenant)
            held = self._jobs.get((tenant, doc_id))
            forgetting = generation % 2 == 1 or generation != generations.get(tenant, 0)
            if forgetting or (held is not None and held.status == "indexing"):
                continue
            try:
                text = await asyncio.to_thread(table.text, row)
            except LookupError as exc:  # a forget deleted it meanwhile
                _log.warning("indexing job %s cannot be taken up: %s", row.job_id, exc)
                continue
            args = {k: v for k, v in row.args.items() if k != "expected_version"}
            expected = row.args.get("expected_version")
            if expected is not None and await self._written_already(tenant, doc_id, text, int(expected)):
                expected = None  # its write landed before its row said so: writing it again is the same
            job = self._jobs[(tenant, doc_id)] = _Job(doc_id, row=row)
            self._start(tenant, DocumentInput(**{**args, "text": text}), expected, job, generation)
            _log.info("semantic shard %d took up indexing job %s", self.shard, row.job_id)

    async def _written_already(self, tenant: str, doc_id: str, text: str, expected: int) -> bool:
        """Whether a job's document is stored already past the version it expected (an earlier
        run wrote it and stopped before its row said ready)."""
        slot = await self._tenant(tenant)
        if await self.version(tenant, doc_id) == expected:
            return False
        with contextlib.suppress(NotFound):
            return bool(slot.layer.text(doc_id) == text)
        return False

    async def _draw_entities(
        self, tenant: str, prepared: PreparedDocument, vectors: np.ndarray, extractor: LLMExtractor
    ) -> None:
        """Replace the rules' entities of an indexed document with the LLM's (it falls back to
        the rules per passage by itself). Skipped when the document changed or went meanwhile."""
        generation = self.generation(tenant)
        try:
            async with self._one_drawing, self.on_behalf_of(tenant):
                if generation != self.generation(tenant):
                    return  # forgotten while it waited: not worth an LLM call
                texts = [chunk.text for chunk in prepared.tree.children]
                extractions = tuple([await asyncio.to_thread(extractor.extract, text) for text in texts])
            if extractions == prepared.extractions:
                return
            drawn = replace(prepared, extractions=extractions)

            async def swap(layer: SemanticMemory) -> None:
                if generation != self.generation(tenant):
                    return  # forgotten meanwhile: nothing of it may be written back
                if await asyncio.to_thread(layer.write_entities, drawn, vectors):
                    layer.index_entities(drawn)

            await self.run_locked(tenant, swap)
        except Exception as exc:  # the document stands with the rules' entities
            _log.warning(
                "the LLM's entities of a document of tenant %s were not kept: %s",
                tenant, exc.message if isinstance(exc, StrataError) else type(exc).__name__,
            )

    def _forget_old_jobs(self) -> None:
        cutoff = time.monotonic() - _JOB_KEEP_S
        for key, job in list(self._jobs.items()):
            if job.finished is not None and job.finished < cutoff:
                del self._jobs[key]

    async def delete_document(
        self, tenant: str, doc_id: str, *, expected_version: int | None = None
    ) -> dict[str, Any]:
        """Remove the document from every store and index; returns rows removed and the new version."""
        slot = await self._tenant(tenant)
        slot.layer.document(doc_id)  # NotFound before claiming a version
        removed, version = await self.remove(
            tenant, doc_id, expected_version, lambda layer: layer.delete(doc_id), lambda layer: layer.drop(doc_id)
        )
        return {"doc_id": doc_id, "removed": removed, "version": version}

    # -- reads ----------------------------------------------------------------

    async def get_document(self, tenant: str, doc_id: str, *, with_text: bool = False) -> dict[str, Any]:
        """The document's metadata and version (and text); while a background job
        runs, its status and progress.

        Raises:
            NotFound: no such document and no job indexing it.
        """
        validate_id(doc_id, field="doc_id")
        slot = await self._tenant(tenant)
        job = self._jobs.get((tenant, doc_id))
        version = await self.version(tenant, doc_id)
        try:
            document = slot.layer.document(doc_id)
        except NotFound:
            if job is None:
                row = await asyncio.to_thread((await self._job_rows()).get, document_job_id(tenant, doc_id))
                job = None if row is None or row.tenant != tenant else _Job.of_row(row)
            if job is None or job.status == "ready":
                raise
            return {"doc_id": doc_id, "version": version, **job.view()}
        out = {**document.to_dict(), "version": version, "status": "ready", "progress": None, "error": None}
        if job is not None and job.status != "ready":
            out.update(job.view())  # a newer version is being indexed, or failed
        if with_text:
            out["text"] = slot.layer.text(doc_id)
        return out

    async def list_documents(self, tenant: str, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
        slot = await self._tenant(tenant)
        page, more = slot.layer.documents(after=after, limit=limit)
        versions = await self.versions(tenant, [d.doc_id for d in page])
        out = [{**d.to_dict(), "version": versions[d.doc_id], "status": "ready"} for d in page]
        return {
            "documents": out,
            "total": len(slot.layer),
            "next_after": page[-1].doc_id if more else None,
        }

    async def search(
        self,
        tenant: str,
        *,
        query: str | None = None,
        vector: np.ndarray | None = None,
        top_k: int = 8,
        weights: dict[str, float] | None = None,
        min_cosine: float | None = None,
        doc_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Passages for ``query`` (BM25 and graph paths) and ``vector`` (its embedding,
        made here when not given)."""
        if vector is None and query is None:
            raise ValueError("give query or vector")
        if vector is None:
            vector = (await self.embed_query([query or ""], tenant=tenant))[0]
        slot = await self._tenant(tenant)
        hits = slot.layer.search(
            np.asarray(vector, dtype=np.float32),
            query,
            top_k=top_k,
            weights=weights,
            min_cosine=min_cosine,
            doc_ids=doc_ids,
        )
        return {"hits": [hit_out(h) for h in hits]}

    async def entity(self, tenant: str, name: str) -> dict[str, Any]:
        """What the graph knows of an entity: its aliases, relations and mentions."""
        slot = await self._tenant(tenant)
        found = slot.layer.entity(name)
        if found is None:
            raise NotFound(f"no entity named {name[:80]!r} in this tenant's documents")
        return found

    async def stats(self, tenant: str) -> dict[str, int]:
        slot = await self._tenant(tenant)
        return slot.layer.stats()

