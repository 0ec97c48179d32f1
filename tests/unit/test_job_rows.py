"""Durable job rows (strata.store.jobs) against the in-memory reference store."""

from __future__ import annotations

import pytest

from strata.ids import SYSTEM_TENANT
from strata.store.jobs import PART_CHARS, JobRow, JobRows
from strata.store.records import InMemoryRecordStore

pytestmark = pytest.mark.unit


@pytest.fixture
def table() -> JobRows:
    store = InMemoryRecordStore()
    store.ensure_collection("state", dim=2)
    return JobRows(store, "state", "semantic")


def test_a_long_text_is_kept_in_parts_and_read_back_whole(table: JobRows) -> None:
    text = "é漢🙂" * (PART_CHARS + 7)  # multi-byte characters across many parts
    row = table.put(JobRow("j1", "t1", "document", {"doc_id": "d"}), text)
    assert row.parts == -(-len(text) // PART_CHARS) > 2
    again = table.get("j1")
    assert again is not None and again.parts == row.parts and again.args == {"doc_id": "d"}
    assert table.text(again) == text


def test_a_missing_part_is_an_error_not_a_shorter_text(table: JobRows) -> None:
    row = table.put(JobRow("j1", "t1", "document"), "x" * (PART_CHARS * 2))
    table._store.delete("state", tenant=SYSTEM_TENANT, pks=[table._part_pk("j1", 1)])
    with pytest.raises(LookupError):
        table.text(row)


def test_sweep_takes_the_owned_pending_jobs_and_deletes_old_ended_ones(table: JobRows) -> None:
    table.put(JobRow("mine", "t-mine", "document"))
    table.put(JobRow("theirs", "t-theirs", "document"))
    table.put(JobRow("running", "t-mine", "document"))
    table.put(JobRow("old", "t-mine", "document").end("done", result={"version": 2}), "gone with it")
    table.put(JobRow("recent", "t-mine", "document").end("failed", error="bad"))
    taken = table.sweep(owns=lambda t: t == "t-mine", running={"running"}, keep_s=0.0)
    assert [j.job_id for j in taken] == ["mine"]
    assert table.get("old") is None  # ended longer ago than keep_s (0)
    kept = table.sweep(owns=lambda t: True, running=set(), keep_s=3600.0)
    assert sorted(j.job_id for j in kept) == ["mine", "running", "theirs"]


def test_a_forget_drops_every_row_of_the_tenant_and_their_parts(table: JobRows) -> None:
    table.put(JobRow("a", "t1", "document"), "y" * (PART_CHARS + 1))
    table.put(JobRow("b", "t1", "skill", {"trace": ["x"]}))
    table.put(JobRow("c", "t2", "skill"))
    assert sorted(j.job_id for j in table.drop_tenant("t1")) == ["a", "b"]
    store = table._store
    left = store.scan("state", tenant=SYSTEM_TENANT)
    assert [r.pk for r in left] == [table._pk("c")]


def test_layers_do_not_see_each_others_jobs(table: JobRows) -> None:
    other = JobRows(table._store, "state", "procedural")
    table.put(JobRow("a", "t1", "document"))
    other.put(JobRow("b", "t1", "skill"))
    assert [j.job_id for j in table.all()] == ["a"] and [j.job_id for j in other.all()] == ["b"]


def test_an_ended_job_keeps_its_row_but_not_its_text(table: JobRows) -> None:
    row = table.put(JobRow("a", "t1", "document"), "z" * (PART_CHARS * 3))
    ended = table.put(row.end("done", result={"version": 1}))
    assert ended.parts == 0
    store = table._store
    assert [r.pk for r in store.scan("state", tenant=SYSTEM_TENANT)] == [table._pk("a")]
    again = table.get("a")
    assert again is not None and again.status == "done" and again.result == {"version": 1}
