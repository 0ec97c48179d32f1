"""Durable background jobs: the rows a layer writes before it acknowledges work it does later.

Work a shard acknowledges and finishes in the background (a document indexed with
``wait=false``, a skill learned from a trace) is a :class:`JobRow` in the state collection,
written before the call is answered, so it outlives the actor that took it, a move of its tenant
(docs/scaling.md) and a node's death. The rows of a layer's jobs are under the system tenant, in
one session per layer (``jobs-<layer>``): every shard of the layer finds them with one scan,
without knowing their tenants, and runs those of the tenants it owns now. A large input (a
document's text, up to 20,000,000 characters) is kept in part rows of at most
:data:`PART_CHARS` each (a row's text holds 65,535 bytes), written before the job row, so a job
row never names a part that is not there.

The row says where the job is (``pending``, ``running``, ``done``, ``failed``) and, once it
ended, its result or error and when: a read of a job answers from the row on any shard and
after any restart. Ended rows are deleted by their layer's shards a while after they ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field, replace
from typing import Any

from strata.ids import SYSTEM_TENANT
from strata.store.records import Record, RecordStore

__all__ = ["ENDED", "PART_CHARS", "SCAN_S", "JobRow", "JobRows", "now_ms"]

_JOB = "job"
_PART = "job_part"
#: Characters of input per part row: 4 bytes a character at worst stay under a row's 65,535.
PART_CHARS = 16_000
#: The statuses of a job that will not run again.
ENDED = frozenset({"done", "failed"})
#: How often each shard scans its layer's job rows for jobs of the tenants it owns now.
SCAN_S = 5.0
#: Part rows written per store call.
_PARTS_PER_WRITE = 256


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch: when a job was made or ended."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class JobRow:
    """One background job of a layer, as its row holds it."""

    job_id: str
    tenant: str
    #: What the job does, for its layer (``document``, ``skill``).
    kind: str
    #: The job's inputs other than its text (JSON).
    args: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"  # pending | running | done | failed
    attempts: int = 0
    error: str | None = None
    #: What a read of the finished job answers (JSON), when done.
    result: dict[str, Any] | None = None
    created_ms: int = field(default_factory=now_ms)
    ended_ms: int | None = None
    #: How many part rows hold the job's text (0: none).
    parts: int = 0

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def end(self, status: str, *, error: str | None = None, result: dict[str, Any] | None = None) -> JobRow:
        """The row of the job ended as ``status``."""
        return replace(self, status=status, error=error, result=result, ended_ms=now_ms())


class JobRows:
    """A layer's job rows in ``collection`` (the state collection)."""

    def __init__(self, store: RecordStore, collection: str, layer: str) -> None:
        self._store = store
        self._collection = collection
        self._layer = layer
        self._session = f"jobs-{layer}"

    def put(self, job: JobRow, text: str | None = None) -> JobRow:
        """Write the job's row (and first its text's parts, when ``text`` is given); returns
        the row as written (with its part count). An ended job's row keeps no parts: they go
        once the row says it ended."""
        if job.ended and job.parts:
            ended = replace(job, parts=0)
            self._store.upsert(self._collection, [self._row(ended)])
            self._drop_parts([job])
            return ended
        if text is not None:
            pieces = [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)]
            rows = [self._part(job, n, piece) for n, piece in enumerate(pieces)]
            for start in range(0, len(rows), _PARTS_PER_WRITE):
                self._store.upsert(self._collection, rows[start : start + _PARTS_PER_WRITE])
            job = replace(job, parts=len(pieces))
        self._store.upsert(self._collection, [self._row(job)])
        return job

    def get(self, job_id: str) -> JobRow | None:
        rows = self._store.get(self._collection, tenant=SYSTEM_TENANT, pks=[self._pk(job_id)])
        return _job(rows[0]) if rows else None

    def all(self) -> list[JobRow]:
        """Every job row of the layer (not their parts)."""
        rows = self._store.scan(
            self._collection, tenant=SYSTEM_TENANT, session=self._session, kinds=[_JOB], with_vectors=False
        )
        return [_job(row) for row in rows]

    def text(self, job: JobRow) -> str:
        """The job's text, from its parts.

        Raises:
            LookupError: a part is missing (deleted by a forget of the tenant meanwhile).
        """
        if not job.parts:
            return ""
        rows = self._store.get(
            self._collection, tenant=SYSTEM_TENANT, pks=[self._part_pk(job.job_id, n) for n in range(job.parts)]
        )
        by_n = {int(r.payload["n"]): r.text for r in rows}
        if len(by_n) != job.parts:
            raise LookupError(f"job {job.job_id} has {len(by_n)} of its {job.parts} parts")
        return "".join(by_n[n] for n in range(job.parts))

    def sweep(self, *, owns: Callable[[str], bool], running: Container[str], keep_s: float) -> list[JobRow]:
        """The jobs a shard should take up now: not ended, of a tenant it ``owns``, not
        ``running`` already; deletes the rows of jobs that ended over ``keep_s`` ago."""
        rows = self.all()
        cutoff = now_ms() - int(keep_s * 1000)
        stale = [r for r in rows if r.ended and (r.ended_ms or 0) <= cutoff]
        self.drop(stale)
        return [r for r in rows if not r.ended and r.job_id not in running and owns(r.tenant)]

    def drop_tenant(self, tenant: str) -> list[JobRow]:
        """Delete every job row of ``tenant`` (a forget: they hold its inputs); returns them."""
        doomed = [r for r in self.all() if r.tenant == tenant]
        self.drop(doomed)
        return doomed

    def drop(self, jobs: list[JobRow]) -> int:
        """Delete the jobs' rows: the job rows first (a job row never names a missing part
        for long), then their parts."""
        if not jobs:
            return 0
        removed = self._store.delete(
            self._collection, tenant=SYSTEM_TENANT, pks=[self._pk(j.job_id) for j in jobs]
        )
        self._drop_parts(jobs)
        return removed

    def _drop_parts(self, jobs: list[JobRow]) -> None:
        parts = [self._part_pk(j.job_id, n) for j in jobs for n in range(j.parts)]
        for start in range(0, len(parts), _PARTS_PER_WRITE):
            self._store.delete(self._collection, tenant=SYSTEM_TENANT, pks=parts[start : start + _PARTS_PER_WRITE])

    # -- rows ---------------------------------------------------------------------------

    def _pk(self, job_id: str) -> str:
        return f"{SYSTEM_TENANT}/{_JOB}/{self._layer}/{job_id}"

    def _part_pk(self, job_id: str, n: int) -> str:
        return f"{self._pk(job_id)}/{n}"

    def _row(self, job: JobRow) -> Record:
        return Record(
            pk=self._pk(job.job_id), tenant=SYSTEM_TENANT, session=self._session, kind=_JOB, ts_ms=job.created_ms,
            text="",
            payload={
                "job_id": job.job_id, "tenant": job.tenant, "kind": job.kind, "args": job.args,
                "status": job.status, "attempts": job.attempts, "error": job.error, "result": job.result,
                "ended_ms": job.ended_ms, "parts": job.parts,
            },
        )

    def _part(self, job: JobRow, n: int, text: str) -> Record:
        return Record(
            pk=self._part_pk(job.job_id, n), tenant=SYSTEM_TENANT, session=f"{self._session}-parts", kind=_PART,
            ts_ms=job.created_ms, text=text, payload={"job_id": job.job_id, "n": n},
        )


def _job(row: Record) -> JobRow:
    p = row.payload
    return JobRow(
        job_id=str(p["job_id"]), tenant=str(p["tenant"]), kind=str(p.get("kind", "")), args=dict(p.get("args") or {}),
        status=str(p.get("status", "pending")), attempts=int(p.get("attempts", 0)), error=p.get("error"),
        result=p.get("result"), created_ms=row.ts_ms, ended_ms=p.get("ended_ms"), parts=int(p.get("parts", 0)),
    )
