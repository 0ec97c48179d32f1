"""Where the repository's folders are and the names they install under, read from the one place
that states them: ``[tool.setuptools.package-dir]`` in pyproject.toml (``strata/`` installs as itself)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict[str, Any]:
    """pyproject.toml, parsed."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def package_dir() -> dict[str, str]:
    """Installed name → folder, for the folders that install under another name."""
    mapped: dict[str, str] = pyproject()["tool"]["setuptools"]["package-dir"]
    return mapped


def installed_folders() -> dict[str, Path]:
    """Every top-level package's installed name → its folder, ``strata`` included."""
    return {"strata": ROOT / "strata", **{name: ROOT / folder for name, folder in package_dir().items()}}
