"""Joining the embedded stack's token-authenticated Ray cluster."""

from __future__ import annotations

import os

__all__ = ["use_ray_auth"]


def use_ray_auth(env: dict[str, str]) -> None:
    """Put this process in the stack's Ray auth mode before ``ray.init``.

    Ray reads ``RAY_AUTH_MODE`` into its config when it is first imported, so a
    process that imported Ray already must have the config re-read.
    """
    if not env:
        return
    os.environ.update(env)
    from ray._raylet import Config  # type: ignore[attr-defined]  # Ray's compiled module ships no stub for it

    Config.initialize("")
