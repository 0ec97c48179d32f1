"""The stack a benchmark over HTTP measures, and the options that choose it.

``--url`` / ``--api-key`` name a running Strata; else ``--data-dir`` names the stack
``strata up`` runs there; else a scratch stack is started on free ports in a temporary
directory and stopped afterwards. The ``strata`` command finds that stack and hands the
finder to ``strata bench`` and its ``contention`` and ``fanout`` sub-benchmarks as a
:data:`FindTarget`: starting and stopping a stack is the command's job, so this package
never imports it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from strata.retry import Retry

if TYPE_CHECKING:
    from strata.config import StrataSettings

__all__ = ["RAW", "FindTarget", "MeasuredStack", "Target", "add_arguments"]

#: How a benchmark's clients call: each call once and no Idempotency-Key, so the figures are
#: the service's (a 429 counted, not retried away; a write not paying for its key's record).
RAW: dict[str, Any] = {"retry": Retry(max_attempts=1), "idempotency_keys": False}


class MeasuredStack(Protocol):
    """What a benchmark uses of a stack it can see into (the ``strata`` command's ``Stack``)."""

    @property
    def settings(self) -> StrataSettings: ...

    @property
    def url(self) -> str: ...

    def processes(self) -> list[int]:
        """The pids of the stack's processes (Ray's and milvus-lite's), to measure their memory and CPU."""
        ...

    def ensure_ray_client(self) -> None:
        """Connect this process to the stack's Ray."""
        ...


class Target(NamedTuple):
    """The stack a benchmark measures: its URL, a key for tenant ``demo`` (or the one given),
    and the stack when its settings are known (None for ``--url``)."""

    url: str
    key: str
    stack: MeasuredStack | None
    #: True when the benchmark started it on free ports and stops it afterwards.
    scratch: bool


#: What finds a benchmark's stack from its options (:func:`add_arguments`), and stops it afterwards if it started it.
FindTarget = Callable[[argparse.Namespace], AbstractContextManager[Target]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--api-key``, ``--data-dir`` (what a :data:`FindTarget` reads) and ``--json``."""
    parser.add_argument("--url", help="a running Strata (default: the stack in --data-dir, else a scratch one)")
    parser.add_argument("--api-key", help="its API key")
    parser.add_argument("--data-dir", help="the data dir of a stack `strata up` started")
    parser.add_argument("--json", help="write the results here")
