"""LangGraph's ``BaseStore`` over Strata: :class:`StrataStore`.

``store = StrataStore.from_env()  # was InMemoryStore()`` and the graph's long-term memory
lives in Strata's semantic layer, searchable by meaning and by words.

How the store maps onto Strata:

- **tenant**: the key's. Namespaces live inside it; a key of another tenant sees none of them.
- **item** ``(namespace, key) -> value``: one Strata *document*. Its id is ``lg-`` and a hash of
  namespace and key (Strata ids allow few characters; namespace labels and keys are any text).
  Its text is the value as JSON, which is what gets embedded and BM25-indexed; its title is the
  path ``ns/.../key``; its metadata (``langgraph``) holds the namespace, the key, and a copy of the
  value when that fits Strata's 8 KB metadata (else the value is read from the text).
  ``created_at`` / ``updated_at`` are the document's.
- **put** re-indexes the document (atomically: a search sees the old value or the new);
  **put with value None** deletes it (deleting what is not there is not an error).
- **get**: ``GET /v1/documents/{id}?include_text=true``.
- **search** without ``query``: the namespace's items, most recently updated first. With
  ``query``: ``POST /v1/search`` on the semantic layer (dense + BM25 + graph, fused), restricted to
  the namespace's documents when there are at most 100 of them, one hit per item, best first;
  ``SearchItem.score`` is Strata's fused score (higher is better, not a cosine). ``filter`` is
  applied here to the values, with LangGraph's operators (``$eq $ne $gt $gte $lt $lte``, nested
  dicts, lists by equality).
- **list_namespaces**: the namespaces of the tenant's items, prefix / suffix / ``*`` / max_depth
  as ``InMemoryStore`` does them, sorted.
- **TTL** (``supports_ttl``): ``ttl`` minutes become the document's ``ttl_s``; an expired item
  is never returned (Strata purges it before answering). A TTL may shorten the tenant's
  configured semantic TTL, not lengthen it.

What cannot map:

- ``refresh_ttl`` / ``refresh_on_read``: Strata counts a TTL from the last write; reads do not
  extend it (a put does).
- ``index`` (which fields to embed, or ``False``): every item is indexed whole, as JSON.
- Finding a namespace's items lists the tenant's documents (a page per 1,000), so a search or
  a namespace listing costs one request per 1,000 documents of the tenant. A query ranks the best
  100 passages: in a namespace of more than 100 items, matches below them are not returned.
- Last writer wins is not offered for writers at the same moment: a put of an item whose previous
  put is still being indexed is refused (``VersionConflict``, 409); retry it.
- A value must be JSON; its text is what the tenant's PII rules see, and they may mask parts of
  it before it is stored (then ``get`` returns the masked value).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from strata.errors import NotFound
from strata.schema import DocumentList, DocumentOut, SearchResult
from strata_adapters._common import Closes, Flow, StrataConnection, call, run_async, run_sync

__all__ = ["StrataConnection", "StrataStore", "item_doc_id", "matches_filter"]

#: The metadata key of an item's document: its namespace, key and (when it fits) value.
_MARK = "langgraph"
_ID_PREFIX = "lg-"
#: Strata's limit on a document's metadata, as JSON bytes (strata.schema.inputs).
_METADATA_BYTES_MAX = 8192
_LIST_PAGE = 1000
#: Most documents a search can be restricted to, and most hits it returns (SearchRequest).
_SEARCH_MAX = 100
_INT64 = 2**63


def item_doc_id(namespace: tuple[str, ...], key: str) -> str:
    """The Strata document id of the item ``key`` in ``namespace``."""
    path = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    return _ID_PREFIX + hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def matches_filter(value: Any, condition: Any) -> bool:
    """Whether an item's ``value`` meets a LangGraph ``filter`` (the semantics of ``InMemoryStore``).

    Raises:
        ValueError: an operator other than ``$eq $ne $gt $gte $lt $lte``.
    """
    if isinstance(condition, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in condition):
            return all(_apply(value, op, operand) for op, operand in condition.items())
        return isinstance(value, dict) and all(matches_filter(value.get(k), v) for k, v in condition.items())
    if isinstance(condition, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(condition)
            and all(matches_filter(v, c) for v, c in zip(value, condition, strict=True))
        )
    return bool(value == condition)


def _apply(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"filter operator {op!r} is not supported: use $eq, $ne, $gt, $gte, $lt or $lte")
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field does not compare: no match
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    # The namespace may be longer than the path: only the path's length is compared.
    pairs = (zip(namespace, path, strict=False) if condition.match_type == "prefix"
             else zip(reversed(namespace), reversed(path), strict=False))
    return all(p == "*" or n == p for n, p in pairs)


@dataclass(frozen=True)
class _Entry:
    """An item as its document's listing shows it; ``value`` None: only in the text."""

    doc_id: str
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime

    def item(self) -> Item:
        return Item(
            value=self.value or {},
            key=self.key,
            namespace=self.namespace,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def search_item(self, score: float | None) -> SearchItem:
        return SearchItem(self.namespace, self.key, self.value or {}, self.created_at, self.updated_at, score)


def _entry(doc: DocumentOut) -> _Entry | None:
    """The item a document holds, or None for a document that is not one (written otherwise)."""
    mark = doc.metadata.get(_MARK)
    if not isinstance(mark, dict):
        return None
    namespace, key, value = mark.get("namespace"), mark.get("key"), mark.get("value")
    if not (isinstance(namespace, list) and all(isinstance(n, str) for n in namespace) and isinstance(key, str)):
        return None
    if item_doc_id(tuple(namespace), key) != doc.doc_id:
        return None  # metadata that claims another item's place
    now = datetime.now(UTC)
    return _Entry(
        doc_id=doc.doc_id,
        namespace=tuple(namespace),
        key=key,
        value=value if isinstance(value, dict) else None,
        created_at=doc.created_at or doc.updated_at or now,
        updated_at=doc.updated_at or doc.created_at or now,
    )


def _with_text(entry: _Entry, doc: DocumentOut) -> _Entry:
    if entry.value is not None or doc.text is None:
        return entry
    value = json.loads(doc.text)
    return replace(entry, value=value if isinstance(value, dict) else {"value": value})


def _fits_metadata(metadata: dict[str, Any]) -> bool:
    """Whether Strata keeps ``metadata`` as it is: finite numbers, 64-bit integers, 8 KB of JSON."""
    try:
        encoded = json.dumps(metadata, ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, UnicodeEncodeError):
        return False
    return len(encoded) <= _METADATA_BYTES_MAX and _ints_fit(metadata)


def _ints_fit(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -_INT64 <= value < _INT64
    if isinstance(value, dict):
        return all(_ints_fit(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_ints_fit(v) for v in value)
    return True


# -- the operations, each once (see strata_adapters._common) -------------------------------


def _get(op: GetOp) -> Flow[Item | None]:
    try:
        doc: DocumentOut = yield call("get_document", item_doc_id(op.namespace, op.key), include_text=True)
    except NotFound:
        return None
    entry = _entry(doc)
    if entry is None or entry.namespace != tuple(op.namespace) or entry.key != op.key:
        return None
    return _with_text(entry, doc).item()


def _put(op: PutOp) -> Flow[None]:
    if not op.namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    doc_id = item_doc_id(op.namespace, op.key)
    if op.value is None:
        with contextlib.suppress(NotFound):  # deleting what is not there leaves it not there
            yield call("delete_document", doc_id)
        return None
    value = dict(op.value)
    text = json.dumps(value, ensure_ascii=False)
    mark: dict[str, Any] = {"namespace": list(op.namespace), "key": op.key, "value": value}
    if not _fits_metadata({_MARK: mark}):
        del mark["value"]  # read back from the text
    title = "/".join((*op.namespace, op.key))[:500]
    ttl_s = op.ttl * 60 if op.ttl is not None else None
    yield call("index_document", text, doc_id=doc_id, title=title, metadata={_MARK: mark}, ttl_s=ttl_s)
    return None


def _entries() -> Flow[list[_Entry]]:
    """Every item of the tenant, as the document listing shows it."""
    entries: list[_Entry] = []
    after: str | None = None
    while True:
        page: DocumentList = yield call("list_documents", after=after, limit=_LIST_PAGE)
        entries += [e for e in map(_entry, page.documents) if e is not None]
        if page.next_after is None:
            return entries
        after = page.next_after


def _complete(entry: _Entry) -> Flow[_Entry | None]:
    """``entry`` with its value, read from its text if the listing did not carry it."""
    if entry.value is not None:
        return entry
    try:
        doc: DocumentOut = yield call("get_document", entry.doc_id, include_text=True)
    except NotFound:
        return None  # deleted since it was listed
    return _with_text(entry, doc)


def _search(op: SearchOp) -> Flow[list[SearchItem]]:
    prefix = tuple(op.namespace_prefix)
    everything = yield from _entries()
    entries = [e for e in everything if e.namespace[: len(prefix)] == prefix]
    if not entries or op.limit <= 0:
        return []
    ranked: list[tuple[_Entry, float | None]]
    if op.query:
        ids = [e.doc_id for e in entries] if len(entries) <= _SEARCH_MAX else None
        found: SearchResult = yield call("search", op.query, layers=["semantic"], top_k=_SEARCH_MAX, doc_ids=ids)
        by_id = {e.doc_id: e for e in entries}
        best: dict[str, float] = {}
        for hit in found.hits:  # best first; an item cut into several passages counts once
            if hit.source is not None and hit.source.doc_id in by_id:
                best.setdefault(hit.source.doc_id, hit.score)
        ranked = [(by_id[doc_id], score) for doc_id, score in best.items()]
    else:
        ranked = [(e, None) for e in sorted(entries, key=lambda e: (e.updated_at, e.doc_id), reverse=True)]
    offset = max(op.offset, 0)
    picked: list[SearchItem] = []
    for entry, score in ranked:
        if len(picked) >= offset + op.limit:
            break
        if not op.filter and len(picked) < offset:
            picked.append(entry.search_item(score))  # skipped by the offset: its value is not needed
            continue
        complete = yield from _complete(entry)
        if complete is not None and (not op.filter or matches_filter(complete.value, op.filter)):
            picked.append(complete.search_item(score))
    return picked[offset:]


def _list_namespaces(op: ListNamespacesOp) -> Flow[list[tuple[str, ...]]]:
    entries = yield from _entries()
    found = {e.namespace for e in entries}
    for condition in op.match_conditions or ():
        found = {ns for ns in found if _namespace_matches(condition, ns)}
    if op.max_depth is not None:
        found = {ns[: op.max_depth] for ns in found}
    return sorted(found)[op.offset : op.offset + op.limit]


def _op(op: Op) -> Flow[Result]:
    validate_op_namespace(op)
    if isinstance(op, GetOp):
        return (yield from _get(op))
    if isinstance(op, PutOp):
        yield from _put(op)
        return None
    if isinstance(op, SearchOp):
        return (yield from _search(op))
    if isinstance(op, ListNamespacesOp):
        return (yield from _list_namespaces(op))
    raise ValueError(
        f"unknown store operation {type(op).__name__}: expected GetOp, PutOp, SearchOp or ListNamespacesOp"
    )


class StrataStore(Closes, BaseStore):
    """A LangGraph store whose items are documents in Strata (see the module docstring).

    ``builder.compile(store=StrataStore.from_env())``; a node reads it as ``runtime.store``.
    Operations of a batch run one after another, in order. ``close()`` / ``aclose()`` (or
    ``with`` / ``async with`` the store) close its connection.

    Args:
        connection: where Strata is, and the key (its tenant holds the items).
        ttl: LangGraph's TTL settings; ``default_ttl`` (minutes) applies to puts without a ttl.
            ``refresh_on_read`` cannot be honoured (a read does not extend a Strata TTL).
    """

    supports_ttl = True

    def __init__(self, connection: StrataConnection, *, ttl: TTLConfig | None = None) -> None:
        self.connection = connection
        self.ttl_config = ttl

    @classmethod
    def from_env(cls, *, ttl: TTLConfig | None = None) -> StrataStore:
        """A store at ``STRATA_URL`` with the key ``STRATA_API_KEY``."""
        return cls(StrataConnection.from_env(), ttl=ttl)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [run_sync(self.connection.client, _op(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        client = self.connection.async_client
        return [await run_async(client, _op(op)) for op in ops]
