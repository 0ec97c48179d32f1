"""Re-embedding every stored vector with the configured embedder (``strata reindex``).

Each layer says which of its rows carry a vector and the text that vector is made from
(``vector_texts`` in :mod:`strata.episodic.turns`, :mod:`strata.semantic.documents` and
:mod:`strata.procedural.memory`, the functions the write paths embed with). This module
reads a tenant's rows, embeds those texts again with :meth:`Embedder.embed`, writes the
rows back with their new vectors, and marks the tenant; once every tenant of a collection
is on the configured model, it marks the collection (:mod:`strata.store.vector_models`)
and the stack opens again.

It writes rows without the layer actors, so it must run while no stack serves the store
(``strata reindex`` refuses to run otherwise). A run that stops part-way is resumed by
running it again: tenants already marked with the configured model are skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from strata.config import StrataSettings
from strata.episodic.turns import vector_texts as episodic_texts
from strata.procedural.memory import vector_texts as procedural_texts
from strata.providers.embedder import Embedder, make_embedder
from strata.semantic.documents import vector_texts as semantic_texts
from strata.store.layout import Collections, open_store
from strata.store.records import Record, RecordStore
from strata.store.vector_models import UNMARKED, VectorMarks, VectorModel

__all__ = ["Progress", "ReindexReport", "reindex", "reindex_store"]

#: Called as vectors are made: (layer, done, total) for that layer.
Progress = Callable[[str, int, int], None]
_VectorTexts = Callable[[Sequence[Record]], list[tuple[Record, str]]]
_LAYERS: tuple[tuple[str, Callable[[Collections], str], _VectorTexts], ...] = (
    ("episodic", lambda c: c.episodic, episodic_texts),
    ("semantic", lambda c: c.semantic, semantic_texts),
    ("procedural", lambda c: c.procedural, procedural_texts),
)


@dataclass
class ReindexReport:
    """What a run did."""

    model: VectorModel
    #: Vectors made again, per layer.
    vectors: dict[str, int] = field(default_factory=dict)
    #: Tenants re-embedded (a tenant counts once per layer it has vectors in).
    tenants: int = 0
    #: Tenants left on another model, per collection (only after ``tenant=``).
    remaining: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0


def reindex(
    settings: StrataSettings, *, tenant: str | None = None, batch_size: int = 64, progress: Progress | None = None
) -> ReindexReport:
    """Re-embed the store ``settings`` name (every tenant, or one) with its configured embedder.

    Raises:
        strata.errors.StoreUnavailable: Milvus does not answer.
    """
    store, collections = open_store(settings)
    return reindex_store(
        store, collections, make_embedder(settings.embedding), VectorModel.of(settings.embedding),
        tenant=tenant, batch_size=batch_size, progress=progress,
    )


def reindex_store(
    store: RecordStore,
    collections: Collections,
    embedder: Embedder,
    model: VectorModel,
    *,
    tenant: str | None = None,
    batch_size: int = 64,
    progress: Progress | None = None,
) -> ReindexReport:
    """:func:`reindex` on an open store, with an embedder of ``model``."""
    started = time.perf_counter()
    report = ReindexReport(model)
    marks = VectorMarks(store, collections.state)
    for layer, collection_of, texts_of in _LAYERS:
        collection = collection_of(collections)
        everyone = store.tenants(collection)
        base = marks.of_collection(collection) or (UNMARKED if everyone else None)

        def on(t: str, collection: str = collection, base: VectorModel | None = base) -> VectorModel | None:
            return marks.of_tenant(t, collection) or base

        todo: list[tuple[str, list[tuple[Record, str]]]] = [
            (t, texts_of(store.scan(collection, tenant=t, with_vectors=False)))
            for t in ([tenant] if tenant is not None else everyone)
            if on(t) != model
        ]
        total, done = sum(len(pairs) for _, pairs in todo), 0
        if progress is not None:
            progress(layer, 0, total)
        for t, pairs in todo:
            for start in range(0, len(pairs), batch_size):
                batch = pairs[start : start + batch_size]
                vectors = embedder.embed([text for _, text in batch])
                store.upsert(collection, [replace(row, vector=v) for (row, _), v in zip(batch, vectors, strict=True)])
                done += len(batch)
                if progress is not None:
                    progress(layer, done, total)
            marks.mark_tenant(t, collection, model)
            report.tenants += 1
        report.vectors[layer] = done
        behind = [t for t in store.tenants(collection) if on(t) != model]
        if behind:
            report.remaining[collection] = behind
            continue
        # Every tenant is on the model: the collection is, and the tenants' own marks go.
        marks.mark_collection(collection, model)
        for t in {t for t, _ in todo} | set(everyone):
            marks.unmark_tenant(t, collection)
    report.seconds = time.perf_counter() - started
    return report
