"""What the LLM did, per feature: calls, tokens, latency, and how its replies ended.

Every process that calls the LLM (the orchestrator's replicas, the layer shards) keeps
one :class:`LLMMeter`. Its counts only grow, so a collector can add the counts of all
processes (:meth:`MeterCounts.merge`) and render them for Prometheus
(:func:`prometheus_text`); a process that restarts starts again from zero, which
Prometheus reads as a counter reset. :attr:`LLMMeter.sink`, when set, receives each
change as it happens (the actor layer sends it to the stack's collector).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "FEATURES",
    "LATENCY_BUCKETS_S",
    "LLMMeter",
    "MeterCounts",
    "prometheus_text",
]

#: The LLM's features; a call names one so that its counts and its breaker are its own.
FEATURES = ("refine", "summary", "skills", "entities", "other")

#: Upper bounds of the latency histogram, in seconds (a small local model takes 1-60 s).
LATENCY_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

#: A counter's labels: (metric, feature, label) — label is a reason, a direction or a bucket.
Key = tuple[str, str, str]


@dataclass
class MeterCounts:
    """Monotonic counters keyed ``(metric, feature, label)``.

    Metrics: ``calls`` (label ``ok`` or the failure: ``timeout``, ``error``, ``rejected``),
    ``tokens`` (``in``/``out``), ``latency_sum`` and ``latency_count`` (label ``""``),
    ``latency_bucket`` (label: the bucket's bound, or ``+Inf``), ``results`` (``accepted``
    or the fallback's reason: ``invalid``, ``timeout``, ``error``, ``busy``, ``breaker``,
    ``no_time``).
    """

    values: dict[Key, float] = field(default_factory=dict)

    def add(self, key: Key, amount: float = 1.0) -> None:
        self.values[key] = self.values.get(key, 0.0) + amount

    def merge(self, other: MeterCounts | dict[Key, float]) -> None:
        for key, amount in (other.values if isinstance(other, MeterCounts) else other).items():
            self.add(key, amount)

    def get(self, metric: str, feature: str, label: str = "") -> float:
        return self.values.get((metric, feature, label), 0.0)

    def total(self, metric: str, feature: str) -> float:
        return sum(v for (m, f, _), v in self.values.items() if m == metric and f == feature)


class LLMMeter:
    """One process's counts; thread-safe (LLM calls run in worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = MeterCounts()
        #: Called with each change (a dict of deltas), outside the lock; errors are ignored.
        self.sink: Callable[[dict[Key, float]], None] | None = None

    def _record(self, deltas: dict[Key, float]) -> None:
        with self._lock:
            self._counts.merge(deltas)
        sink = self.sink
        if sink is not None:
            with contextlib.suppress(Exception):  # counts are best effort; the LLM's answer is not
                sink(deltas)

    def call(self, feature: str, *, seconds: float, outcome: str, tokens_in: int = 0, tokens_out: int = 0) -> None:
        """One request to the endpoint: how it ended (``ok``, ``timeout``, ``error``, ``rejected``)."""
        deltas: dict[Key, float] = {
            ("calls", feature, outcome): 1,
            ("latency_sum", feature, ""): seconds,
            ("latency_count", feature, ""): 1,
        }
        for bound in LATENCY_BUCKETS_S:
            if seconds <= bound:
                deltas[("latency_bucket", feature, f"{bound:g}")] = 1
        deltas[("latency_bucket", feature, "+Inf")] = 1
        if tokens_in:
            deltas[("tokens", feature, "in")] = tokens_in
        if tokens_out:
            deltas[("tokens", feature, "out")] = tokens_out
        self._record(deltas)

    def result(self, feature: str, outcome: str) -> None:
        """How a feature's use of the LLM ended: ``accepted``, or why it fell back."""
        self._record({("results", feature, outcome): 1})

    def snapshot(self) -> MeterCounts:
        with self._lock:
            return MeterCounts(dict(self._counts.values))


_HELP = {
    "calls": ("strata_llm_calls_total", "counter", "Requests to the LLM endpoint, by how they ended.", "outcome"),
    "tokens": ("strata_llm_tokens_total", "counter", "LLM tokens, as the endpoint counted them.", "direction"),
    "results": (
        "strata_llm_results_total", "counter",
        "Uses of the LLM by a feature: accepted, or the fallback taken and why.", "result",
    ),
}


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(counts: MeterCounts, *, features: Iterable[str] = FEATURES) -> str:
    """The counts in Prometheus' text format (version 0.0.4)."""
    lines: list[str] = []
    known = list(features)
    seen = known + sorted({f for (_, f, _) in counts.values} - set(known))
    for metric, (name, kind, help_text, label) in _HELP.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for (m, feature, value), amount in sorted(counts.values.items()):
            if m == metric:
                lines.append(
                    f'{name}{{feature="{_label_value(feature)}",{label}="{_label_value(value)}"}} {amount:g}'
                )
    name = "strata_llm_latency_seconds"
    lines += [f"# HELP {name} Time of one request to the LLM endpoint.", f"# TYPE {name} histogram"]
    for feature in seen:
        count = counts.get("latency_count", feature)
        if not count:
            continue
        for bound in (*(f"{b:g}" for b in LATENCY_BUCKETS_S), "+Inf"):
            amount = counts.get("latency_bucket", feature, bound)
            lines.append(f'{name}_bucket{{feature="{feature}",le="{bound}"}} {amount:g}')
        lines.append(f'{name}_sum{{feature="{feature}"}} {counts.get("latency_sum", feature):.6g}')
        lines.append(f'{name}_count{{feature="{feature}"}} {count:g}')
    return "\n".join(lines) + "\n"
