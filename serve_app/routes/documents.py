"""Documents (semantic memory): index, list, read, delete; and the entities of their graph."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from fastapi import APIRouter, Header, Query, Response

from strata.schema import DocumentDeleted, DocumentIn, DocumentList, DocumentOut, EntityOut
from strata_serve.routes.common import Routes, expected_version, id_path

__all__ = ["DocumentRoutes", "router"]

router = APIRouter()

_DOC_ID = id_path("Document id")


class DocumentRoutes(Routes):
    """Documents and the knowledge graph of their entities."""

    @router.post("/v1/documents", status_code=201, response_model=DocumentOut, tags=["documents"])
    async def index_document(
        self,
        body: DocumentIn,
        response: Response,
        wait: bool = Query(default=True, description="false: return at once (202) and index in the background"),
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> DocumentOut:
        """Index a document, or re-index it by its ``doc_id`` (atomically: a search sees
        the old version or the new one). ``If-Match``: the document's expected version.
        A large document is better sent with ``wait=false``; poll ``GET /v1/documents/{id}``."""
        key = await self._gate.caller(authorization, "index_document")
        tenant, key_id = key.tenant, key.key_id
        doc: DocumentOut = await self._flow.index_document(
            tenant, body, expected_version=expected_version(if_match), wait=wait, by=key_id
        )
        response.status_code = 201 if doc.status == "ready" else 202
        response.headers["ETag"] = f'"{doc.version}"'
        return doc

    @router.get("/v1/documents", response_model=DocumentList, tags=["documents"])
    async def list_documents(
        self,
        after: str | None = Query(default=None, description="The last doc_id of the previous page"),
        limit: int = Query(default=50, ge=1, le=1000),
        authorization: str | None = Header(default=None),
    ) -> DocumentList:
        """Documents by id, a page at a time."""
        tenant = (await self._gate.caller(authorization, "list_documents")).tenant
        page: DocumentList = await self._flow.list_documents(tenant, after=after, limit=limit)
        return page

    @router.get("/v1/documents/{doc_id}", response_model=DocumentOut, tags=["documents"])
    async def get_document(
        self,
        response: Response,
        doc_id: str = _DOC_ID,
        include_text: bool = Query(default=False),
        authorization: str | None = Header(default=None),
    ) -> DocumentOut:
        """The document's metadata, version (ETag) and status; its text with ``include_text=true``."""
        tenant = (await self._gate.caller(authorization, "get_document")).tenant
        doc: DocumentOut = await self._flow.get_document(tenant, doc_id, include_text=include_text)
        response.headers["ETag"] = f'"{doc.version}"'
        return doc

    @router.delete("/v1/documents/{doc_id}", response_model=DocumentDeleted, tags=["documents"])
    async def delete_document(
        self,
        doc_id: str = _DOC_ID,
        authorization: str | None = Header(default=None),
        if_match: str | None = Header(default=None),
    ) -> DocumentDeleted:
        """Remove the document: its passages, vectors, BM25 entries and graph edges."""
        key = await self._gate.caller(authorization, "delete_document")
        tenant, key_id = key.tenant, key.key_id
        deleted: DocumentDeleted = await self._flow.delete_document(
            tenant, doc_id, expected_version=expected_version(if_match), by=key_id
        )
        return deleted

    @router.get("/v1/entities", response_model=EntityOut, tags=["documents"])
    async def entity(
        self,
        name: str = Query(min_length=1, max_length=200, description="An entity name or alias, any case"),
        authorization: str | None = Header(default=None),
    ) -> EntityOut:
        """What the knowledge graph of your documents knows of an entity."""
        tenant = (await self._gate.caller(authorization, "entity")).tenant
        return EntityOut(**await self._flow.entity(tenant, name))
