"""``strata export TENANT --out FILE`` and ``strata restore FILE [--tenant NEW]``: a tenant's
memory out to the export format (:mod:`strata.schema.export`) and back in, through the same
write paths as any caller's.

Restore is idempotent: run twice, it writes nothing new the second time. Turns keep their
``turn_id`` and time (a batch already recorded is answered as a replay); a document whose
text, title and metadata are already there is left alone; a working-memory item already in
its session is not added again, and one that copies a turn comes back with that turn.
Everything is embedded again by the target's embedder (vectors in a file are not used). The
episodic layer makes summaries again from the restored turns, so summary lines are read and
not written. A skill comes back as it was (its id, counts, times and every version of its
history, through the procedural layer's import path: no other write keeps them); one already
there the same is left alone, one there with other content is refused, not overwritten.
A line that cannot be read or written is reported by its number and reason; the rest go on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO

from pydantic import ValidationError

from strata.errors import InvalidInput, NotFound, StrataError
from strata.layers import LAYERS
from strata.schema import DocumentOut, RecordTurnsResult, SkillOut, SkillVersionOut, TurnIn, WorkingState
from strata.schema.export import (
    DocumentRecord,
    ExportEnd,
    ExportHeader,
    SkillRecord,
    SummaryRecord,
    TurnRecord,
    WorkingItemRecord,
    read_header,
    read_records,
)

__all__ = ["NOT_RESTORED", "RestoreReport", "Restorer", "add_arguments", "export_to", "restore_lines"]

#: Turns sent in one batch (the batch route's limit is 1,000; fewer keep a request small).
_TURN_BATCH = 200
#: Record kinds read and not written, and why.
NOT_RESTORED = {
    "summary": "made again from the restored turns by the episodic layer",
}


class Restorer(Protocol):
    """The writes and reads restore uses: :class:`strata_actors.client.InClusterClient`'s (the
    HTTP clients have all but :meth:`import_skill`, which is in-cluster only)."""

    async def record_turns(self, session_id: str, turns: Sequence[TurnIn | dict[str, Any]]) -> RecordTurnsResult: ...

    async def index_document(
        self, text: str, *, doc_id: str | None = None, title: str | None = None, metadata: dict[str, Any] | None = None
    ) -> DocumentOut: ...

    async def get_document(self, doc_id: str, *, include_text: bool = False) -> DocumentOut: ...

    async def get_working(self, session_id: str) -> WorkingState: ...

    async def add_working_items(self, session_id: str, items: Sequence[dict[str, Any]]) -> WorkingState: ...

    async def import_skill(self, skill: SkillOut, history: Sequence[SkillVersionOut]) -> tuple[SkillOut, bool]: ...


@dataclass
class RestoreReport:
    """What a restore did, by record kind; ``refused``: (line number, reason) of each line not restored."""

    header: ExportHeader
    written: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)
    not_restored: Counter[str] = field(default_factory=Counter)
    refused: list[tuple[int, str]] = field(default_factory=list)
    #: The end line was read and its count matched: the file is whole.
    complete: bool = False


async def export_to(lines: AsyncIterator[str], out: TextIO, *, progress: Callable[[], object] | None = None) -> int:
    """Write an export's ``lines`` to ``out``; returns the records written (header and end line
    not counted). ``progress()`` is called once per record."""
    count = -2
    async for line in lines:
        out.write(line)
        count += 1
        if progress is not None and count > 0:
            progress()
    return max(count, 0)


async def restore_lines(
    client: Restorer, lines: Iterable[str], *, progress: Callable[[], object] | None = None
) -> RestoreReport:
    """Restore the export in ``lines`` through ``client`` (into ``client``'s tenant).

    Raises:
        strata.errors.InvalidInput: the first line is not a header this version reads.
    """
    numbered = iter(lines)
    report = RestoreReport(read_header(next(numbered, "")))
    turns: list[tuple[int, TurnRecord]] = []
    working: dict[str, set[tuple[str, str]]] = {}  # per session: (role, content) already there
    seen = 0

    async def flush() -> None:
        if turns:
            await _restore_turns(client, turns, report)
            turns.clear()

    for line in _records(numbered, report):
        seen += 1
        if progress is not None:
            progress()
        record = line.record
        if isinstance(record, TurnRecord):
            if turns and (turns[-1][1].session_id != record.session_id or len(turns) >= _TURN_BATCH):
                await flush()
            turns.append((line.number, record))
            continue
        await flush()
        if isinstance(record, ExportEnd):
            seen -= 1
            report.complete = record.records == seen
            if not report.complete:
                report.refused.append((line.number, f"the end line counts {record.records} records, {seen} came"))
        elif isinstance(record, SummaryRecord):
            report.not_restored[record.kind] += 1
        elif isinstance(record, SkillRecord):
            await _guard(line.number, report, _restore_skill(client, record, report))
        elif isinstance(record, DocumentRecord):
            await _guard(line.number, report, _restore_document(client, record, report))
        elif isinstance(record, WorkingItemRecord):
            await _guard(line.number, report, _restore_working(client, record, working, report))
    await flush()
    report.refused.sort()  # a batch's turns are reported after the lines that followed them
    return report


def _records(lines: Iterator[str], report: RestoreReport) -> Iterator[Any]:
    for line in read_records(lines):
        if line.record is None:
            report.refused.append((line.number, line.error or "unreadable"))
        else:
            yield line


async def _guard(number: int, report: RestoreReport, write: Any) -> None:
    try:
        await write
    except StrataError as exc:
        report.refused.append((number, exc.message))
    except ValidationError as exc:
        report.refused.append((number, str(exc.errors(include_url=False)[0]["msg"])))


def _turn_in(record: TurnRecord, now: datetime) -> TurnIn | str:
    """The turn to record, or why it is not recorded."""
    ttl_s = None
    if record.expires_at is not None:
        ttl_s = (record.expires_at - now).total_seconds()
        if ttl_s <= 0:
            return "expired since the export"
    try:
        return TurnIn(
            user=record.user, agent=record.agent, timestamp=record.timestamp, turn_id=record.turn_id,
            speaker=record.speaker, metadata=record.metadata, ttl_s=ttl_s,
        )
    except ValidationError as exc:
        return str(exc.errors(include_url=False)[0]["msg"])


async def _restore_turns(client: Restorer, batch: list[tuple[int, TurnRecord]], report: RestoreReport) -> None:
    now = datetime.now(UTC)
    ready: list[tuple[int, TurnIn]] = []
    for number, record in batch:
        turn = _turn_in(record, now)
        if isinstance(turn, str):
            report.refused.append((number, turn))
        else:
            ready.append((number, turn))
    if not ready:
        return
    session = batch[0][1].session_id
    try:
        await _record(client, session, ready, report)
    except StrataError:
        # One bad turn refuses its batch: send them one at a time to name it.
        for number, turn in ready:
            await _guard(number, report, _record(client, session, [(number, turn)], report))


async def _record(client: Restorer, session: str, turns: list[tuple[int, TurnIn]], report: RestoreReport) -> None:
    result = await client.record_turns(session, [turn for _, turn in turns])
    (report.unchanged if result.replayed else report.written)["turn"] += len(turns)


async def _restore_document(client: Restorer, record: DocumentRecord, report: RestoreReport) -> None:
    try:
        there = await client.get_document(record.doc_id, include_text=True)
    except NotFound:
        there = None
    if (
        there is not None and there.status == "ready" and there.text == record.text
        and there.title == record.title and there.metadata == record.metadata
    ):
        report.unchanged["document"] += 1
        return
    await client.index_document(record.text, doc_id=record.doc_id, title=record.title, metadata=record.metadata)
    report.written["document"] += 1


async def _restore_skill(client: Restorer, record: SkillRecord, report: RestoreReport) -> None:
    if record.skill.expires_at is not None and record.skill.expires_at <= datetime.now(UTC):
        raise InvalidInput("expired since the export")
    _, written = await client.import_skill(record.skill, record.history)
    (report.written if written else report.unchanged)["skill"] += 1


async def _restore_working(
    client: Restorer, record: WorkingItemRecord, working: dict[str, set[tuple[str, str]]], report: RestoreReport
) -> None:
    if record.turn_id is not None:  # working memory's copy of a turn: recorded with the turn
        report.unchanged["working_item"] += 1
        return
    if record.session_id not in working:
        try:
            state = await client.get_working(record.session_id)
            working[record.session_id] = {(i.role, i.content) for i in state.items}
        except NotFound:
            working[record.session_id] = set()
    if (record.role, record.content) in working[record.session_id]:
        report.unchanged["working_item"] += 1
        return
    ttl_s = None
    if record.expires_at is not None:
        ttl_s = (record.expires_at - datetime.now(UTC)).total_seconds()
        if ttl_s <= 0:
            raise InvalidInput("expired since the export")
    item = {"role": record.role, "content": record.content, "importance": record.importance,
            "created_at": record.created_at, "ttl_s": ttl_s}
    await client.add_working_items(record.session_id, [item])
    working[record.session_id].add((record.role, record.content))
    report.written["working_item"] += 1


# -- the commands ---------------------------------------------------------------------------------


def add_arguments(export: argparse.ArgumentParser, restore: argparse.ArgumentParser) -> None:
    """The arguments of ``strata export`` and ``strata restore``."""
    export.add_argument("tenant", help="the tenant to export")
    export.add_argument("--out", required=True, help="the JSON Lines file to write")
    export.add_argument("--layers", nargs="+", choices=LAYERS, help="only these layers (default: all)")
    export.add_argument("--data-dir", default=".strata", help="the running stack's data dir (default ./.strata)")
    export.set_defaults(fn=_cmd_export)
    restore.add_argument("file", help="a file `strata export` wrote")
    restore.add_argument("--tenant", help="restore into this tenant (default: the one exported)")
    restore.add_argument("--data-dir", default=".strata", help="the running stack's data dir (default ./.strata)")
    restore.set_defaults(fn=_cmd_restore)


def _client(data_dir: str, tenant: str) -> Any:
    from strata_actors.client import InClusterClient
    from strata_cli.errors import StackError

    if not (Path(data_dir) / "stack.json").exists():
        raise StackError(f"no stack is running with data dir {data_dir} (start it with `strata up`)")
    return InClusterClient.for_running_stack(tenant, data_dir=data_dir)


def _cmd_export(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    client = _client(args.data_dir, args.tenant)

    async def run() -> int:
        async with client:
            with open(args.out, "w", encoding="utf-8") as out, tqdm(desc="export", unit=" record") as bar:
                return await export_to(client.export_lines(args.layers or LAYERS), out, progress=lambda: bar.update())

    count = asyncio.run(run())
    print(f"exported {count} records of tenant {args.tenant} to {args.out}")
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    with open(args.file, encoding="utf-8") as lines:
        tenant = args.tenant or read_header(lines.readline()).tenant
    client = _client(args.data_dir, tenant)

    async def run() -> RestoreReport:
        async with client:
            with open(args.file, encoding="utf-8") as lines, tqdm(desc="restore", unit=" record") as bar:
                return await restore_lines(client, lines, progress=lambda: bar.update())

    report = asyncio.run(run())
    print(f"restored into tenant {tenant}: " + _counts("written", report.written) + "; "
          + _counts("already there", report.unchanged))
    for kind, count in sorted(report.not_restored.items()):
        print(f"  {count} {kind} line(s) not restored: {NOT_RESTORED[kind]}")
    for number, reason in report.refused:
        print(f"  line {number}: {reason}", file=sys.stderr)
    if not report.complete:
        print("  the file has no matching end line: the export was cut short", file=sys.stderr)
    return 1 if report.refused or not report.complete else 0


def _counts(what: str, counts: Counter[str]) -> str:
    return f"{what} " + (", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing")
