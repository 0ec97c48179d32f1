"""``strata bench depth``'s pure parts: the steps, the tenant that moves, the reader's wait,
where the context p95 holds, and the report (its table and plot) from a measured run's shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strata_actors.placement import owner_shard
from strata_bench.service.depth import (
    format_table,
    holds_until,
    longest_wait_ms,
    moving_tenant,
    parse_steps,
    plot,
    summarize,
)

pytestmark = pytest.mark.unit


def test_steps_read_thousands_and_must_ascend() -> None:
    assert parse_steps("1k,10k, 30k ,100k") == [1000, 10_000, 30_000, 100_000]
    assert parse_steps("500,1.5k") == [500, 1500]
    for bad in ("1k,1k", "10k,1k", "0,5", "ten", "1k,,2k", "-5"):
        with pytest.raises(ValueError):
            parse_steps(bad)


@pytest.mark.parametrize("shards", [1, 2, 3, 7])
def test_the_tenant_moves_to_the_new_shard_and_back(shards: int) -> None:
    tenant = moving_tenant("depth-abc", shards, owner_shard)
    assert owner_shard(tenant, shards + 1) == shards
    assert owner_shard(tenant, shards) != shards  # shrinking back moves it home
    assert moving_tenant("depth-abc", shards, owner_shard) == tenant  # the same placement every time


def test_longest_wait_counts_reads_answered_since_the_change() -> None:
    reads = [(0.0, 5.0), (10.0, 10.02), (10.03, 13.5), (13.51, 13.53)]
    assert longest_wait_ms(reads, since=10.0) == 3470.0
    assert longest_wait_ms(reads, since=4.0) == 5000.0  # a read begun before, answered after, counts
    assert longest_wait_ms(reads, since=20.0) is None


def _step(turns: int, p95: float, loaded_mib: float | None = 400.0, *, moved: bool = True) -> dict[str, Any]:
    return {
        "turns": turns,
        "ingest": {"turns_per_s": 80.0, "seconds": turns / 80},
        "context": {"p50_ms": p95 / 2, "p95_ms": p95, "p99_ms": p95, "calls": 40},
        "search": {"p50_ms": p95 / 3, "p95_ms": p95 / 2, "p99_ms": p95 / 2, "calls": 40},
        "rss": {"empty_mib": 300.0, "loaded_mib": loaded_mib,
                "per_turn_kib": None if loaded_mib is None else (loaded_mib - 300.0) * 1024 / turns},
        "cold": {"first_search_ms": turns * 0.2},
        "move": {"grow": {"longest_wait_ms": 1500.0}, "shrink": {"longest_wait_ms": 900.0}} if moved
        else {"skipped": "--no-move"},
    }


def test_holds_until_the_first_step_past_twice_the_first_p95() -> None:
    steps = [_step(1000, 40), _step(10_000, 70), _step(30_000, 78), _step(100_000, 200), _step(200_000, 60)]
    assert holds_until(steps) == 30_000  # 200 > 2 x 40, and a later fast step does not count
    assert holds_until(steps, factor=10) == 200_000
    assert holds_until(steps[:1]) == 1000
    assert holds_until([]) is None


def test_report_rows_table_and_plot(tmp_path: Path) -> None:
    raw = {"command": "strata bench depth", "commit": "abc1234", "text": "templates", "tenant": "depth-x-0",
           "machine": {"cpu_count": 2, "load_average_start": (1.0, 1, 1), "load_average_end": (3.0, 2, 2)},
           "steps": [_step(1000, 40, 310.0), _step(10_000, 60, 400.0), _step(30_000, 80, None, moved=False)]}
    doc = summarize(raw)
    first, second, third = doc["rows"]
    assert first["rss_added_per_turn_kib"] is None
    assert second["rss_added_per_turn_kib"] == round(90 * 1024 / 9000, 2)
    assert third["rss_per_turn_kib"] is None and third["move_wait_grow_ms"] is None
    assert second["move_wait_grow_ms"] == 1500.0 and second["cold_first_search_ms"] == 2000.0
    assert doc["context_p95_holds_to_turns"] == 30_000
    table = format_table(doc)
    assert "| 10,000 | 80.0 | 30 ms | 60 ms |" in table and "| – |" in table
    assert table.endswith("up to 30,000 turns (of 30,000 measured)")
    pytest.importorskip("matplotlib")
    plot(doc, tmp_path / "depth.png")
    assert (tmp_path / "depth.png").stat().st_size > 10_000
