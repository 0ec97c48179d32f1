"""The stack's LLM counts in one place: every process's :data:`strata.providers.llm.METER`
sends its changes to ``strata-meter`` (named, detached, one per stack), and ``GET /metrics``
reads them from there.

Pushed, not pulled: the layer shards can be listed, but the API's replicas (which condense
contexts) come and go with the autoscaler, and a count kept only in a replica would vanish
with it. The collector keeps its sums in memory: when it restarts they start again from
zero, which Prometheus reads as a counter reset; a change sent while it is down is lost
(counts are for watching, not billing). A send costs one Ray call per LLM call, against
the LLM call's own hundreds of milliseconds.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import ray

from strata.config import StrataSettings
from strata.providers.llm import METER
from strata.providers.llm_meter import Key, MeterCounts

__all__ = ["METER_NAME", "MeterCollector", "collector", "send_to_collector"]

log = logging.getLogger(__name__)

METER_NAME = "strata-meter"


class MeterCollector:
    """The sums of every process's LLM counts (the actor behind :func:`collector`)."""

    def __init__(self) -> None:
        self._counts = MeterCounts()

    def add(self, deltas: dict[Key, float]) -> None:
        self._counts.merge(deltas)

    def snapshot(self) -> dict[Key, float]:
        return dict(self._counts.values)


def collector(settings: StrataSettings) -> Any:
    """The stack's collector, made on first use (any process may be first)."""
    remote_cls: Any = ray.remote(MeterCollector)
    return remote_cls.options(
        name=METER_NAME,
        namespace=settings.ray.namespace,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        memory=2**20,  # a token, as the layer shards ask (router.py says why)
    ).remote()


_sending = threading.Lock()
_sent_to: list[str] = []  # the namespace this process's counts go to


def send_to_collector(settings: StrataSettings) -> None:
    """Send this process's LLM counts to the stack's collector from now on (a process serves
    one stack; a test process that makes stacks in several namespaces sends to the latest)."""
    namespace = settings.ray.namespace
    with _sending:
        if METER.sink is not None and _sent_to == [namespace]:
            return
        handle: list[Any] = []

        def sink(deltas: dict[Key, float]) -> None:
            try:
                if not handle:
                    handle.append(collector(settings))
                handle[0].add.remote(deltas)
            except Exception as exc:  # counts are best effort
                handle.clear()
                log.debug("an LLM count was not sent: %s", exc)

        METER.sink = sink
        _sent_to[:] = [namespace]
