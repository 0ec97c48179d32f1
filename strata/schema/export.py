"""The export format: a tenant's memory as JSON Lines (``strata export``, ``GET /v1/export``,
read back by ``strata restore``).

The first line is an :class:`ExportHeader` (format name, version, Strata's version, the tenant,
the embedder, when, which layers); every other line is one record, told apart by ``kind``:
:class:`TurnRecord`, :class:`SummaryRecord`, :class:`DocumentRecord`, :class:`SkillRecord`,
:class:`WorkingItemRecord`; the last line is an :class:`ExportEnd` with the count of records,
so that an export cut short (a stream that broke, a disk that filled) is told from a whole one.
Keys are never exported. A record's ``vector``, when present, was made by the header's
embedder; exports leave vectors out (this version of Strata never writes them, and restore
re-embeds everything).

A reader refuses a header of another format or version with a message naming both
(:func:`read_header`), and reports a line it cannot read by its number (:func:`read_records`),
so that one bad line costs that record, not the file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from strata.errors import InvalidInput
from strata.layers import Layer
from strata.schema.outputs import SkillOut, SkillVersionOut

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_MEDIA_TYPE",
    "EXPORT_VERSION",
    "DocumentRecord",
    "EmbedderTag",
    "ExportEnd",
    "ExportHeader",
    "ExportItem",
    "ExportLine",
    "ExportReader",
    "ExportRecord",
    "SkillRecord",
    "SummaryRecord",
    "TurnRecord",
    "WorkingItemRecord",
    "dump_line",
    "export_lines",
    "read_header",
    "read_records",
]

#: The format's name, in every header.
EXPORT_FORMAT = "strata-export"
#: The version this Strata writes and reads; a reader refuses any other.
EXPORT_VERSION = 1
#: What ``GET /v1/export`` answers with.
EXPORT_MEDIA_TYPE = "application/x-ndjson"


class _Line(BaseModel):
    # Unknown fields refused: a line that does not say what this version means is not guessed at.
    model_config = ConfigDict(extra="forbid")


class EmbedderTag(_Line):
    """The embedder that made the vectors of an export (:class:`strata.store.vector_models.VectorModel`)."""

    provider: str
    model: str
    dim: int


class ExportHeader(_Line):
    kind: Literal["header"] = "header"
    format: str = EXPORT_FORMAT
    version: int = EXPORT_VERSION
    strata_version: str
    tenant: str
    embedder: EmbedderTag
    created_at: datetime
    layers: list[Layer] = Field(description="The layers exported (those the exporting key may read)")
    vectors: bool = Field(default=False, description="Whether records carry their vectors")


class TurnRecord(_Line):
    kind: Literal["turn"] = "turn"
    session_id: str
    turn_id: str
    timestamp: datetime
    user: str | None = None
    agent: str | None = None
    speaker: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    expires_at: datetime | None = None
    vector: list[float] | None = None


class SummaryRecord(_Line):
    """A summary the episodic layer made of a run of turns: exported to be read; restore
    makes summaries again from the turns, as the layer always does."""

    kind: Literal["summary"] = "summary"
    session_id: str
    summary_id: str
    turn_ids: list[str]
    summary: str
    key_topics: list[str] = Field(default_factory=list)
    action_items: list[str] = Field(default_factory=list)
    user_preferences: list[str] = Field(default_factory=list)
    method: str = "extractive"
    fallback_reason: str | None = Field(default=None, description="Why the LLM's summary was not used")


class DocumentRecord(_Line):
    kind: Literal["document"] = "document"
    doc_id: str
    title: str | None = None
    text: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None


class SkillRecord(_Line):
    """A skill as read, and every version of its history, oldest first."""

    kind: Literal["skill"] = "skill"
    skill: SkillOut
    history: list[SkillVersionOut] = Field(default_factory=list)


class WorkingItemRecord(_Line):
    kind: Literal["working_item"] = "working_item"
    session_id: str
    role: str
    content: str
    importance: float
    created_at: datetime
    turn_id: str | None = Field(default=None, description="The turn it is a copy of; null for an item added alone")
    expires_at: datetime | None = None


class ExportEnd(_Line):
    """The last line: how many records came before it (the header and this line not counted)."""

    kind: Literal["end"] = "end"
    records: int


ExportRecord = TurnRecord | SummaryRecord | DocumentRecord | SkillRecord | WorkingItemRecord
_RECORD: TypeAdapter[ExportRecord | ExportEnd] = TypeAdapter(
    Annotated[ExportRecord | ExportEnd, Field(discriminator="kind")]
)


@dataclass(frozen=True)
class ExportLine:
    """One line of an export after the header: its record, or why it could not be read."""

    number: int
    record: ExportRecord | ExportEnd | None
    error: str | None = None


#: One parsed line of an export: the header, a record or the end line.
ExportItem = ExportHeader | ExportRecord | ExportEnd


class ExportReader:
    """An export read strictly, a line at a time (what the HTTP clients' ``export()`` yield):
    the header first, then records, then the end line; anything else is an error, and so is a
    stream that stops before its end line.

    Example::

        reader = ExportReader()
        items = [item for line in lines if (item := reader.read(line)) is not None]
        reader.close()  # raises if the export was cut short
    """

    def __init__(self) -> None:
        self._number = 0
        self._records = 0
        self._header: ExportHeader | None = None
        self._end: ExportEnd | None = None

    def read(self, line: str) -> ExportItem | None:
        """The item ``line`` holds (None for a blank line).

        Raises:
            strata.errors.InvalidInput: a header of another format or version, a line that is
                not a record of this version, or a line after the end line.
        """
        self._number += 1
        if not line.strip():
            return None
        if self._header is None:
            self._header = read_header(line)
            return self._header
        if self._end is not None:
            raise InvalidInput(f"line {self._number} follows the end line")
        (parsed,) = read_records([line], first_number=self._number)
        if parsed.record is None:
            raise InvalidInput(f"line {self._number}: {parsed.error}")
        if isinstance(parsed.record, ExportEnd):
            if parsed.record.records != self._records:
                raise InvalidInput(f"the end line counts {parsed.record.records} records, {self._records} came")
            self._end = parsed.record
        else:
            self._records += 1
        return parsed.record

    def close(self) -> None:
        """Check that the export was whole.

        Raises:
            strata.errors.InvalidInput: it ended before its end line (cut short).
        """
        if self._end is None:
            raise InvalidInput(f"the export ended after {self._records} records without its end line: cut short")


def dump_line(item: ExportHeader | ExportRecord | ExportEnd) -> str:
    """One line of the format, newline included (fields at their default of None left out)."""
    return item.model_dump_json(exclude_none=True) + "\n"


async def export_lines(header: ExportHeader, records: AsyncIterable[ExportRecord]) -> AsyncIterator[str]:
    """The lines of an export, one at a time: ``header``, each of ``records``, the end line."""
    yield dump_line(header)
    count = 0
    async for record in records:
        count += 1
        yield dump_line(record)
    yield dump_line(ExportEnd(records=count))


def read_header(line: str) -> ExportHeader:
    """The header of an export.

    Raises:
        strata.errors.InvalidInput: not a header, or one of another format or version.
    """
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise InvalidInput(f"line 1 is not JSON ({exc}): not a Strata export") from None
    if not isinstance(raw, dict) or raw.get("kind") != "header" or raw.get("format") != EXPORT_FORMAT:
        raise InvalidInput(f"line 1 is not a {EXPORT_FORMAT} header: not a Strata export")
    if raw.get("version") != EXPORT_VERSION:
        raise InvalidInput(
            f"this export is {EXPORT_FORMAT} version {raw.get('version')!r} (written by Strata "
            f"{raw.get('strata_version', '?')}); this Strata reads version {EXPORT_VERSION} only"
        )
    try:
        return ExportHeader.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInput(f"line 1, the header: {_first_error(exc)}") from None


def read_records(lines: Iterable[str], *, first_number: int = 2) -> Iterator[ExportLine]:
    """The records of ``lines`` (the lines after the header), one :class:`ExportLine` each, a
    line that cannot be read among them with its reason. Blank lines are skipped."""
    for number, line in enumerate(lines, start=first_number):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError:
            cut = "" if line.endswith("\n") else " (the file ends inside it: truncated?)"
            yield ExportLine(number, None, f"not a complete JSON line{cut}")
            continue
        try:
            yield ExportLine(number, _RECORD.validate_python(raw))
        except ValidationError as exc:
            yield ExportLine(number, None, _first_error(exc))


def _first_error(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
