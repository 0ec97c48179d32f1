"""Which collections exist, and opening the configured record store."""

from __future__ import annotations

from dataclasses import dataclass

from strata.config import StrataSettings
from strata.providers.embedder import embedding_dim
from strata.store.milvus import MilvusRecordStore
from strata.store.milvus_lite import TOKEN_FILE
from strata.store.records import RecordStore
from strata.store.versions import STATE_DIM

__all__ = ["Collections", "open_store", "store_token"]


@dataclass(frozen=True)
class Collections:
    """Collection names; the embedded vector size is part of a vector collection's name,
    so switching embedders never mixes vectors of two models."""

    episodic: str
    semantic: str
    procedural: str
    state: str
    #: API keys, apart from the busy state collection: milvus-lite walks every unflushed row
    #: of a collection on each query, and a key is looked up on every request.
    keys: str
    dim: int

    @classmethod
    def for_settings(cls, settings: StrataSettings) -> Collections:
        prefix = settings.milvus.collection_prefix
        dim = embedding_dim(settings.embedding)
        return cls(
            episodic=f"{prefix}_episodic_d{dim}",
            semantic=f"{prefix}_semantic_d{dim}",
            procedural=f"{prefix}_procedural_d{dim}",
            state=f"{prefix}_state",
            keys=f"{prefix}_keys",
            dim=dim,
        )


def store_token(settings: StrataSettings) -> str:
    """The token sent to Milvus: ``milvus.token``, else, for the embedded store, the one
    ``strata up`` keeps in the data dir (``milvus-token``, 0600), else none.

    ``strata up`` puts the file's token in the settings it ships to the actors; the file
    is read here for processes that build settings of their own (``strata keys``).
    """
    m = settings.milvus
    if m.token or m.uri:
        return m.token
    try:
        return (settings.data_dir / TOKEN_FILE).read_text().strip()
    except OSError:
        return ""


def open_store(settings: StrataSettings) -> tuple[RecordStore, Collections]:
    """Connect to Milvus and make sure every collection exists and is loaded.

    Raises:
        strata.errors.StoreUnavailable: Milvus does not answer.
    """
    m = settings.milvus
    # The embedded milvus-lite keeps deleted rows in its files until a rewrite (strata.store.erasure);
    # a Milvus server compacts and collects them itself, and a flush there after every delete
    # kept its standalone busy (a core, through the test suite): erasure is asked of lite only.
    erase_after_s = m.erase_after_s if m.uri is None else None
    store = MilvusRecordStore(m.address, token=store_token(settings), db_name=m.db_name, timeout_s=m.timeout_s,
                              vector_index=m.vector_index, erase_after_s=erase_after_s)
    names = Collections.for_settings(settings)
    store.ensure_collection(names.episodic, dim=names.dim)
    store.ensure_collection(names.semantic, dim=names.dim)
    store.ensure_collection(names.procedural, dim=names.dim)
    store.ensure_collection(names.state, dim=STATE_DIM)
    store.ensure_collection(names.keys, dim=STATE_DIM)
    return store, names
