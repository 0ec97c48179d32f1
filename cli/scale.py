"""``strata scale LAYER N`` and the shards ``strata status`` lists: thin, over the placement
directory (:mod:`strata_actors.directory`) of the stack running in the data dir."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strata.store.placement import Placement
    from strata_actors.directory import AutoscaleStatus, ShardStatus
    from strata_cli.stack import Stack

__all__ = ["layer_lines", "scale_layer"]


def scale_layer(stack: Stack, layer: str, shards: int) -> Placement:
    """Change ``layer`` of the running ``stack`` to ``shards`` shards; its row once published.

    Raises:
        strata.errors.InvalidInput: an unknown layer, or a count out of range.
    """
    from strata_actors.directory import Directory, check_scale

    check_scale(layer, shards)  # before joining the cluster: a typo costs no connection
    stack.ensure_ray_client()
    return asyncio.run(Directory(stack.settings).scale(layer, shards))


def layer_lines(stack: Stack) -> dict[str, str]:
    """Each layer's shards on the running ``stack``: node, resident tenants (``strata status``),
    and with ``actors.autoscale`` on, the policy's last word on the layer."""
    from strata_actors.directory import Directory

    stack.ensure_ray_client()
    directory = Directory(stack.settings)

    async def read() -> tuple[list[ShardStatus], AutoscaleStatus]:
        return await directory.status(), await directory.autoscale_status()

    found, policy = asyncio.run(read())
    lines: dict[str, list[str]] = {}
    for s in found:
        where = f"node {s.node_id[:12]}" if s.node_id else "not answering"
        tenants = "" if s.tenants_loaded is None else f", {s.tenants_loaded} tenants"
        lines.setdefault(s.layer, []).append(f"#{s.shard} {where}{tenants}")
    said = {layer: f"; autoscale: {d.reason}" for layer, d in policy.decisions.items()} if policy.enabled else {}
    return {layer: f"{len(shards)} shards: " + "; ".join(shards) + said.get(layer, "")
            for layer, shards in lines.items()}
