"""A tenant's memory as the records of the export format (:mod:`strata.schema.export`), read a
page at a time from each layer: memory holds one page of turns (or one document, or one
session's working memory) at a time, whatever the tenant's size."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from strata.errors import NotFound
from strata.layers import LAYERS, Layer
from strata.schema.export import (
    DocumentRecord,
    EmbedderTag,
    ExportHeader,
    ExportRecord,
    SkillRecord,
    SummaryRecord,
    TurnRecord,
    WorkingItemRecord,
)
from strata.store.vector_models import VectorModel
from strata_actors.orchestration.reads import ReadFlow

__all__ = ["EXPORT_PAGE", "ExportFlow"]

#: Rows read per call to a layer while exporting (the largest page the layers serve).
EXPORT_PAGE = 1000


def _strata_version() -> str:
    try:
        return version("strata-memory")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


class ExportFlow(ReadFlow):
    """Reading a whole tenant out, a page at a time."""

    def export_header(self, tenant: str, layers: Sequence[Layer]) -> ExportHeader:
        """The first line of ``tenant``'s export of ``layers``."""
        model = VectorModel.of(self.settings.embedding)
        return ExportHeader(
            strata_version=_strata_version(),
            tenant=tenant,
            embedder=EmbedderTag(provider=model.provider, model=model.model, dim=model.dim),
            created_at=datetime.now(UTC),
            layers=[layer for layer in LAYERS if layer in layers],
        )

    async def export_records(self, tenant: str, layers: Sequence[Layer]) -> AsyncIterator[ExportRecord]:
        """Every record of ``tenant`` in ``layers`` (already authorized by the caller): per
        session its turns, summaries and working memory, then documents, then skills.
        Working memory is exported for the sessions with turns (the sessions episodic memory
        lists; a working-memory-only export reads that list and no turns)."""
        wanted = set(layers)
        if wanted & {"episodic", "working"}:
            async for record in self._sessions(tenant, turns="episodic" in wanted, working="working" in wanted):
                yield record
        if "semantic" in wanted:
            async for record in self._documents(tenant):
                yield record
        if "procedural" in wanted:
            async for record in self._skills(tenant):
                yield record

    async def _sessions(self, tenant: str, *, turns: bool, working: bool) -> AsyncIterator[ExportRecord]:
        after: str | None = None
        while True:
            page = await self.list_sessions(tenant, after=after, limit=EXPORT_PAGE)
            for session in page.sessions:
                sid = session.session_id
                if turns:
                    async for record in self._turns(tenant, sid):
                        yield record
                    for summary in await self.router.episodic(tenant).list_summaries(tenant, sid):
                        # The fields this version of the format has: a field the layer adds later
                        # must not break an export (extra fields are refused by the format).
                        known = {k: v for k, v in summary.items() if k in SummaryRecord.model_fields}
                        yield SummaryRecord(session_id=sid, **known)
                if working:
                    state = await self.working(tenant, sid)
                    for item in state.items:
                        yield WorkingItemRecord(
                            session_id=sid, role=item.role, content=item.content, importance=item.importance,
                            created_at=item.created_at, turn_id=item.turn_id, expires_at=item.expires_at,
                        )
            if page.next_after is None:
                return
            after = page.next_after

    async def _turns(self, tenant: str, session_id: str) -> AsyncIterator[TurnRecord]:
        after: str | None = None
        while True:
            try:
                page = await self.list_turns(tenant, session_id, after=after, limit=EXPORT_PAGE)
            except NotFound:  # forgotten since it was listed
                return
            for turn in page.turns:
                yield TurnRecord(
                    session_id=session_id, turn_id=turn.turn_id, timestamp=turn.timestamp, user=turn.user,
                    agent=turn.agent, speaker=turn.speaker, metadata=turn.metadata, expires_at=turn.expires_at,
                )
            if page.next_after is None:
                return
            after = page.next_after

    async def _documents(self, tenant: str) -> AsyncIterator[DocumentRecord]:
        after: str | None = None
        while True:
            # Small pages: each document's text is read once its id is known, one at a time.
            page = await self.list_documents(tenant, after=after, limit=100)
            for listed in page.documents:
                try:
                    doc = await self.get_document(tenant, listed.doc_id, include_text=True)
                except NotFound:  # deleted since it was listed
                    continue
                if doc.text is None:  # never indexed (its first indexing failed or is running)
                    continue
                yield DocumentRecord(
                    doc_id=doc.doc_id, title=doc.title, text=doc.text, metadata=doc.metadata,
                    created_at=doc.created_at, updated_at=doc.updated_at,
                )
            if page.next_after is None:
                return
            after = page.next_after

    async def _skills(self, tenant: str) -> AsyncIterator[SkillRecord]:
        after: str | None = None
        procedural = self.router.procedural(tenant)
        while True:
            page = await procedural.list_skills(tenant, after=after, limit=100)
            for skill in page.skills:
                try:
                    history = await procedural.history(tenant, skill.skill_id)
                except NotFound:
                    continue
                yield SkillRecord(skill=skill, history=history.versions)
            if page.next_after is None:
                return
            after = page.next_after
