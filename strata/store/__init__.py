"""Where every layer's rows live: the record-store interface and its in-memory
reference (:mod:`~strata.store.records`), the Milvus store (:mod:`~strata.store.milvus`)
and the embedded milvus-lite server it starts (:mod:`~strata.store.milvus_lite`),
which collections exist (:mod:`~strata.store.layout`), version counters
(:mod:`~strata.store.versions`) and expiry deadlines (:mod:`~strata.store.ttl`).

The names below are imported on first use, not with the package: the milvus-lite
server runs as ``python -m strata.store.milvus_lite`` and must not load the rest
of Strata into its process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strata.store.layout import Collections, open_store
    from strata.store.milvus import MilvusRecordStore
    from strata.store.records import InMemoryRecordStore, Record, RecordStore
    from strata.store.ttl import EXPIRES, Expiries, expires_ms
    from strata.store.versions import VersionStore

__all__ = [
    "EXPIRES",
    "Collections",
    "Expiries",
    "InMemoryRecordStore",
    "MilvusRecordStore",
    "Record",
    "RecordStore",
    "VersionStore",
    "expires_ms",
    "open_store",
]

_MODULE_OF = {
    "Collections": "layout",
    "open_store": "layout",
    "MilvusRecordStore": "milvus",
    "InMemoryRecordStore": "records",
    "Record": "records",
    "RecordStore": "records",
    "EXPIRES": "ttl",
    "Expiries": "ttl",
    "expires_ms": "ttl",
    "VersionStore": "versions",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
