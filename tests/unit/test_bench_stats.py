"""strata_bench.stats: the one percentile every published figure uses, and /proc memory."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from strata_bench.stats import cpu_s, latency_ms, median, percentile, processes_memory, rss_mib


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 51.0  # round(0.5 * 99) = 50 -> the 51st value
    assert percentile(values, 0.95) == 95.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0  # unordered input is sorted first
    assert percentile([7.0], 0.99) == 7.0
    with pytest.raises(IndexError):
        percentile([], 0.5)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 10, 11, 60, 199, 200, 800])
@pytest.mark.parametrize("q", [0.0, 0.5, 0.95, 0.99, 1.0])
def test_percentile_is_numpys_nearest_method(n: int, q: float) -> None:
    values = list(np.random.default_rng(n).lognormal(size=n))
    assert percentile(values, q) == np.percentile(values, 100 * q, method="nearest")


def test_median_is_one_of_the_values() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 4.0]) in (2.0, 3.0)  # not their mean


def test_latency_ms_keys_rounding_and_empty() -> None:
    ms = [float(v) + 0.123456 for v in range(1, 101)]
    assert latency_ms(ms) == {"p50_ms": 51.12, "p95_ms": 95.12, "p99_ms": 99.12}
    assert latency_ms(ms, quantiles=(0.5, 0.95), digits=3, prefix="query_") == {
        "query_p50_ms": 51.123, "query_p95_ms": 95.123}
    assert latency_ms(ms, digits=None)["p50_ms"] == ms[50]
    assert latency_ms([]) == {"p50_ms": None, "p95_ms": None, "p99_ms": None}


def test_memory_and_cpu_of_this_process() -> None:
    assert rss_mib() > 10 and rss_mib(os.getpid()) > 10
    assert rss_mib(peak=True) > 10
    assert math.isnan(rss_mib(2**22 + 1))  # above pid_max: no such process
    both = processes_memory([os.getpid(), 2**22 + 1])
    assert both["processes"] == 1 and both["rss_mib"] > 10
    assert both["largest"][0]["process"].endswith(f"({os.getpid()})")
    assert cpu_s() > 0
