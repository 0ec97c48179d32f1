"""Deleted rows leave milvus-lite's files (strata.store.erasure): real milvus-lite in this
process for the erasure, a recorded callable for its schedule."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from milvus_lite import CollectionSchema, DataType, FieldSchema, MilvusLite  # type: ignore[import-untyped]

from strata.store.erasure import EraseSchedule, erase_deleted

SCHEMA = CollectionSchema(
    fields=[
        FieldSchema(name="id", dtype=DataType.VARCHAR, is_primary=True, max_length=64),
        FieldSchema(name="text", dtype=DataType.VARCHAR, max_length=256),
        FieldSchema(name="vec", dtype=DataType.FLOAT_VECTOR, dim=2),
    ]
)


def _holding(root: Path, text: str) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes())


def test_deleted_rows_leave_the_log_and_the_segments_and_the_others_stay(tmp_path: Path) -> None:
    with MilvusLite(str(tmp_path)) as db:
        col = db.create_collection("c", SCHEMA)
        col.insert([{"id": f"k{i}", "text": f"kept-{i}", "vec": [0.0, 1.0]} for i in range(20)])
        col.insert([{"id": "flushed", "text": "Plumbarosk", "vec": [1.0, 0.0]},
                    {"id": "spared", "text": "Tarnowelde", "vec": [1.0, 0.0]}])
        col.flush()
        col.insert([{"id": "logged", "text": "Qorvilantix", "vec": [1.0, 0.0]}])
        col.delete(["flushed", "logged"])
        assert _holding(tmp_path, "Plumbarosk") and _holding(tmp_path, "Qorvilantix")  # a segment, the log

        assert erase_deleted(col) == 1  # the one segment holding a deleted row
        assert _holding(tmp_path, "Plumbarosk") == [] and _holding(tmp_path, "Qorvilantix") == []
        assert _holding(tmp_path, "Tarnowelde") and len(col.get([f"k{i}" for i in range(20)] + ["spared"])) == 21
        assert col.get(["flushed", "logged"]) == []
        assert erase_deleted(col) == 0


def test_deletes_in_the_window_share_one_erasure_and_one_during_it_gets_another() -> None:
    erased: list[str] = []
    running, release = threading.Event(), threading.Event()

    def erase(collection: str) -> None:
        erased.append(collection)
        if len(erased) == 1:
            running.set()
            assert release.wait(10)

    schedule = EraseSchedule(erase, after_s=0.2)
    started = time.monotonic()
    schedule.deleted("a")
    schedule.deleted("a")
    assert running.wait(10) and time.monotonic() - started >= 0.2
    schedule.deleted("a")  # during the erasure: its rows may be newer than the flush
    release.set()
    assert schedule.wait_idle(10)
    assert erased == ["a", "a"]


def test_a_failed_erasure_is_logged_and_the_next_delete_asks_again() -> None:
    calls: list[str] = []

    def erase(collection: str) -> None:
        calls.append(collection)
        if len(calls) == 1:
            raise RuntimeError("the store is down")

    schedule = EraseSchedule(erase, after_s=0.0)
    schedule.deleted("a")
    assert schedule.wait_idle(10)
    schedule.deleted("a")
    assert schedule.wait_idle(10)
    assert calls == ["a", "a"]
