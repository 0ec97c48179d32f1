"""The working layer: the short-term memory of each agent session, kept within a
token budget by importance and recency.

:class:`WorkingMemory` (in :mod:`~strata.working.memory`) is one session's logic,
:class:`WorkingSessions` (:mod:`~strata.working.sessions`) all sessions of a tenant,
persisted item by item, and :mod:`~strata.working.importance` the rules that score
an item.
"""

from __future__ import annotations

from strata.working.importance import ImportanceRules, ImportanceSignal
from strata.working.memory import ROLES, CompressionReport, WorkingItem, WorkingMemory
from strata.working.sessions import WorkingSessions

__all__ = [
    "ROLES",
    "CompressionReport",
    "ImportanceRules",
    "ImportanceSignal",
    "WorkingItem",
    "WorkingMemory",
    "WorkingSessions",
]
