"""Semantic memory of one tenant: documents, cut into parents and children,
found by three paths fused with weighted reciprocal rank fusion.

Children (small chunks) are what is matched; their parents (large chunks)
are what is returned, deduplicated, each with its source span. Three paths
rank children: dense (cosine of the query's embedding), lexical (BM25 over
:func:`strata.retrieval.lexical.lexical_terms`, for exact terms such as
``ERR_CONN_RESET`` and for Chinese), and graph (entities the query names,
expanded over their relations, see :mod:`strata.retrieval.graph`).

Durable rows, one Milvus collection, the document id as the row's session:

* ``doc``: one per document, the commit point. It names the live
  *generation* of the document's chunks.
* ``parent`` / ``child``: the chunks of one generation; a child carries its
  embedding and its extracted entities, so the graph is rebuilt from the
  rows that mention them and disappears with them.

Re-indexing a document writes the new generation's chunks, then the doc
row, then deletes the old generation. Chunks of a generation no doc row
names (a crash mid-write) are ignored at load and removed. The in-memory
indexes change in one step on the owner's event loop, so a search sees the
old version or the new one, never a mix.

The documents, passages and hits, and how rows are read back, are in
:mod:`strata.semantic.documents`; how a text is cut, in :mod:`strata.semantic.chunking`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import numpy as np

from strata.clock import to_ms
from strata.config import SemanticSettings, TTLSettings
from strata.errors import InvalidInput, NotFound
from strata.ids import validate_id
from strata.layers import RETRIEVAL_PATHS
from strata.limits import RECORD_TEXT_BYTES_MAX
from strata.paging import SortedIds
from strata.retrieval.entities import EntityExtractor, Extraction
from strata.retrieval.graph import KnowledgeGraph
from strata.retrieval.lexical import LexicalIndex, language_weights, rrf_fuse
from strata.retrieval.relevance import combined, dense_relevance
from strata.retrieval.vectors import VectorIndex, best
from strata.semantic.chunking import Chunker
from strata.semantic.documents import (
    CHILD,
    DOC,
    PARENT,
    Child,
    Document,
    DocumentInput,
    Passage,
    PreparedDocument,
    SemanticHit,
    child_from,
    passage_from,
    public_child_id,
    public_id,
    titled,
)
from strata.store.records import Record, RecordStore
from strata.store.ttl import Expiries, expires_ms

__all__ = ["SemanticMemory"]

log = logging.getLogger(__name__)

_WRITE_BATCH = 256


class SemanticMemory:
    """All semantic state of one tenant, persisted through a :class:`RecordStore`."""

    def __init__(
        self,
        tenant: str,
        *,
        store: RecordStore,
        collection: str,
        settings: SemanticSettings,
        chunker: Chunker,
        extractor: EntityExtractor,
        ttl: TTLSettings | None = None,
    ) -> None:
        self.tenant = validate_id(tenant, field="tenant")
        self._ttl = ttl or TTLSettings()
        #: Deadlines of the documents that expire, by doc id.
        self.expiries: Expiries[str] = Expiries()
        self._store = store
        self._collection = collection
        self._settings = settings
        self._weights = settings.weights_for(tenant)
        self._chunker = chunker
        self._extractor = extractor
        self._docs: dict[str, Document] = {}
        self._doc_ids = SortedIds()  # the documents' ids, for pages of them
        self._parents: dict[str, Passage] = {}
        self._children: dict[str, Child] = {}
        self._doc_chunks: dict[str, tuple[list[str], list[str]]] = {}  # doc -> (parent pks, child pks)
        self._dense = VectorIndex()
        self._lexical = LexicalIndex(per_line=True)  # chunks are long: a recurring term weighs more
        self._graph = KnowledgeGraph()

    # -- loading ------------------------------------------------------------

    def load(self) -> None:
        """Rebuild the in-memory indexes from the durable rows; drop orphaned chunks."""
        # Documents and parents carry no vector: read them without, children with. The two
        # scans run at once: on a Milvus server each is a strong read that waits for its next
        # time tick (~200 ms by default).
        with ThreadPoolExecutor(max_workers=1) as pool:
            texts = pool.submit(
                self._store.scan, self._collection, tenant=self.tenant, kinds=[DOC, PARENT], with_vectors=False
            )
            children = self._store.scan(self._collection, tenant=self.tenant, kinds=[CHILD])
            rows = texts.result() + children
        docs = {row.session: Document.from_record(row) for row in rows if row.kind == DOC}
        live: dict[str, tuple[list[Record], list[Record]]] = {d: ([], []) for d in docs}
        orphans: list[str] = []
        for row in rows:
            if row.kind == DOC:
                continue
            doc = docs.get(row.session)
            if doc is None or row.payload.get("gen") != doc.generation:
                orphans.append(row.pk)
            elif row.kind == PARENT:
                live[row.session][0].append(row)
            elif row.kind == CHILD:
                live[row.session][1].append(row)
        for doc_id, doc in docs.items():
            parents, children = live[doc_id]
            self._add_to_memory(doc, parents + children)
        if orphans:
            try:
                self._store.delete(self._collection, tenant=self.tenant, pks=orphans)
            except Exception as exc:
                log.warning("could not remove %d orphaned chunks of tenant %s: %s", len(orphans), self.tenant, exc)

    # -- writing ------------------------------------------------------------

    def prepare(self, doc: DocumentInput, *, now: datetime) -> PreparedDocument:
        """Validate, cut and extract entities (CPU only, nothing written).

        Raises:
            InvalidInput: an empty or over-long text, a bad id, a passage too big to store.
        """
        doc_id = doc.doc_id or f"doc-{uuid.uuid4().hex[:12]}"
        validate_id(doc_id, field="doc_id")
        if not doc.text.strip():
            raise InvalidInput("document text is empty", field="text")
        limit = self._settings.max_document_chars
        if len(doc.text) > limit:
            raise InvalidInput(f"document text is {len(doc.text)} characters; the limit is {limit}", field="text")
        tree = self._chunker.chunk(doc.text)
        for chunk in tree.parents:
            if len(chunk.text.encode()) > RECORD_TEXT_BYTES_MAX:
                raise InvalidInput(
                    f"a passage of {len(chunk.text)} characters at offset {chunk.start} is over "
                    f"{RECORD_TEXT_BYTES_MAX} bytes: lower chunking.parent_tokens",
                    field="text",
                )
        extractions = tuple(self._extractor.extract(c.text) for c in tree.children)
        old = self._docs.get(doc_id)
        document = Document(
            doc_id=doc_id,
            title=doc.title,
            metadata=dict(doc.metadata),
            generation=uuid.uuid4().hex[:12],
            strategy=self._chunker.name,
            chars=len(doc.text),
            parents=len(tree.parents),
            children=len(tree.children),
            created_at=old.created_at if old else now,
            updated_at=now,
            expires_ms=expires_ms(self._ttl.seconds(self.tenant, "semantic", doc.ttl_s), now=now),
        )
        return PreparedDocument(document, tree, extractions)

    def write(self, prepared: PreparedDocument, vectors: np.ndarray) -> None:
        """Durably: the new generation's chunks, then the doc row (commit), then
        the old generation's chunks go. Blocking I/O; no in-memory change."""
        tree, doc = prepared.tree, prepared.document
        if len(vectors) != len(tree.children):
            raise ValueError("one vector per child")
        rows = self._chunk_rows(prepared, vectors)
        for i in range(0, len(rows), _WRITE_BATCH):
            self._store.upsert(self._collection, rows[i : i + _WRITE_BATCH])
        commit = Record(
            pk=self._pk(doc.doc_id, DOC),
            tenant=self.tenant,
            session=doc.doc_id,
            kind=DOC,
            ts_ms=to_ms(doc.updated_at),
            text=doc.title or "",
            payload=doc.to_payload(),
        )
        self._store.upsert(self._collection, [commit])
        previous = self._doc_chunks.get(doc.doc_id)
        if previous:
            stale = previous[0] + previous[1]
            try:
                for i in range(0, len(stale), 1000):
                    self._store.delete(self._collection, tenant=self.tenant, pks=stale[i : i + 1000])
            except Exception as exc:
                log.warning("old chunks of %s stay until the next load: %s", doc.doc_id, exc)
        for row in rows:  # segmented here, in the writer's thread, not where :meth:`index` runs
            if row.kind == CHILD:
                self._lexical.precount(row.pk, titled(doc.title, row.text))

    def index(self, prepared: PreparedDocument, vectors: np.ndarray) -> Document:
        """Swap the document's in-memory state to the new generation, in one step.
        It is built from the rows :meth:`write` stores, as :meth:`load` builds it."""
        doc = prepared.document
        rows = self._chunk_rows(prepared, vectors)
        self.drop(doc.doc_id)
        self._add_to_memory(doc, rows)
        return doc

    def write_entities(self, prepared: PreparedDocument, vectors: np.ndarray) -> bool:
        """Durably replace the entities of the passages of ``prepared``'s generation with its
        ``extractions`` (drawn later, by the LLM); False, writing nothing, when the document
        is gone or at another generation by now. Blocking I/O; no in-memory change."""
        doc = self._docs.get(prepared.document.doc_id)
        if doc is None or doc.generation != prepared.document.generation:
            return False
        rows = [row for row in self._chunk_rows(prepared, vectors) if row.kind == CHILD]
        for i in range(0, len(rows), _WRITE_BATCH):
            self._store.upsert(self._collection, rows[i : i + _WRITE_BATCH])
        return True

    def index_entities(self, prepared: PreparedDocument) -> None:
        """Swap the in-memory graph edges of ``prepared``'s passages to its ``extractions``
        (after :meth:`write_entities` returned True)."""
        doc = prepared.document
        if doc.doc_id not in self._docs or self._docs[doc.doc_id].generation != doc.generation:
            return
        pks = [self._pk(doc.doc_id, doc.generation, f"c{n}") for n in range(len(prepared.extractions))]
        self._graph.remove(pks)
        for pk, extraction in zip(pks, prepared.extractions, strict=True):
            self._graph.add(pk, extraction)

    def delete(self, doc_id: str) -> int:
        """Durably remove the document and every row that came from it; returns the rows removed.

        Raises:
            NotFound: no such document.
        """
        self.document(doc_id)
        return self._store.delete(self._collection, tenant=self.tenant, session=doc_id)

    def drop(self, doc_id: str) -> None:
        """Forget the document in memory: passages, vectors, BM25 entries, graph edges."""
        chunks = self._doc_chunks.pop(doc_id, None)
        self._docs.pop(doc_id, None)
        self._doc_ids.discard(doc_id)
        self.expiries.drop([doc_id])
        if chunks is None:
            return
        parents, children = chunks
        for pk in parents:
            self._parents.pop(pk, None)
        for pk in children:
            self._children.pop(pk, None)
        self._dense.remove_group(doc_id)
        self._lexical.remove(children)
        self._graph.remove(children)

    # -- reading ------------------------------------------------------------

    def document(self, doc_id: str) -> Document:
        validate_id(doc_id, field="doc_id")
        doc = self._docs.get(doc_id)
        if doc is None:
            raise NotFound(f"document {doc_id!r} does not exist")
        return doc

    def documents(self, *, after: str | None = None, limit: int = 50) -> tuple[list[Document], bool]:
        """Documents by id, the ``limit`` first after ``after``, and whether more follow."""
        ids, more = self._doc_ids.page(after=after, limit=limit)
        return [self._docs[d] for d in ids], more

    def __len__(self) -> int:
        return len(self._docs)

    def text(self, doc_id: str) -> str:
        """The document's text, stitched from its parents (whose spans cover it)."""
        self.document(doc_id)
        parts: list[str] = []
        cursor = 0
        for pk in self._doc_chunks[doc_id][0]:
            passage = self._parents[pk]
            if passage.end <= cursor:
                continue
            if passage.start > cursor:  # whitespace the chunker left between passages
                parts.append(" " * (passage.start - cursor))
                cursor = passage.start
            parts.append(passage.text[cursor - passage.start :])
            cursor = passage.end
        return "".join(parts)

    def stats(self) -> dict[str, int]:
        return {
            "documents": len(self._docs),
            "parents": len(self._parents),
            "children": len(self._children),
            "entities": len(self._graph),
        }

    def entity(self, name: str) -> dict[str, Any] | None:
        return self._graph.entity(name)

    def search(
        self,
        vector: np.ndarray | None,
        query_text: str | None,
        *,
        top_k: int = 8,
        weights: Mapping[str, float] | None = None,
        min_cosine: float | None = None,
        doc_ids: Sequence[str] | None = None,
    ) -> list[SemanticHit]:
        """Parent passages best first, found through their children.

        Args:
            weights: per path (``dense``, ``lexical``, ``graph``); a path weighted 0
                or left out is not run, so ``{"dense": 1}`` is plain vector top-k.
                None: the tenant's configured weights, with the dense weight moved
                toward ``fusion_dense_weight_cjk`` for a CJK query.
            min_cosine: children below this cosine similarity are not ranked by the
                dense path (a plain cosine threshold, for comparison).
            doc_ids: only passages of these documents.
        """
        if weights is None:  # the tenant's configured fusion, shifted away from dense for CJK queries
            weights = language_weights(
                self._weights, query_text or "", dense_cjk=self._settings.dense_weight_cjk
            )
        weights = dict(weights)
        unknown = set(weights) - set(RETRIEVAL_PATHS)
        if unknown:
            raise InvalidInput(
                f"unknown retrieval path(s) {sorted(unknown)}; known: {', '.join(RETRIEVAL_PATHS)}", field="weights"
            )
        if not self._children:
            return []
        wanted = set(doc_ids) if doc_ids is not None else None

        def keep(pk: str) -> bool:
            return wanted is None or self._children[pk].doc_id in wanted

        depth = max(self._settings.candidates, top_k * 4)
        rankings: dict[str, list[str]] = {}
        cosines = self._dense.scores(np.asarray(vector, dtype=np.float32)) if vector is not None else None
        if weights.get("dense", 0) > 0 and vector is not None:
            found = best(self._dense, np.asarray(vector, dtype=np.float32), depth, keep if wanted is not None else None,
                         scores=cosines)
            rankings["dense"] = [pk for pk, score in found if min_cosine is None or score >= min_cosine]
        if weights.get("lexical", 0) > 0 and query_text:
            rankings["lexical"] = self._lexical.top(query_text, depth, keep if wanted is not None else None)
        if weights.get("graph", 0) > 0 and query_text:
            ranked = self._graph.rank(query_text, hops=self._settings.graph_hops, limit=depth * 2)
            rankings["graph"] = [pk for pk, _ in ranked if pk in self._children and keep(pk)][:depth]
        fused = rrf_fuse(rankings, weights, k=self._settings.rrf_k)
        hits: dict[str, SemanticHit] = {}
        matched: dict[str, list[str]] = {}  # parent -> its children that matched
        for pk, score, ranks in fused:
            child = self._children[pk]
            hit = hits.get(child.parent)
            if hit is None:
                if len(hits) >= top_k:
                    continue
                passage = self._parents[child.parent]
                hit = hits[child.parent] = SemanticHit(
                    id=public_id(passage),
                    doc_id=passage.doc_id,
                    title=self._docs[passage.doc_id].title,
                    text=passage.text,
                    start=passage.start,
                    end=passage.end,
                    score=score,
                )
            for path, rank in ranks.items():
                hit.ranks[path] = min(rank, hit.ranks.get(path, rank))
            hit.matched.append({"id": public_child_id(pk), "start": child.start, "end": child.end, "score": score})
            matched.setdefault(child.parent, []).append(pk)
        self._relevance(hits, matched, cosines, query_text if weights.get("lexical", 0) > 0 else None)
        return list(hits.values())

    def _relevance(
        self,
        hits: Mapping[str, SemanticHit],
        matched: Mapping[str, list[str]],
        cosines: np.ndarray | None,
        query_text: str | None,
    ) -> None:
        """Each passage's relevance: its best matched child's (:mod:`strata.retrieval.relevance`)."""
        matched_pks = [pk for pks in matched.values() for pk in pks]
        words = self._lexical.relevance(query_text, matched_pks) if query_text else {}
        span = self._settings.cosine_span
        for parent, hit in hits.items():
            for pk in matched.get(parent, ()):
                row = self._dense.position(pk)
                dense = float(dense_relevance(cosines[row], span)) if cosines is not None and row is not None else None
                hit.relevance = max(hit.relevance, combined(dense, words.get(pk)))

    # -- helpers ------------------------------------------------------------

    def _pk(self, *parts: str) -> str:
        return "/".join((self.tenant, *parts))

    def _chunk_rows(self, prepared: PreparedDocument, vectors: np.ndarray) -> list[Record]:
        """The durable rows of a prepared document's chunks: its parents, then its children."""
        tree, doc = prepared.tree, prepared.document
        ts = to_ms(doc.updated_at)
        parent_pks = [self._pk(doc.doc_id, doc.generation, f"p{n}") for n in range(len(tree.parents))]
        rows: list[Record] = [
            Record(
                pk=pk,
                tenant=self.tenant,
                session=doc.doc_id,
                kind=PARENT,
                ts_ms=ts,
                text=chunk.text,
                payload={"gen": doc.generation, "n": n, "start": chunk.start, "end": chunk.end},
            )
            for n, (pk, chunk) in enumerate(zip(parent_pks, tree.parents, strict=True))
        ]
        rows += [
            Record(
                pk=self._pk(doc.doc_id, doc.generation, f"c{n}"),
                tenant=self.tenant,
                session=doc.doc_id,
                kind=CHILD,
                ts_ms=ts,
                text=chunk.text,
                payload={
                    "gen": doc.generation,
                    "n": n,
                    "start": chunk.start,
                    "end": chunk.end,
                    "parent": parent_pks[tree.parent_of[n]],
                    "graph": extraction.to_dict(),
                },
                vector=np.asarray(vector, dtype=np.float32),
            )
            for n, (chunk, extraction, vector) in enumerate(
                zip(tree.children, prepared.extractions, vectors, strict=True)
            )
        ]
        return rows

    def _add_to_memory(self, doc: Document, rows: Sequence[Record]) -> None:
        """Index a document's chunk rows (of its live generation) in memory."""
        in_order = sorted(rows, key=lambda r: (r.kind != PARENT, int(r.payload["n"])))
        passages = [passage_from(r) for r in in_order if r.kind == PARENT]
        children = [r for r in in_order if r.kind == CHILD]
        self._docs[doc.doc_id] = doc
        self._doc_ids.add(doc.doc_id)
        self.expiries.set(doc.doc_id, doc.expires_ms)
        for passage in passages:
            self._parents[passage.pk] = passage
        for row in children:
            child = child_from(row)
            self._children[child.pk] = child
            if row.vector is not None:
                self._dense.add(child.pk, row.vector, doc.doc_id)
            self._lexical.add(child.pk, titled(doc.title, row.text))
            self._graph.add(child.pk, Extraction.from_dict(row.payload.get("graph") or {}))
        self._doc_chunks[doc.doc_id] = ([p.pk for p in passages], [r.pk for r in children])
