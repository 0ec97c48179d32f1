"""The export format (strata.schema.export): each record survives a line; a header of another
version is refused saying so; a line cut short is reported by its number; and restore
(strata_cli.portable) goes on past a bad line and writes nothing new when run again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from strata.errors import InvalidInput, NotFound
from strata.schema import DocumentOut, RecordTurnsResult, TurnIn, TurnOut, WorkingItemOut, WorkingState
from strata.schema.export import (
    EXPORT_VERSION,
    DocumentRecord,
    EmbedderTag,
    ExportHeader,
    ExportRecord,
    SkillRecord,
    SummaryRecord,
    TurnRecord,
    WorkingItemRecord,
    dump_line,
    export_lines,
    read_header,
    read_records,
)
from strata.schema.outputs import SkillOut, SkillVersionOut
from strata_cli.portable import restore_lines

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HEADER = ExportHeader(
    strata_version="0.1.0", tenant="acme", created_at=T0, layers=["working", "episodic", "semantic", "procedural"],
    embedder=EmbedderTag(provider="onnx-minilm", model="all-MiniLM-L6-v2", dim=384),
)
SKILL = SkillOut(
    skill_id="s1", version=2, skill_name="rotate keys", description="d", trigger_conditions=["t"], steps=["a {x}"],
    common_pitfalls=[], success_criteria=[], variables=["x"], uses=1, successes=1, success_rate=1.0, confidence=0.2,
    created_at=T0, updated_at=T0, updated_by="k",
)
RECORDS: list[ExportRecord] = [
    TurnRecord(session_id="s", turn_id="t1", timestamp=T0, user="I moved to Lisbon", agent="Noted.",
               speaker="ana", metadata={"channel": "chat"}),
    SummaryRecord(session_id="s", summary_id="sum1", turn_ids=["t1"], summary="moved", key_topics=["Lisbon"],
                  fallback_reason="the LLM timed out"),
    DocumentRecord(doc_id="d1", title="Runbook", text="# Runbook\n\nRestart the queue.", metadata={"team": "ops"}),
    SkillRecord(skill=SKILL, history=[SkillVersionOut(version=1, at=T0, by="k", change="created", uses=0,
                                                      successes=0)]),
    WorkingItemRecord(session_id="s", role="system", content="be brief", importance=0.9, created_at=T0),
]


def test_each_record_survives_a_line() -> None:
    lines = [dump_line(HEADER), *(dump_line(r) for r in RECORDS)]
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)
    assert read_header(lines[0]) == HEADER
    read = list(read_records(lines[1:]))
    assert [line.number for line in read] == [2, 3, 4, 5, 6]
    assert [line.record for line in read] == RECORDS
    assert "vector" not in lines[1]  # left out unless a record carries one


def test_the_stream_ends_with_the_count_of_its_records() -> None:
    async def records() -> AsyncIterator[ExportRecord]:
        for record in RECORDS:
            yield record

    async def collect() -> list[str]:
        return [line async for line in export_lines(HEADER, records())]

    lines = asyncio.run(collect())
    assert json.loads(lines[-1]) == {"kind": "end", "records": len(RECORDS)}


def test_a_header_of_another_version_is_refused_saying_which() -> None:
    other = json.loads(dump_line(HEADER)) | {"version": EXPORT_VERSION + 1, "strata_version": "9.0.0"}
    with pytest.raises(InvalidInput, match=rf"version {EXPORT_VERSION + 1} .*Strata 9.0.0.*reads version 1 only"):
        read_header(json.dumps(other))
    with pytest.raises(InvalidInput, match="not a Strata export"):
        read_header('{"hello": "world"}')
    with pytest.raises(InvalidInput, match="not JSON"):
        read_header("")


def test_a_truncated_line_and_an_unknown_kind_are_reported_by_number() -> None:
    whole = dump_line(RECORDS[0])
    lines = [whole, '{"kind": "key", "secret": "x"}\n', dump_line(RECORDS[2]), whole[: len(whole) // 2]]
    read = list(read_records(lines))
    assert read[0].record == RECORDS[0] and read[2].record == RECORDS[2]
    assert read[1].number == 3 and read[1].record is None and "key" in (read[1].error or "")
    assert read[3].number == 5 and "truncated" in (read[3].error or "")


class Target:
    """The target tenant, in memory: what restore writes through, as the clients answer."""

    def __init__(self) -> None:
        self.turns: dict[str, TurnIn] = {}
        self.docs: dict[str, DocumentOut] = {}
        self.working: dict[str, list[WorkingItemOut]] = {}
        self.skills: dict[str, tuple[SkillOut, list[SkillVersionOut]]] = {}
        self.writes = 0

    async def record_turns(self, session_id: str, turns: Sequence[TurnIn | dict[str, Any]]) -> RecordTurnsResult:
        parsed = [t if isinstance(t, TurnIn) else TurnIn(**t) for t in turns]
        if any(t.user == "refuse me" for t in parsed):
            raise InvalidInput("a turn the target refuses")
        replayed = all(t.turn_id in self.turns for t in parsed)
        if not replayed:
            self.writes += 1
        self.turns.update({str(t.turn_id): t for t in parsed})
        outs = [TurnOut(session_id=session_id, turn_id=str(t.turn_id), timestamp=t.timestamp or T0) for t in parsed]
        return RecordTurnsResult(session_id=session_id, turns=outs, versions={}, replayed=replayed)

    async def index_document(
        self, text: str, *, doc_id: str | None = None, title: str | None = None, metadata: dict[str, Any] | None = None
    ) -> DocumentOut:
        self.writes += 1
        doc = DocumentOut(
            doc_id=str(doc_id), version=1, status="ready", title=title, metadata=metadata or {}, text=text
        )
        self.docs[str(doc_id)] = doc
        return doc

    async def get_document(self, doc_id: str, *, include_text: bool = False) -> DocumentOut:
        if doc_id not in self.docs:
            raise NotFound(f"no document {doc_id}")
        return self.docs[doc_id]

    async def get_working(self, session_id: str) -> WorkingState:
        return WorkingState(session_id=session_id, version=1, items=self.working.get(session_id, []), messages=[],
                            total_tokens=0, max_tokens=1000)

    async def add_working_items(self, session_id: str, items: Sequence[dict[str, Any]]) -> WorkingState:
        self.writes += 1
        for item in items:
            self.working.setdefault(session_id, []).append(WorkingItemOut(
                id=str(self.writes), role=item["role"], content=item["content"], importance=item["importance"],
                tokens=1, summarized=False, created_at=item["created_at"],
            ))
        return await self.get_working(session_id)


    async def import_skill(self, skill: SkillOut, history: Sequence[SkillVersionOut]) -> tuple[SkillOut, bool]:
        if skill.skill_id in self.skills:
            return self.skills[skill.skill_id][0], False
        self.writes += 1
        self.skills[skill.skill_id] = (skill, list(history))
        return skill, True


def _file(records: Sequence[ExportRecord], *, end: int | None = None) -> list[str]:
    lines = [dump_line(HEADER), *(dump_line(r) for r in records)]
    return [*lines, json.dumps({"kind": "end", "records": len(records) if end is None else end}) + "\n"]


def test_restore_goes_on_past_a_refused_line_and_a_second_run_writes_nothing() -> None:
    bad = TurnRecord(session_id="s", turn_id="t2", timestamp=T0, user="refuse me")
    expired = TurnRecord(session_id="s", turn_id="t3", timestamp=T0, user="gone",
                         expires_at=datetime.now(UTC) - timedelta(days=1))
    copy = WorkingItemRecord(session_id="s", role="user", content="I moved to Lisbon", importance=0.5,
                             created_at=T0, turn_id="t1")
    records = [RECORDS[0], bad, expired, *RECORDS[1:], copy]
    target = Target()
    report = asyncio.run(restore_lines(target, _file(records)))
    assert report.complete
    assert report.refused == [(3, "a turn the target refuses"), (4, "expired since the export")]
    assert dict(report.written) == {"turn": 1, "document": 1, "skill": 1, "working_item": 1}
    assert dict(report.not_restored) == {"summary": 1}
    assert target.skills["s1"] == (SKILL, RECORDS[3].history)  # type: ignore[union-attr]
    assert set(target.turns) == {"t1"} and target.turns["t1"].speaker == "ana"
    assert target.docs["d1"].text == RECORDS[2].text  # type: ignore[union-attr]

    writes = target.writes
    again = asyncio.run(restore_lines(target, _file(records)))
    assert target.writes == writes and not again.written
    assert dict(again.unchanged) == {"turn": 1, "document": 1, "skill": 1, "working_item": 2}


def test_an_expired_skill_is_not_restored() -> None:
    gone = SkillRecord(skill=SKILL.model_copy(update={"expires_at": datetime.now(UTC) - timedelta(hours=1)}))
    target = Target()
    report = asyncio.run(restore_lines(target, _file([gone])))
    assert report.refused == [(2, "expired since the export")] and not target.skills


def test_restore_says_when_the_file_was_cut_short() -> None:
    cut = _file(RECORDS[:1])[:-1]
    assert not asyncio.run(restore_lines(Target(), cut)).complete
    miscounted = asyncio.run(restore_lines(Target(), _file(RECORDS[:1], end=5)))
    assert not miscounted.complete and "counts 5 records" in miscounted.refused[0][1]
