"""milvus-lite's reads never fall into a flush's gap (strata.store.milvus_lite.FlushGate).

milvus-lite 3.2.2 empties a collection's memtable before the flushed segment is visible; a
point read in between returned the row's previous value. Real milvus-lite, in this process;
the flush is held open in that gap so the read lands inside it every time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from milvus_lite import CollectionSchema, DataType, FieldSchema, MilvusLite  # type: ignore[import-untyped]
from milvus_lite.engine import collection as engine  # type: ignore[import-untyped]

from strata.store.milvus_lite import FlushGate, serialise_writes

SCHEMA = CollectionSchema(
    fields=[
        FieldSchema(name="id", dtype=DataType.VARCHAR, is_primary=True, max_length=64),
        FieldSchema(name="v", dtype=DataType.INT64),
        FieldSchema(name="vec", dtype=DataType.FLOAT_VECTOR, dim=2),
    ]
)


@pytest.fixture
def held_flush(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Every flush, once it has swapped in an empty memtable, opens its new write-ahead log
    0.3 s late (the gap before the flushed segment is visible); the event is set then."""
    begun = threading.Event()
    class LateWAL(engine.WAL):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            begun.set()
            time.sleep(0.3)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(engine, "WAL", LateWAL)
    yield begun


def test_a_read_during_a_flush_sees_the_last_write(tmp_path: Path, held_flush: threading.Event) -> None:
    serialise_writes()
    with MilvusLite(str(tmp_path)) as db:
        col = db.create_collection("c", SCHEMA)
        col.insert([{"id": "k", "v": 1, "vec": [0.0, 0.0]}])
        col.flush()  # v=1 in a segment
        col.upsert([{"id": "k", "v": 2, "vec": [0.0, 0.0]}])  # v=2 in the memtable: flushed next
        held_flush.clear()
        flushing = threading.Thread(target=col.flush)
        flushing.start()
        assert held_flush.wait(10)
        during = col.get(["k"])
        queried = col.query('id == "k"', output_fields=["v"])
        flushing.join()
        assert [row["v"] for row in during] == [2]  # was [1] before the gate
        assert [row["v"] for row in queried] == [2]
        assert [row["v"] for row in col.get(["k"])] == [2]


def test_a_flush_waits_for_readers_and_new_readers_wait_for_it() -> None:
    gate, order = FlushGate(), []
    reading, release = threading.Event(), threading.Event()

    def reader(name: str, hold: threading.Event | None = None) -> None:
        with gate.read():
            order.append(f"{name} in")
            if hold is not None:
                reading.set()
                assert hold.wait(10)
            with gate.read():  # re-entrant on its thread, even with a flush waiting
                pass
            order.append(f"{name} out")

    def flusher() -> None:
        with gate.flush():
            order.append("flush")

    first = threading.Thread(target=reader, args=("r1", release))
    first.start()
    assert reading.wait(10)
    flush = threading.Thread(target=flusher)
    flush.start()
    time.sleep(0.05)
    late = threading.Thread(target=reader, args=("r2",))
    late.start()
    time.sleep(0.05)
    assert order == ["r1 in"]  # the flush waits for r1; r2 queues behind the flush
    release.set()
    for t in (first, flush, late):
        t.join(10)
    assert order == ["r1 in", "r1 out", "flush", "r2 in", "r2 out"]
