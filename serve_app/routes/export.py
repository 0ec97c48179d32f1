"""A tenant's whole memory, streamed as the export format (:mod:`strata.schema.export`)."""

# No `from __future__ import annotations` here: Serve rewrites these methods
# and FastAPI then cannot resolve string annotations such as `Response`.

from collections.abc import AsyncIterator

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from strata.layers import Layer
from strata.schema.export import EXPORT_MEDIA_TYPE, export_lines
from strata_serve.routes.common import Routes

__all__ = ["ExportRoutes", "router"]

router = APIRouter()

#: Bytes gathered before a chunk is sent: a line per chunk would cost a send per turn.
_CHUNK_BYTES = 64 * 1024

_LAYERS = Query(default=None, description="The layers to export; by default every layer the key may read")


class ExportRoutes(Routes):
    """Exporting the caller's tenant."""

    @router.get(
        "/v1/export",
        response_class=StreamingResponse,
        responses={200: {"content": {EXPORT_MEDIA_TYPE: {"schema": {"type": "string"}}},
                         "description": "JSON Lines: a header, one record a line, an end line"}},
        tags=["export"],
    )
    async def export(
        self, layers: list[Layer] | None = _LAYERS, authorization: str | None = Header(default=None)
    ) -> StreamingResponse:
        """Everything your tenant holds in the layers your key may read, as JSON Lines (a
        header, then turns, summaries, working memory, documents, skills with their history,
        then an end line with the count): never keys, no vectors. Streamed a page at a time;
        a response without its end line was cut short. Not for a session key."""
        info, chosen = await self._gate.reader(authorization, "export", session=None, asked=layers)
        header = self._flow.export_header(info.tenant, chosen)
        lines = export_lines(header, self._flow.export_records(info.tenant, header.layers))
        return StreamingResponse(_chunks(lines), media_type=EXPORT_MEDIA_TYPE)


async def _chunks(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    buffer: list[bytes] = []
    size = 0
    async for line in lines:
        data = line.encode()
        buffer.append(data)
        size += len(data)
        if size >= _CHUNK_BYTES:
            yield b"".join(buffer)
            buffer, size = [], 0
    if buffer:
        yield b"".join(buffer)
