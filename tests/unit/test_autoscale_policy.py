"""The autoscaling policy's decisions (issue 42), a pure function of load samples, and the load
counters a shard answers; no Ray."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from strata.config import AutoscaleSettings
from strata_actors.autoscale import LayerSample, decide
from strata_actors.load import METERED_CALLS, CallMeter, LoadReading, ShardLoad

POLICY = AutoscaleSettings(enabled=True, interval_s=1, grow_busy=0.7, grow_queue=8, grow_window_s=3,
                           shrink_busy=0.2, shrink_queue=1, shrink_window_s=10, max_shards=4)
HOT, WARM, COLD = (0.9, 2.0), (0.5, 2.0), (0.05, 0.0)


def _samples(*loads: tuple[float, float], shards: int = 2, start_s: float = 100.0) -> list[LayerSample]:
    """One sample a second, ``(busy, queue)`` each."""
    return [LayerSample(start_s + i, shards, busy, queue) for i, (busy, queue) in enumerate(loads)]


def test_a_layer_grows_by_one_once_hot_for_the_whole_window() -> None:
    assert decide(_samples(*[HOT] * 3), shards=2, floor=2, policy=POLICY).shards == 2  # 2 s of a 3 s window
    decision = decide(_samples(*[HOT] * 4), shards=2, floor=2, policy=POLICY)
    assert decision.shards == 3 and decision.reason.startswith("hot for 3 s")


def test_a_long_queue_alone_makes_a_layer_hot() -> None:
    assert decide(_samples(*[(0.1, 9.0)] * 4), shards=2, floor=2, policy=POLICY).shards == 3


def test_one_warm_sample_in_the_window_holds_the_count() -> None:
    assert decide(_samples(HOT, HOT, WARM, HOT, HOT), shards=2, floor=2, policy=POLICY).shards == 2
    # ... and an older one, before the window, does not.
    assert decide(_samples(WARM, HOT, HOT, HOT, HOT), shards=2, floor=2, policy=POLICY).shards == 3


def test_it_shrinks_only_after_the_longer_window_of_cold() -> None:
    assert decide(_samples(*[COLD] * 10, shards=4), shards=4, floor=2, policy=POLICY).shards == 4  # 9 s
    decision = decide(_samples(*[COLD] * 11, shards=4), shards=4, floor=2, policy=POLICY)
    assert decision.shards == 3 and decision.reason.startswith("cold for 10 s")
    # Between the marks (busy above shrink_busy, below grow_busy) it neither grows nor shrinks.
    assert decide(_samples(*[WARM] * 30, shards=4), shards=4, floor=2, policy=POLICY).shards == 4


def test_never_below_the_first_count_nor_above_max_shards() -> None:
    assert decide(_samples(*[COLD] * 30), shards=2, floor=2, policy=POLICY).shards == 2
    assert decide(_samples(*[HOT] * 30, shards=4), shards=4, floor=2, policy=POLICY).shards == 4
    # A layer whose first count is above max_shards keeps it: the floor wins.
    assert decide(_samples(*[HOT] * 30, shards=6), shards=6, floor=6, policy=POLICY).shards == 6
    # A count outside the bounds (set by hand) is brought back in, one decision.
    assert decide([], shards=1, floor=2, policy=POLICY).shards == 2
    assert decide([], shards=9, floor=2, policy=POLICY).shards == 4


def test_only_samples_at_the_current_count_count() -> None:
    """After a change the window starts again: hot samples at 2 shards do not grow a layer of 3."""
    before = _samples(*[HOT] * 10, shards=2)
    after = _samples(HOT, HOT, shards=3, start_s=110)
    assert decide(before + after, shards=3, floor=2, policy=POLICY).shards == 3
    assert decide([], shards=3, floor=2, policy=POLICY).reason == "no load read yet"


def test_the_marks_must_leave_a_gap() -> None:
    with pytest.raises(ValueError, match="must be below"):
        AutoscaleSettings(grow_busy=0.5, shrink_busy=0.5)
    with pytest.raises(ValueError, match="must be below"):
        AutoscaleSettings(grow_queue=2, shrink_queue=3)


# -- the counters a shard answers ----------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now_s = 0.0
        self.cpu_s = 0.0

    def tick(self, seconds: float, *, cpu_s: float = 0.0) -> None:
        self.now_s += seconds
        self.cpu_s += cpu_s


@pytest.fixture
def clock() -> Iterator[_Clock]:
    yield _Clock()


def test_the_meter_gives_mean_calls_in_flight_and_cpu_per_second(clock: _Clock) -> None:
    meter = CallMeter(clock=lambda: clock.now_s, cpu=lambda: clock.cpu_s)
    first = meter.reading()
    meter.enter()
    clock.tick(1.0, cpu_s=0.25)
    meter.enter()  # two in flight for a second
    clock.tick(1.0, cpu_s=0.25)
    meter.leave()
    clock.tick(2.0, cpu_s=1.0)
    second = meter.reading()
    rates = second.rates_since(first)
    assert rates is not None
    assert rates.queue == pytest.approx((1 + 2 + 1 * 2) / 4)  # call-seconds per second
    assert rates.busy == pytest.approx(1.5 / 4)
    assert rates.calls_per_s == pytest.approx(2 / 4)
    assert second.in_flight == 1


def test_readings_of_another_process_or_none_give_no_rates(clock: _Clock) -> None:
    reading = CallMeter(clock=lambda: clock.now_s, cpu=lambda: clock.cpu_s).reading()
    clock.tick(1.0)
    restarted = CallMeter(clock=lambda: clock.now_s, cpu=lambda: clock.cpu_s).reading()
    assert restarted.rates_since(reading) is None
    assert restarted.rates_since(None) is None
    assert reading.rates_since(reading) is None  # no time between


class _Shard(ShardLoad):
    def __init__(self) -> None:
        self.seen_in_flight: list[int] = []

    async def call(self, x: int) -> int:
        self.seen_in_flight.append(self.call_meter.in_flight)
        await asyncio.sleep(0)
        return x + 1


class _Layer(_Shard):
    """A layer's shard, inheriting the entry points: a call is not counted twice."""


def test_the_routed_entry_points_count_themselves_once_where_defined() -> None:
    assert METERED_CALLS == ("call", "reads")
    shard = _Layer()

    async def run() -> LoadReading:
        assert list(await asyncio.gather(shard.call(1), shard.call(2))) == [2, 3]
        return await shard.load()

    reading = asyncio.run(run())
    assert shard.seen_in_flight == [1, 2]
    assert reading.calls == 2 and reading.in_flight == 0
    assert _Layer.call is _Shard.call and hasattr(_Shard.call, "__wrapped__")
