"""The Serve application graph: api (the ingress, which fans out to the layer actors) → embedding.

``build_app`` is also the import path for ``serve run`` / ``serve deploy``
(``configs/serve.yaml``): ``strata_serve.app:build_app``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve import Application

from strata.config import StrataSettings, load_settings
from strata_serve.api import Api
from strata_serve.deployments import Embedding

__all__ = ["APP_NAME", "build_app"]

APP_NAME = "strata"


def _config_path(path: str | None) -> str | None:
    """A relative config path as given if it exists from here, else from the repository root:
    Serve builds the app in a process whose working directory is where that node's Ray
    started, not where ``serve deploy`` ran."""
    if path is None or Path(path).is_absolute() or Path(path).exists():
        return path
    beside = Path(__file__).resolve().parent.parent / path
    return str(beside) if beside.exists() else path


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Bind the deployments. ``args`` may hold ``config`` (a YAML path) or a full ``settings`` dict."""
    args = args or {}
    if "settings" in args:
        settings = StrataSettings.from_dict(args["settings"])
    else:
        settings = load_settings(_config_path(args.get("config")))
    payload = settings.to_dict()
    # @serve.deployment makes these classes Deployments, which Ray's annotations do not say: hence the ignores.
    embedding = Embedding.bind(payload)  # type: ignore[attr-defined]
    application: Application = Api.bind(payload, embedding)  # type: ignore[attr-defined]
    return application
