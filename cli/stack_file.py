"""``stack.json``: what ``up`` records in the data dir, and the settings read back from it.

It holds the ports the stack chose, Ray's address and auth, and the settings it runs with,
secrets included (``auth.admin_key``, ``pii.hash_key``, the Milvus token): owner-only.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from strata.config import StrataSettings
from strata_cli.private_files import write_private

__all__ = ["STACK_FILE", "known_settings", "read_stack_file", "write_stack_file"]

STACK_FILE = "stack.json"


def read_stack_file(data_dir: Path) -> dict[str, Any] | None:
    """What ``up`` recorded in the data dir, or None when there is nothing readable."""
    try:
        recorded = json.loads((data_dir / STACK_FILE).read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def write_stack_file(data_dir: Path, recorded: dict[str, Any]) -> None:
    """``recorded`` as the data dir's ``stack.json``, owner-only."""
    write_private(data_dir / STACK_FILE, json.dumps(recorded, indent=2))


def known_settings(data: dict[str, Any]) -> StrataSettings:
    """``data`` as settings, with the keys no setting of this version names left out (any
    other invalid value still raises)."""
    from pydantic import ValidationError

    try:
        return StrataSettings.from_dict(data)
    except ValidationError as exc:
        errors = exc.errors()
        if not errors or any(e["type"] != "extra_forbidden" for e in errors):
            raise
        kept = copy.deepcopy(data)
        for error in errors:
            *path, name = error["loc"]
            parent: Any = kept
            for part in path:
                parent = parent[part]
            parent.pop(name, None)
        return StrataSettings.from_dict(kept)
