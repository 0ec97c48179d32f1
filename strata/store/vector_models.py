"""Which embedder made the vectors of a collection, so vectors of two models are never mixed.

Vector collections are named by layer and vector size (:mod:`~strata.store.layout`), and
two models of one size (the packaged MiniLM and multilingual e5 both make 384) would share
a collection: a query embedded by one would be compared with passages embedded by the
other, and nothing would fail, only find less. So the state collection holds a *mark* per
vector collection naming the provider, model and size that made its vectors. A layer shard
and ``strata up`` check it when they open the store (:func:`check_collection`); the first
to open an empty collection writes it; only ``strata reindex`` changes it. A collection
with rows and no mark was written before marks existed, by the packaged MiniLM
(:data:`UNMARKED`).

``strata reindex --tenant`` re-embeds one tenant and marks that tenant; a tenant's mark
wins over its collection's (:func:`check_tenant`, when a shard loads the tenant), and
once no tenant is left on the collection's old model the collection is marked anew.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.config import EmbeddingSettings
from strata.errors import VectorModelMismatch
from strata.ids import SYSTEM_TENANT
from strata.providers.embedder import MINILM_DIM, MINILM_MODEL, embedding_dim, embedding_model
from strata.store.records import Record, RecordStore

__all__ = ["UNMARKED", "VectorMarks", "VectorModel", "check_collection", "check_tenant"]

_KIND = "vector_model"


@dataclass(frozen=True)
class VectorModel:
    """The embedder behind a collection's vectors."""

    provider: str
    model: str
    dim: int

    @classmethod
    def of(cls, settings: EmbeddingSettings) -> VectorModel:
        """The model ``settings`` configure (no model loaded)."""
        return cls(settings.provider, embedding_model(settings), embedding_dim(settings))

    def __str__(self) -> str:
        return f"{self.provider} ({self.model}, {self.dim} dims)"


#: The model of a collection with rows and no mark: every vector before marks was MiniLM's.
UNMARKED = VectorModel("onnx-minilm", MINILM_MODEL, MINILM_DIM)


class VectorMarks:
    """The marks in the state collection: one per vector collection (under Strata's own
    tenant), and one per tenant that ``strata reindex --tenant`` moved ahead of its collection."""

    def __init__(self, store: RecordStore, state: str) -> None:
        self._store = store
        self._state = state

    def of_collection(self, collection: str) -> VectorModel | None:
        return self._read(SYSTEM_TENANT, collection)

    def of_tenant(self, tenant: str, collection: str) -> VectorModel | None:
        return self._read(tenant, collection)

    def mark_collection(self, collection: str, model: VectorModel) -> None:
        self._write(SYSTEM_TENANT, collection, model)

    def mark_tenant(self, tenant: str, collection: str, model: VectorModel) -> None:
        self._write(tenant, collection, model)

    def unmark_tenant(self, tenant: str, collection: str) -> None:
        self._store.delete(self._state, tenant=tenant, pks=[_pk(tenant, collection)])

    def _read(self, tenant: str, collection: str) -> VectorModel | None:
        rows = self._store.get(self._state, tenant=tenant, pks=[_pk(tenant, collection)])
        if not rows:
            return None
        p = rows[0].payload
        return VectorModel(str(p["provider"]), str(p["model"]), int(p["dim"]))

    def _write(self, tenant: str, collection: str, model: VectorModel) -> None:
        payload = {"collection": collection, "provider": model.provider, "model": model.model, "dim": model.dim}
        self._store.upsert(self._state, [Record(_pk(tenant, collection), tenant, _KIND, _KIND, 0, "", payload)])


def check_collection(store: RecordStore, state: str, collection: str, configured: VectorModel) -> None:
    """Raise unless ``collection``'s vectors were made by ``configured``; mark it if unmarked.

    Raises:
        VectorModelMismatch: they were made by another model (the message says what to run).
    """
    marks = VectorMarks(store, state)
    found = marks.of_collection(collection)
    if found is None:
        if not store.tenants(collection):
            marks.mark_collection(collection, configured)  # empty: nothing to mix yet
            return
        # Read again: a process that found it empty marks it before writing its first row.
        found = marks.of_collection(collection) or UNMARKED
        if found == configured:
            marks.mark_collection(collection, found)  # the next open is one point read
    if found != configured:
        raise _mismatch(collection, found, configured)


def check_tenant(store: RecordStore, state: str, tenant: str, collection: str, configured: VectorModel) -> None:
    """Raise if ``tenant``'s vectors in ``collection`` were re-embedded apart from the
    collection's (``strata reindex --tenant``) by another model than ``configured``.

    Raises:
        VectorModelMismatch: they were.
    """
    found = VectorMarks(store, state).of_tenant(tenant, collection)
    if found is not None and found != configured:
        raise _mismatch(f"{collection} (tenant {tenant!r})", found, configured)


def _mismatch(where: str, found: VectorModel, configured: VectorModel) -> VectorModelMismatch:
    return VectorModelMismatch(
        f"vectors in {where} were made by {found}; this stack is configured for {configured}: "
        f"run `strata reindex` (or set embedding.provider back to {found.provider})",
        collection=where,
        found=found.provider,
        configured=configured.provider,
    )


def _pk(tenant: str, collection: str) -> str:
    return f"{tenant}/{_KIND}/{collection}"
