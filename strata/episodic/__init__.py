"""The episodic layer: every turn of every session of a tenant, rolling summaries of
the turns that leave the raw window, and search over both.

:class:`EpisodicMemory` (in :mod:`~strata.episodic.memory`) owns the durable rows
and the in-memory indexes; the values it keeps and their rows are in
:mod:`~strata.episodic.turns`, its search in :mod:`~strata.episodic.search`, how a
search ranks in :mod:`~strata.episodic.ranking`, and the summarisers in
:mod:`~strata.episodic.summarize`.
"""

from __future__ import annotations

from strata.episodic.memory import EpisodicMemory
from strata.episodic.summarize import EpisodeSummary, ExtractiveSummarizer, LLMSummarizer, Summarizer, SummaryInput
from strata.episodic.turns import (
    SUMMARY,
    TURN,
    EpisodicHit,
    SessionSpan,
    SummaryRecord,
    Turn,
    TurnInput,
    summary_inputs,
)

__all__ = [
    "SUMMARY",
    "TURN",
    "EpisodeSummary",
    "EpisodicHit",
    "EpisodicMemory",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "SessionSpan",
    "Summarizer",
    "SummaryInput",
    "SummaryRecord",
    "Turn",
    "TurnInput",
    "summary_inputs",
]
