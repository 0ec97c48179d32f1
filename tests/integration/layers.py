"""Helpers the integration modules share: waiting for a layer actor, restarting them all."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from strata_actors.router import LayerRouter


async def until_up(handle: Any, timeout_s: float = 60) -> None:
    """Until the actor answers a ping (it restarts in a few seconds after a kill)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await handle.ping.remote()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def restart_layer_actors(settings: Any) -> list[Any]:
    """Kill every layer actor (Ray restarts each) and wait until all answer; returns their handles."""
    handles = LayerRouter(settings).every_handle()
    for handle in handles:
        ray.kill(handle, no_restart=False)
    for handle in handles:
        await until_up(handle)
    return handles
