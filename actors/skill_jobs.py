"""The procedural layer's skill-extraction jobs: a trace in, a skill learned from it, at least once.

Learning is at-least-once. The trace is written first, as a job row (:mod:`strata.store.jobs`:
the state collection, under the system tenant, in the procedural layer's session of jobs, so
every procedural shard finds them without knowing their tenants); the skill is written next;
the job row then says ``done`` and which skill, for a while. A failed LLM leaves the job to be
retried in the background with backoff, then by the rule extractor. The shard that owns the
job's tenant now runs it: each shard scans the rows when it starts and every
:data:`SCAN_S` after, so a job outlives its shard's death, a restart, and a move of its tenant
to another shard (docs/scaling.md); a shard that lost a tenant lets its jobs go, unfinished,
to the new owner. A job retried after its skill was written merges into that skill (the same
draft adds nothing but a version). A read of a job answers from the row where the shard does
not hold the job in memory: the same on every shard.

A forget of the tenant deletes its jobs' rows; a job attempt still running
then is refused when it comes to write the skill (it began at an older
:meth:`LayerShard.generation`), and keeps no row, so nothing it learned
outlives the forget.

:class:`SkillJobs` is the base of :class:`~strata_actors.procedural.ProceduralShard`, which adds
the skills' reads, outcomes, edits and deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from strata.errors import InvalidInput, LLMError, NotFound, StrataError, TenantMoved, VersionConflict
from strata.ids import SYSTEM_TENANT, validate_id
from strata.procedural.extractors import (
    LLMSkillExtractor,
    RuleSkillExtractor,
    SkillDraft,
    SkillExtractor,
    make_skill_extractor,
    skill_search_text,
)
from strata.procedural.memory import ProceduralMemory, new_skill_id
from strata.providers.llm import make_llm
from strata.store.jobs import SCAN_S, JobRow, JobRows
from strata_actors.residency import CALLER_EPOCH, KeyedLocks
from strata_actors.shard import LayerShard

__all__ = ["SkillJobs"]

_log = logging.getLogger(__name__)
#: The kind of the rows skill jobs were kept in before :mod:`strata.store.jobs` (one session per shard).
_LEGACY_JOB = "skill_job"
_DONE_KEEP_S = 600.0
#: Attempts after which a job stops being retried (kept, with its error, for inspection).
_GIVE_UP_AFTER = 3


@dataclass
class _Job:
    job_id: str
    tenant: str
    task: str
    trace: list[Any]
    outcome: str | None
    by: str
    created_at: str
    attempts: int = 0
    error: str | None = None
    status: str = "pending"  # pending | running | done | failed
    skill_id: str | None = None
    next_at: float = 0.0  # time.monotonic() of the next attempt
    finished: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: The tenant's generation when the job was made: a forget since ends it (not in the row).
    generation: int = 0

    def row(self) -> JobRow:
        """The job's row: its status, ``pending`` while it may still run."""
        status = self.status if self.status in ("done", "failed") else "pending"
        # An ended job's row keeps no trace: it may be written after a forget began.
        args = {} if status != "pending" else {
            "task": self.task, "trace": self.trace, "outcome": self.outcome, "by": self.by,
            "created_at": self.created_at, **self.extra,
        }
        result = {"skill_id": self.skill_id} if self.skill_id else None
        row = JobRow(self.job_id, self.tenant, "skill", args, status=status, attempts=self.attempts, error=self.error)
        return row.end(status, error=self.error, result=result) if status != "pending" else row

    @classmethod
    def of_row(cls, row: JobRow) -> _Job:
        a = row.args
        return cls(
            job_id=row.job_id, tenant=row.tenant, task=str(a.get("task", "")), trace=list(a.get("trace") or []),
            outcome=a.get("outcome"), by=str(a.get("by", "")), created_at=str(a.get("created_at", "")),
            attempts=row.attempts, error=row.error, status=row.status,
            skill_id=(row.result or {}).get("skill_id"),
            finished=time.monotonic() if row.ended else None,
            extra={k: v for k, v in a.items() if k not in _JOB_FIELDS},
        )

    def view(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "status": self.status,
            "attempts": self.attempts,
            "error": self.error,
            "skill_id": self.skill_id,
        }


#: The keys of a job row's args (or a legacy row's payload) that are fields of :class:`_Job`;
#: the others are its ``extra``.
_JOB_FIELDS = frozenset(
    ("job_id", "tenant", "task", "trace", "outcome", "by", "created_at", "attempts", "error", "status")
)


