"""How busy a shard is: what the autoscaling policy reads (docs/scaling.md, "Autoscaling policy").

:class:`ShardLoad` is a base of :class:`~strata_actors.shard.LayerShard`; its :meth:`~ShardLoad.load`
is a remote call of every shard. It answers counters that only grow (a :class:`LoadReading`), so
that it costs nothing between readings (no sampling task, no window kept here) and any number of
readers (the directory's policy, ``strata status``) can difference two readings of their own
(:meth:`LoadReading.rates_since`):

- **busy**: the process's CPU seconds (``time.process_time()``: every thread of the actor, its
  store calls and embedding included) per wall second, in whole CPUs;
- **queue**: calls in flight. The routed entry points every router's call goes through
  (``call`` and ``reads``, see :data:`METERED_CALLS`) count themselves in and out, and the
  reading carries the time integral of that count, so a reader gets the mean queue length
  over its interval (Little's law), not only the length at the instant it asked.

The entry points are wrapped where a class defines them (:meth:`ShardLoad.__init_subclass__`), so
the shard's own module needs no change for any of this.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["METERED_CALLS", "CallMeter", "LoadRates", "LoadReading", "ShardLoad"]

#: The remote methods counted as calls in flight: every call a router's handle sends a shard.
METERED_CALLS = ("call", "reads")


@dataclass(frozen=True)
class LoadRates:
    """One shard's load between two readings."""

    #: CPU seconds of the shard's process per wall second (1.0: one CPU all the time).
    busy: float
    #: Mean number of routed calls in flight.
    queue: float
    #: Routed calls begun per second.
    calls_per_s: float


@dataclass(frozen=True)
class LoadReading:
    """A shard's counters at one instant, as :meth:`ShardLoad.load` answers them."""

    #: Changes when the actor's process does (a restart): counters of two processes do not subtract.
    process: str
    #: The shard's monotonic clock, seconds.
    at_s: float
    #: The process's CPU time so far, seconds.
    cpu_s: float
    #: The integral of calls in flight over time so far, call-seconds.
    call_s: float
    #: Routed calls begun so far.
    calls: int
    #: Routed calls in flight now.
    in_flight: int

    def rates_since(self, before: LoadReading | None) -> LoadRates | None:
        """The load between ``before`` and this reading; None without a usable earlier reading
        (none, another process's, or not earlier)."""
        if before is None or before.process != self.process or self.at_s <= before.at_s:
            return None
        wall_s = self.at_s - before.at_s
        return LoadRates(
            busy=max(0.0, self.cpu_s - before.cpu_s) / wall_s,
            queue=max(0.0, self.call_s - before.call_s) / wall_s,
            calls_per_s=max(0, self.calls - before.calls) / wall_s,
        )


class CallMeter:
    """Counts calls in and out, and integrates the count over time (plain: tested without Ray).

    Args:
        clock: monotonic seconds.
        cpu: the process's CPU seconds.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.process_time) -> None:
        self._clock, self._cpu = clock, cpu
        self.process = uuid.uuid4().hex
        self.in_flight = 0
        self.calls = 0
        self._call_s = 0.0
        self._since = clock()

    def _advance(self) -> float:
        now = self._clock()
        self._call_s += self.in_flight * (now - self._since)
        self._since = now
        return now

    def enter(self) -> None:
        self._advance()
        self.in_flight += 1
        self.calls += 1

    def leave(self) -> None:
        self._advance()
        self.in_flight -= 1

    def reading(self) -> LoadReading:
        now = self._advance()
        return LoadReading(self.process, now, self._cpu(), self._call_s, self.calls, self.in_flight)


def _metered(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def counted(self: ShardLoad, *args: Any, **kwargs: Any) -> Any:
        meter = self.call_meter
        meter.enter()
        try:
            return await method(self, *args, **kwargs)
        finally:
            meter.leave()

    return counted


class ShardLoad:
    """A shard's load, as the directory's autoscaling policy reads it."""

    _call_meter: CallMeter | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Only where the class itself defines one: a subclass that inherits it (each layer's, the
        # class ray.remote derives) must not count a call twice.
        for name in METERED_CALLS:
            method = cls.__dict__.get(name)
            if method is not None and not hasattr(method, "__wrapped__"):
                setattr(cls, name, _metered(method))

    @property
    def call_meter(self) -> CallMeter:
        if self._call_meter is None:  # on the first call: the shard's __init__ is not this class's
            self._call_meter = CallMeter()
        return self._call_meter

    async def load(self) -> LoadReading:
        """This shard's counters now (:class:`LoadReading`; two readings give the rates)."""
        return self.call_meter.reading()
