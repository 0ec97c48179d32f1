"""Building one context from what the layers returned: fitting their items into a
token budget (:mod:`~strata.context.assemble`) and, when they do not fit and an
LLM is configured, condensing them with it (:mod:`~strata.context.refine`).
"""

from __future__ import annotations

from strata.context.assemble import AssembledContext, assemble_context
from strata.context.refine import refine_items

__all__ = [
    "AssembledContext",
    "assemble_context",
    "refine_items",
]