def _extract(extractor: SkillExtractor, job: _Job, deadline: float | None = None) -> SkillDraft:
    try:
        if deadline is not None and isinstance(extractor, LLMSkillExtractor):
            draft = extractor.extract(job.task, job.trace, job.outcome, deadline=deadline)
        else:
            draft = extractor.extract(job.task, job.trace, job.outcome)
    except ValueError as exc:  # the extractors' word for an input they cannot use
        raise InvalidInput(f"the trace cannot be learned from: {exc}", field="trace") from None
    if not draft.steps:
        raise InvalidInput("the trace has no successful step to learn from", field="trace")
    return draft


class SkillJobs(LayerShard[ProceduralMemory]):
    """The procedural shard's learning: skill-extraction jobs, kept durably until learned."""

    def __init__(self, settings: dict[str, Any], shard: int) -> None:
        super().__init__(settings, shard)
        self.llm = make_llm(self.settings.llm)
        self._extractor = make_skill_extractor(self.llm)
        self._rules = RuleSkillExtractor()
        self._learning = KeyedLocks()
        self._jobs: dict[str, _Job] = {}
        self._jobs_loop: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def forget_derived(self, tenant: str) -> int:
        """The tenant's skill jobs, in memory and in the store (those of other shards' lives
        too): they hold its traces."""
        for job in [job for job in self._jobs.values() if job.tenant == tenant]:
            self._jobs.pop(job.job_id, None)
        return len(await asyncio.to_thread((await self._job_rows()).drop_tenant, tenant))

    async def _backend(self) -> Any:
        backend = await super()._backend()
        if self._jobs_loop is None:
            self._jobs_loop = asyncio.get_running_loop().create_task(self._run_jobs())
        return backend

    # -- learning ---------------------------------------------------------------

    async def extract_skill(
        self, tenant: str, task: str, trace: list[Any], outcome: str | None = None, *, by: str = "",
        ttl_s: float | None = None,
    ) -> dict[str, Any]:
        """Learn a skill from a trace now; returns it, its version and whether it merged.

        Raises:
            LLMError: the LLM failed or answered garbage twice; the trace is
                kept and learned in the background (``job_id`` in the error).
        """
        job = await self._enqueue(tenant, task, trace, outcome, by, extra={"ttl_s": ttl_s} if ttl_s else None)
        try:
            # The caller waits: the LLM has llm.request_timeout_s, once; the job retries later.
            return await self._attempt(job, deadline=time.monotonic() + self.settings.llm.request_timeout_s)
        except TenantMoved:
            # The caller's handle sends the trace to the tenant's new owner: this job must not learn it too.
            with contextlib.suppress(StrataError):
                await self._drop_job(job)
            raise
        except LLMError as exc:
            raise LLMError(
                f"{exc.message}; nothing is lost: the trace is kept as job {job.job_id} and "
                "learned in the background (GET /v1/skill-jobs/{job_id})",
                job_id=job.job_id,
            ) from None

    async def learn_later(
        self, tenant: str, task: str, trace: list[Any], outcome: str | None = None, *, by: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Keep the trace durably and learn from it in the background; returns the job."""
        job = await self._enqueue(tenant, task, trace, outcome, by, extra=extra)
        job.status = "pending"
        self._wake.set()
        return job.view()

    async def skill_job(self, tenant: str, job_id: str) -> dict[str, Any]:
        """The job as this shard runs it, else as its row says (a job of another shard's life)."""
        await self._tenant(tenant)  # the owner answers, as for every call of the tenant
        job = self._jobs.get(validate_id(job_id, field="job_id"))
        if job is None:
            row = await asyncio.to_thread((await self._job_rows()).get, job_id)
            job = None if row is None else _Job.of_row(row)
        if job is None or job.tenant != tenant:
            raise NotFound(f"no skill job {job_id!r}: it never existed, or finished more than 10 minutes ago")
        return job.view()

    async def _enqueue(
        self, tenant: str, task: str, trace: list[Any], outcome: str | None, by: str,
        extra: Mapping[str, Any] | None = None,
    ) -> _Job:
        """A durable job, ``running`` in memory: the caller attempts it or marks it pending.

        The job is known in memory before its row is written: the job loop's first
        scan of the rows (at the actor's first call) may read the new row, and must
        skip it rather than learn the trace a second time beside the caller (seen as
        a direct extraction answering ``merged`` in a fresh tenant).
        """
        validate_id(tenant, field="tenant")
        # A trace sent while the tenant is being forgotten is refused before it is kept: its
        # job would learn it into the emptied tenant after the caller was told 503.
        await self._tenant(tenant)  # the owner only; its load reads the tenant's tombstones
        await self.refuse_if_forgetting(tenant, "skill-job")
        job = _Job(
            job_id=f"job-{uuid.uuid4().hex[:16]}",
            tenant=tenant,
            task=task,
            trace=list(trace),
            outcome=outcome,
            by=by,
            created_at=datetime.now(UTC).isoformat(),
            extra=dict(extra or {}),
            status="running",
            generation=self.generation(tenant),
        )
        self._jobs[job.job_id] = job
        try:
            await self._save_job(job)  # durable before anything can fail
            if self._forgotten(job):
                # A forget began while the row was written: it may have deleted the row
                # before it landed. The trace must not outlive the forget.
                await self._drop_job(job)
                raise self._forgotten_error(job)
        except BaseException:
            self._jobs.pop(job.job_id, None)
            raise
        return job

    def _forgotten(self, job: _Job) -> bool:
        """The job's tenant was forgotten since the job was made (or is being forgotten)."""
        return job.generation % 2 == 1 or job.generation != self.generation(job.tenant)

    def _discard(self, job: _Job) -> VersionConflict:
        """End a job whose tenant was forgotten (the forget deleted its row): nothing is kept."""
        job.status, job.finished, job.error = "failed", time.monotonic(), "the tenant was forgotten"
        self._jobs.pop(job.job_id, None)
        return self._forgotten_error(job)

    def _forgotten_error(self, job: _Job) -> VersionConflict:
        return VersionConflict(
            f"the tenant was forgotten while skill job {job.job_id} was learning: nothing was kept; "
            "send the trace again to learn it in the emptied tenant",
            current_version=0,
            layer=self.layer_name,
            job_id=job.job_id,
        )

    async def _attempt(self, job: _Job, *, deadline: float | None = None) -> dict[str, Any]:
        if self._forgotten(job):  # due before a forget dropped it: not worth an LLM call
            raise self._discard(job)
        job.status = "running"
        use_llm = job.attempts < self.settings.procedural.job_max_attempts
        extractor = self._extractor if use_llm else self._rules
        try:
            async with self.on_behalf_of(job.tenant):
                draft = await asyncio.to_thread(_extract, extractor, job, deadline)
            result = await self._learn(
                job.tenant, draft, task=job.task, by=job.by, ttl_s=job.extra.get("ttl_s"), generation=job.generation
            )
        except InvalidInput as exc:
            if self._forgotten(job):
                raise self._discard(job) from None
            # Not worth a retry: the same trace fails the same way. The caller of a
            # direct extraction has its input and the 422; a background job says why.
            job.status, job.finished, job.error = "failed", time.monotonic(), exc.message
            job.attempts += 1
            try:
                await self._drop_job(job)
            except StrataError as store_error:  # the 422 is the answer; the row fails the same way next start
                _log.warning("skill job %s cannot be learned and its row stays: %s", job.job_id, store_error.message)
            raise
        except TenantMoved:
            # The tenant moved to another shard, which takes the job up from its row: not an attempt.
            job.status = "pending"
            self._jobs.pop(job.job_id, None)
            raise
        except BaseException as exc:
            if self._forgotten(job):
                raise self._discard(job) from None
            job.attempts += 1
            job.error = exc.message if isinstance(exc, StrataError) else f"{type(exc).__name__}: {exc}"
            job.status = "pending"
            job.next_at = time.monotonic() + self.settings.procedural.job_retry_s * 2 ** (job.attempts - 1)
            if job.attempts >= self.settings.procedural.job_max_attempts + _GIVE_UP_AFTER:
                job.status, job.finished = "failed", time.monotonic()
                _log.error("skill job %s failed for good: %s", job.job_id, job.error)
            # On a store error the row keeps its older attempt count; the job stays in memory.
            with contextlib.suppress(StrataError):
                await self._save_job(job)
            self._wake.set()
            raise
        job.status, job.skill_id, job.error, job.finished = "done", result["skill_id"], None, time.monotonic()
        try:
            await self._save_job(job)  # done, and which skill: a read on any shard says so
        except StrataError as exc:  # learned; a retry after a restart merges into the same skill
            _log.warning("skill job %s learned but its row still says pending: %s", job.job_id, exc.message)
        return result

    async def _learn(
        self, tenant: str, draft: SkillDraft, *, task: str, by: str, ttl_s: float | None = None,
        generation: int | None = None,
    ) -> dict[str, Any]:
        vector = (await self.embed([skill_search_text(draft)], tenant=tenant))[0]
        # One learning at a time per tenant: two near-duplicates learned at once
        # must find each other instead of both creating a skill.
        async with self._learning.hold(tenant):
            slot = await self._tenant(tenant)
            target = slot.layer.duplicate_of(vector)
            skill_id = target or new_skill_id()
            now = datetime.now(UTC)
            skill, version = await self.mutate_versioned(
                tenant,
                skill_id,
                None,
                lambda layer, v: layer.write_learned(
                    skill_id, draft, vector, embed=lambda text: self._embed_one(text, tenant), task=task, by=by,
                    version=v, now=now, ttl_s=ttl_s,
                ),
                lambda layer, pending: layer.apply(pending),
                generation=generation,
            )
        return {**skill.to_dict(), "version": version, "merged": target is not None}

    def _embed_one(self, text: str, tenant: str) -> np.ndarray:
        """Blocking: for a write step that must embed a merged or edited skill's new text."""
        vector: np.ndarray = self.embed_now([text], tenant=tenant)[0]
        return vector

    # -- the job rows -------------------------------------------------------------

    async def _job_rows(self) -> JobRows:
        store, collections, _ = await self._backend()
        return JobRows(store, collections.state, self.layer_name)

    async def _save_job(self, job: _Job) -> None:
        await asyncio.to_thread((await self._job_rows()).put, job.row())

    async def _drop_job(self, job: _Job) -> None:
        await asyncio.to_thread((await self._job_rows()).drop, [job.row()])

    async def _adopt_jobs(self) -> None:
        """Take up the jobs of the tenants this shard owns now that it does not hold (its own
        after a restart, a dead or retired shard's, a moved tenant's); let go of those of the
        tenants it no longer owns (their new owner takes them up)."""
        for job_id, job in list(self._jobs.items()):
            if job.status == "pending" and not self._owns(job.tenant):
                del self._jobs[job_id]
        table = await self._job_rows()
        generations = dict(self._generations)  # a forget while the rows are read deletes some of them
        rows = await asyncio.to_thread(table.sweep, owns=self._owns, running=self._jobs, keep_s=_DONE_KEEP_S)
        rows = [
            r for r in rows if self.generation(r.tenant) == generations.get(r.tenant, 0) and r.job_id not in self._jobs
        ]
        for row in rows:
            self._jobs[row.job_id] = replace(_Job.of_row(row), generation=self.generation(row.tenant))
        if rows:
            _log.info("procedural shard %d took up %d skill jobs", self.shard, len(rows))

    async def _adopt_legacy_jobs(self) -> None:
        """Rows of the form before :mod:`strata.store.jobs` (one session per shard, kind
        ``skill_job``) become job rows: once, by the shard of that number."""
        store, collections, _ = await self._backend()
        session = f"skilljobs-{self.shard}"
        rows = await asyncio.to_thread(
            store.scan, collections.state, tenant=SYSTEM_TENANT, session=session, kinds=[_LEGACY_JOB],
            with_vectors=False,
        )
        for row in rows:
            p = row.payload
            job = _Job(
                job_id=p["job_id"], tenant=p["tenant"], task=p["task"], trace=p["trace"], outcome=p.get("outcome"),
                by=p.get("by", ""), created_at=p.get("created_at", ""), attempts=int(p.get("attempts", 0)),
                error=p.get("error"), status="failed" if p.get("status") == "failed" else "pending",
                extra={k: v for k, v in p.items() if k not in _JOB_FIELDS},
            )
            await self._save_job(job)
        if rows:
            await asyncio.to_thread(store.delete, collections.state, tenant=SYSTEM_TENANT, pks=[r.pk for r in rows])
            _log.info("procedural shard %d moved %d skill jobs to the layer's job rows", self.shard, len(rows))

    async def _run_jobs(self) -> None:
        """Retry pending jobs when they are due; runs for the life of the actor."""
        CALLER_EPOCH.set(None)  # a loop of the shard's own, not of the call that started it
        while True:
            try:
                await self._adopt_legacy_jobs()
                break
            except StrataError as exc:
                _log.warning("cannot read skill jobs yet: %s", exc.message)
                await asyncio.sleep(self.settings.procedural.job_retry_s)
        scanned = -SCAN_S
        while True:
            now = time.monotonic()
            if now - scanned >= SCAN_S:
                try:
                    await self._adopt_jobs()
                    scanned = now
                except StrataError as exc:
                    _log.warning("cannot read skill jobs now: %s", exc.message)
            for job_id, job in list(self._jobs.items()):
                if job.finished is not None and job.finished < now - _DONE_KEEP_S:
                    del self._jobs[job_id]
            due = [j for j in self._jobs.values() if j.status == "pending" and j.next_at <= now]
            for job in due:
                try:
                    await self._attempt(job)
                except Exception as exc:
                    _log.warning("skill job %s attempt %d failed: %s", job.job_id, job.attempts, exc)
            waiting = [j.next_at for j in self._jobs.values() if j.status == "pending"]
            delay = max(0.05, min([*waiting, scanned + SCAN_S]) - time.monotonic())
            self._wake.clear()
            with contextlib.suppress(TimeoutError):  # due, or woken by a new job: either way, look again
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
