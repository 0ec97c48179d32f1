"""The whole tree, :class:`StrataSettings`, and :func:`load_settings`, which layers its sources."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from strata.config.access import AuditSettings, AuthSettings
from strata.config.context import ContextSettings
from strata.config.layers import EpisodicSettings, ProceduralSettings, SemanticSettings, WorkingSettings
from strata.config.privacy import PIISettings, TTLSettings
from strata.config.providers import EmbeddingSettings, LLMSettings
from strata.config.stack import ActorSettings, MilvusSettings, RaySettings, ServeSettings

__all__ = ["StrataSettings", "load_settings"]


class StrataSettings(BaseSettings):
    """The whole configuration tree."""

    model_config = SettingsConfigDict(
        env_prefix="STRATA_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    data_dir: Path = Path(".strata")
    embedding: EmbeddingSettings = EmbeddingSettings()
    llm: LLMSettings = LLMSettings()
    milvus: MilvusSettings = MilvusSettings()
    ray: RaySettings = RaySettings()
    serve: ServeSettings = ServeSettings()
    actors: ActorSettings = ActorSettings()
    working: WorkingSettings = WorkingSettings()
    episodic: EpisodicSettings = EpisodicSettings()
    semantic: SemanticSettings = SemanticSettings()
    procedural: ProceduralSettings = ProceduralSettings()
    context: ContextSettings = ContextSettings()
    pii: PIISettings = PIISettings()
    auth: AuthSettings = AuthSettings()
    audit: AuditSettings = AuditSettings()
    ttl: TTLSettings = TTLSettings()

    @model_validator(mode="after")
    def _check(self) -> StrataSettings:
        if self.embedding.provider == "openai" and not self.embedding.base_url:
            raise ValueError("embedding.base_url is required for the openai provider")
        # What the layers must know of the embedder: what its cosines mean, and whether
        # its dense path can be trusted on CJK text.
        object.__setattr__(self, "episodic", self.episodic.for_embedder(self.embedding))
        object.__setattr__(self, "semantic", self.semantic.for_embedder(self.embedding))
        span = self.embedding.relevance_span
        object.__setattr__(self, "procedural", self.procedural.model_copy(update={"cosine_span": span}))
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StrataSettings:
        """Rebuild settings shipped to an actor; reads no environment or file."""
        return cls(**data)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The base class reads only its arguments; load_settings() adds the
        # environment and the YAML file at the process edge.
        return (init_settings,)


def load_settings(
    config_path: str | os.PathLike[str] | None = None, **overrides: Any
) -> StrataSettings:
    """Build settings from overrides > environment > YAML file > defaults.

    Args:
        config_path: a YAML file; defaults to ``$STRATA_CONFIG`` when set.
        overrides: top-level fields, e.g. ``data_dir=...`` or ``serve={"port": 8100}``.

    Raises:
        pydantic.ValidationError: a value is out of range or a key is unknown.
        FileNotFoundError: the config file does not exist.
    """
    path = config_path or os.environ.get("STRATA_CONFIG")
    if path is not None and not Path(path).is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    yaml_file = Path(path) if path else None

    class _FromSources(StrataSettings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            if yaml_file is None:
                return (init_settings, env_settings)
            return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls, yaml_file))

    return StrataSettings.model_construct(**dict(_FromSources(**overrides)))
