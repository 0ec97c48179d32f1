"""The autoscaling policy's decision: a pure function of a layer's load samples (no Ray).

The directory (:mod:`strata_actors.directory`) reads every shard's load every
``actors.autoscale.interval_s`` (:mod:`strata_actors.load`), averages it over the layer's
shards into a :class:`LayerSample`, and asks :func:`decide` what to do. A layer is *hot* in a
sample when its shards' mean busy fraction or mean queue reaches the grow marks, *cold* when both
are at or below the (lower) shrink marks, and neither in between. It grows by one shard after
``grow_window_s`` of hot samples, shrinks by one after ``shrink_window_s`` of cold ones: the gap
between the marks, and the longer window to shrink, keep it from flapping. Only samples taken at
the layer's current count are looked at (the directory starts a new history at each change), so
every change is followed by a whole window of evidence at the new count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from strata.config import AutoscaleSettings

__all__ = ["Decision", "LayerSample", "decide", "temperature"]


@dataclass(frozen=True)
class LayerSample:
    """A layer's load at one reading: the mean over its shards of each one's rates since the
    reading before."""

    #: The directory's monotonic clock, seconds.
    at_s: float
    #: The layer's shard count when read.
    shards: int
    busy: float
    queue: float


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` says: the count to go to (the current one: stay), and why."""

    shards: int
    reason: str

    def changes(self, current: int) -> bool:
        return self.shards != current


def temperature(sample: LayerSample, policy: AutoscaleSettings) -> Literal["hot", "cold", "warm"]:
    if sample.busy >= policy.grow_busy or sample.queue >= policy.grow_queue:
        return "hot"
    if sample.busy <= policy.shrink_busy and sample.queue <= policy.shrink_queue:
        return "cold"
    return "warm"


def _held_for(samples: Sequence[LayerSample], state: str, window_s: float, policy: AutoscaleSettings) -> bool:
    """Whether the samples span ``window_s`` and every one of its last ``window_s`` is ``state``."""
    last = samples[-1]
    if last.at_s - samples[0].at_s < window_s:
        return False
    return all(temperature(s, policy) == state for s in samples if s.at_s >= last.at_s - window_s)


def decide(samples: Sequence[LayerSample], *, shards: int, floor: int, policy: AutoscaleSettings) -> Decision:
    """The count a layer of ``shards`` shards should go to, from its samples (oldest first).

    Args:
        samples: the layer's samples; those taken at another count than ``shards`` are ignored.
        shards: the layer's count now.
        floor: the fewest shards the layer may have (the settings' first count).
        policy: the marks, windows and ``max_shards``.
    """
    ceiling = max(floor, policy.max_shards)
    if shards < floor:
        return Decision(floor, f"below the first count {floor}")
    if shards > ceiling:
        return Decision(ceiling, f"above max_shards {ceiling}")
    at_count = [s for s in samples if s.shards == shards]
    if not at_count:
        return Decision(shards, "no load read yet")
    last = at_count[-1]
    said = f"busy {last.busy:.2f}, queue {last.queue:.1f}"
    if shards < ceiling and _held_for(at_count, "hot", policy.grow_window_s, policy):
        return Decision(shards + 1, f"hot for {policy.grow_window_s:g} s ({said})")
    if shards > floor and _held_for(at_count, "cold", policy.shrink_window_s, policy):
        return Decision(shards - 1, f"cold for {policy.shrink_window_s:g} s ({said})")
    return Decision(shards, f"{temperature(last, policy)} ({said})")
