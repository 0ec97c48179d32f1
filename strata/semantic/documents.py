"""What semantic memory keeps: documents, their passages and chunks, the hits a
search returns, and how each is read back from its row in the record store.

Rows, one collection, the document id as the row's session: ``doc`` (one per
document, naming its live generation), ``parent`` (a passage that is returned)
and ``child`` (a chunk that is matched, with its embedding and entities).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from strata.clock import from_ms, from_ms_or_none, to_ms
from strata.retrieval.entities import Extraction
from strata.semantic.chunking import ChunkTree
from strata.store.records import Record
from strata.store.ttl import EXPIRES

__all__ = [
    "CHILD",
    "DOC",
    "PARENT",
    "Child",
    "Document",
    "DocumentInput",
    "Passage",
    "PreparedDocument",
    "SemanticHit",
    "child_from",
    "passage_from",
    "public_child_id",
    "public_id",
    "titled",
    "vector_texts",
]

#: The ``kind`` of each row.
DOC, PARENT, CHILD = "doc", "parent", "child"


@dataclass(frozen=True)
class DocumentInput:
    """What a caller indexes: a text, and optionally its id, title, metadata and TTL."""

    text: str
    doc_id: str | None = None
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Seconds it lives; it may shorten the configured TTL, never lengthen it.
    ttl_s: float | None = None


@dataclass(frozen=True)
class Document:
    """A document's metadata (its text is its parents, stitched)."""

    doc_id: str
    title: str | None
    metadata: dict[str, Any]
    generation: str
    strategy: str
    chars: int
    parents: int
    children: int
    created_at: datetime
    updated_at: datetime
    #: When it expires (epoch ms), counted from its last indexing; None: never.
    expires_ms: int | None = None

    def to_payload(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "metadata": self.metadata,
            "gen": self.generation,
            "strategy": self.strategy,
            "chars": self.chars,
            "parents": self.parents,
            "children": self.children,
            "created_ms": to_ms(self.created_at),
            "updated_ms": to_ms(self.updated_at),
            **({EXPIRES: self.expires_ms} if self.expires_ms else {}),
        }

    @classmethod
    def from_record(cls, row: Record) -> Document:
        p = row.payload
        return cls(
            doc_id=row.session,
            title=p.get("title"),
            metadata=dict(p.get("metadata") or {}),
            generation=str(p["gen"]),
            strategy=str(p.get("strategy", "")),
            chars=int(p.get("chars", 0)),
            parents=int(p.get("parents", 0)),
            children=int(p.get("children", 0)),
            created_at=from_ms(int(p.get("created_ms", row.ts_ms))),
            updated_at=from_ms(int(p.get("updated_ms", row.ts_ms))),
            expires_ms=p.get(EXPIRES),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "doc_id": self.doc_id,
            "title": self.title,
            "metadata": self.metadata,
            "strategy": self.strategy,
            "chars": self.chars,
            "parents": self.parents,
            "children": self.children,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": from_ms_or_none(self.expires_ms),
        }


@dataclass(frozen=True)
class PreparedDocument:
    """A document cut and its entities extracted; nothing written yet."""

    document: Document
    tree: ChunkTree
    extractions: tuple[Extraction, ...]  # one per child

    def embed_texts(self) -> list[str]:
        """What each child is embedded as: its text, headed by the document title."""
        return [titled(self.document.title, c.text) for c in self.tree.children]


@dataclass(frozen=True)
class Passage:
    """A parent chunk: what a search returns."""

    pk: str
    doc_id: str
    number: int
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Child:
    """A child chunk: what a search matches; ``parent`` is its passage's pk."""

    pk: str
    doc_id: str
    parent: str
    start: int
    end: int


@dataclass
class SemanticHit:
    """A parent passage found through one or more of its children."""

    id: str
    doc_id: str
    title: str | None
    text: str
    start: int
    end: int
    score: float
    #: Best 1-based rank of any of its children on each path that found one.
    ranks: dict[str, int] = field(default_factory=dict)
    #: Children that matched, best first: their ids and spans.
    matched: list[dict[str, Any]] = field(default_factory=list)
    #: Its best child's relevance to the query, in [0, 1] (:mod:`strata.retrieval.relevance`).
    relevance: float = 0.0


def titled(title: str | None, text: str) -> str:
    """A child's text headed by its document's title: what is embedded and BM25-indexed."""
    return f"{title}\n{text}" if title else text


def public_id(passage: Passage) -> str:
    return f"{passage.doc_id}#{passage.number}"


def public_child_id(pk: str) -> str:
    # tenant/doc/gen/cN -> doc/cN
    parts = pk.split("/")
    return f"{parts[1]}/{parts[3]}"


def passage_from(row: Record) -> Passage:
    p = row.payload
    return Passage(row.pk, row.session, int(p["n"]), int(p["start"]), int(p["end"]), row.text)


def child_from(row: Record) -> Child:
    p = row.payload
    return Child(row.pk, row.session, str(p["parent"]), int(p["start"]), int(p["end"]))


def vector_texts(rows: Sequence[Record]) -> list[tuple[Record, str]]:
    """The rows of one tenant that carry a vector (child chunks), each with the text its
    vector is made from (as :meth:`PreparedDocument.embed_texts`): what ``strata reindex``
    embeds again."""
    titles = {row.session: Document.from_record(row).title for row in rows if row.kind == DOC}
    return [(row, titled(titles.get(row.session), row.text)) for row in rows if row.kind == CHILD]
