"""Strata's settings: one validated tree, built once at the process edge.

Sources, highest first: keyword arguments to :func:`load_settings`, the
environment (``STRATA_`` prefix, ``__`` between levels, e.g.
``STRATA_EPISODIC__RAW_WINDOW=30``), a YAML file (``--config`` or
``STRATA_CONFIG``), then the defaults (``configs/default.yaml`` shows
them). Nothing reads the environment at import time: actors and Serve
replicas receive the built settings as a plain dict and rebuild them with
:meth:`StrataSettings.from_dict`, which reads no other source.

One section class per top-level key of ``configs/default.yaml``, grouped by what they configure:
``providers`` (embedder, LLM), ``stack`` (Milvus, Ray, Serve, actors), ``layers`` (the four memory
layers), ``context``, ``privacy`` (PII, TTL), ``access`` (keys, audit); ``settings`` holds the tree
and the loading of its sources; ``validation`` what the sections share. Import from here.
"""

from __future__ import annotations

from strata.config.access import AuditSettings, AuthSettings
from strata.config.context import ContextSettings, LayerPolicy
from strata.config.layers import (
    ChunkingSettings,
    ChunkingStrategy,
    EpisodicSettings,
    ProceduralSettings,
    SemanticSettings,
    SemanticTenantSettings,
    WorkingSettings,
)
from strata.config.privacy import PII_TYPES, PIIAction, PIISettings, TTLLayers, TTLSettings
from strata.config.providers import CJK_SPANS, COSINE_SPANS, EmbeddingSettings, LLMMaxTokens, LLMSettings
from strata.config.settings import StrataSettings, load_settings
from strata.config.stack import ActorSettings, AutoscaleSettings, MilvusSettings, RaySettings, ServeSettings

__all__ = [
    "CJK_SPANS",
    "COSINE_SPANS",
    "PII_TYPES",
    "ActorSettings",
    "AuditSettings",
    "AuthSettings",
    "AutoscaleSettings",
    "ChunkingSettings",
    "ChunkingStrategy",
    "ContextSettings",
    "EmbeddingSettings",
    "EpisodicSettings",
    "LLMMaxTokens",
    "LLMSettings",
    "LayerPolicy",
    "MilvusSettings",
    "PIIAction",
    "PIISettings",
    "ProceduralSettings",
    "RaySettings",
    "SemanticSettings",
    "SemanticTenantSettings",
    "ServeSettings",
    "StrataSettings",
    "TTLLayers",
    "TTLSettings",
    "WorkingSettings",
    "load_settings",
]
