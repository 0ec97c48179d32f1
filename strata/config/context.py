"""Settings of context assembly: the budget, the cut-offs, and which layers each task type reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from strata.config.validation import Section, only_known
from strata.layers import LAYERS as LAYER_NAMES

__all__ = ["ContextSettings", "LayerPolicy"]


class LayerPolicy(Section):
    """How one layer takes part in a task type's context."""

    #: Items to fetch; default ``context.default_top_k`` (or the request's top_k).
    top_k: int | None = Field(default=None, ge=1, le=100)
    #: Share of the budget left after working memory, relative to the other layers'.
    weight: float = Field(default=1.0, ge=0)


class ContextSettings(Section):
    default_max_tokens: int = Field(default=2000, ge=64, le=200_000)
    default_top_k: int = Field(default=16, ge=1, le=100)
    #: Share of the budget working memory may take when other layers have hits.
    working_share: float = Field(default=0.5, gt=0, le=1)
    #: Items scoring below this share of their layer's best hit stay out of the context.
    min_relative_score: float = Field(default=0.3, ge=0, le=1)
    #: Items less relevant than this (0-1, comparable across queries: the hit's
    #: ``relevance``) stay out of the context, however much budget is left.
    min_relevance: float = Field(default=0.3, ge=0, le=1)
    #: A layer that has not answered after this long is left out (the context says so).
    layer_timeout_s: float = Field(default=2.0, gt=0, le=60)
    #: Per-layer deadlines that differ from ``layer_timeout_s``.
    layer_timeouts: dict[str, float] = Field(default_factory=dict)
    #: When the items do not fit and an LLM is configured, condense them with it.
    refine_with_llm: bool = True
    #: Which layers each task type reads besides working memory (always read): a list
    #: of layers, or a mapping ``layer -> {top_k, weight}``.
    policies: dict[str, dict[str, LayerPolicy]] = Field(
        default_factory=lambda: {
            "general": {"episodic": LayerPolicy()},
            "personalized": {"episodic": LayerPolicy()},
            "planning": {"episodic": LayerPolicy(), "semantic": LayerPolicy()},
            "debugging": {"semantic": LayerPolicy(), "procedural": LayerPolicy(top_k=3)},
            "coding": {"semantic": LayerPolicy(), "procedural": LayerPolicy(top_k=3)},
            "deployment": {"semantic": LayerPolicy(), "procedural": LayerPolicy(top_k=3)},
        }
    )

    @field_validator("policies", mode="before")
    @classmethod
    def _lists_to_mappings(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {
            name: {layer: {} for layer in layers} if isinstance(layers, (list, tuple)) else layers
            for name, layers in value.items()
        }

    @field_validator("policies")
    @classmethod
    def _known_layers(cls, value: dict[str, dict[str, LayerPolicy]]) -> dict[str, dict[str, LayerPolicy]]:
        for name, layers in value.items():
            only_known(layers, LAYER_NAMES, f"policy {name!r} names unknown layer(s)")
        return value

    @field_validator("layer_timeouts")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        only_known(value, LAYER_NAMES, "layer_timeouts names unknown layer(s)")
        if any(not 0 < v <= 60 for v in value.values()):
            raise ValueError("layer_timeouts must be in (0, 60] seconds")
        return value

    def timeout_for(self, layer: str) -> float:
        return float(self.layer_timeouts.get(layer, self.layer_timeout_s))
