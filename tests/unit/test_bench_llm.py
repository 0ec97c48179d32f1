"""``strata bench llm``'s reading of ``/metrics``: the counts back from Prometheus' text, the
median from the histogram, and what changed between two reads."""

from __future__ import annotations

import pytest

from strata.providers.llm_meter import LLMMeter, prometheus_text
from strata_bench.llm import feature_table, histogram_quantile, parse_metrics

pytestmark = pytest.mark.unit


def test_metrics_text_reads_back_as_the_counts_it_was_made_from() -> None:
    meter = LLMMeter()
    meter.call("summary", seconds=3.0, outcome="ok", tokens_in=500, tokens_out=60)
    meter.call("refine", seconds=8.0, outcome="timeout")
    meter.result("summary", "accepted")
    meter.result("refine", "timeout")
    counts = meter.snapshot().values
    read = parse_metrics(prometheus_text(meter.snapshot()))
    assert {key: value for key, value in read.items() if value} == counts  # the text shows empty buckets too


def test_the_median_is_interpolated_in_its_bucket() -> None:
    assert histogram_quantile(0.5, {}) is None
    # 4 requests: 1 under 1 s, 3 between 2 and 4 s: the 2nd of 4 lies a third into (2, 4].
    buckets = {"0.25": 0, "0.5": 0, "1": 1, "2": 1, "4": 4, "8": 4, "15": 4, "30": 4, "60": 4, "+Inf": 4}
    assert histogram_quantile(0.5, buckets) == pytest.approx(2 + 2 * (1 / 3))
    assert histogram_quantile(0.5, {"60": 0, "+Inf": 3}) == 60.0  # past the last bound: at least it


def test_the_table_is_what_changed_between_two_reads() -> None:
    meter = LLMMeter()
    meter.call("skills", seconds=1.0, outcome="ok")
    meter.result("skills", "accepted")
    before = dict(meter.snapshot().values)
    meter.call("skills", seconds=9.0, outcome="timeout")
    meter.result("skills", "timeout")
    meter.result("skills", "breaker")
    row = feature_table(before, meter.snapshot().values)["skills"]
    assert (row["requests"], row["uses"], row["accepted"]) == (1, 2, 0)
    assert row["fallbacks"] == {"timeout": 1, "breaker": 1}
    assert row["requests_by_outcome"] == {"timeout": 1}
