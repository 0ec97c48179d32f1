"""Placement by rendezvous hashing (issue 42): growing a layer by one shard moves about 1/(n+1)
of the tenants, shrinking it moves only the removed shard's, and every process agrees."""

from __future__ import annotations

import subprocess
import sys

import pytest

from strata_actors.placement import owner_shard

TENANTS = [f"tenant-{i:05d}" for i in range(10_000)]
#: How far the measured fraction may stray from 1/(n+1): the binomial standard deviation at
#: 10,000 tenants is at most 0.5 percentage points, and this is three of them.
TOLERANCE = 0.015


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 15])
def test_growing_by_one_moves_about_one_in_n_plus_one(n: int) -> None:
    before = [owner_shard(t, n) for t in TENANTS]
    after = [owner_shard(t, n + 1) for t in TENANTS]
    moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert abs(len(moved) / len(TENANTS) - 1 / (n + 1)) < TOLERANCE
    assert all(a == n for _, a in moved), "a tenant that moved went somewhere other than the new shard"


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_shrinking_moves_only_the_removed_shards_tenants(n: int) -> None:
    for t in TENANTS:
        before = owner_shard(t, n)
        if before < n - 1:
            assert owner_shard(t, n - 1) == before, t


def test_shards_share_the_tenants_evenly() -> None:
    counts = [0] * 4
    for t in TENANTS:
        counts[owner_shard(t, 4)] += 1
    assert all(abs(c / len(TENANTS) - 0.25) < TOLERANCE for c in counts), counts


def test_every_process_computes_the_same_owner() -> None:
    """No per-process salt (Python's ``hash()`` of a str differs between processes)."""
    sample = TENANTS[:200]
    code = (
        "from strata_actors.placement import owner_shard\n"
        f"print(','.join(str(owner_shard(t, 5)) for t in {sample!r}))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345"})
    assert other.stdout.strip() == ",".join(str(owner_shard(t, 5)) for t in sample)


def test_one_shard_owns_everything_and_none_is_refused() -> None:
    assert {owner_shard(t, 1) for t in TENANTS[:100]} == {0}
    with pytest.raises(ValueError):
        owner_shard("acme", 0)
