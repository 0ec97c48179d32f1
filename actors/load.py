"""How busy a shard is: what the autoscaling policy reads (docs/scaling.md, "Autoscaling policy").

:class:`ShardLoad` is a base of :class:`~strata_actors.shard.LayerShard`; its :meth:`load` is a
remote call of every shard.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ShardLoad"]


class ShardLoad:
    """A shard's load, as the directory's autoscaling policy reads it."""

    async def load(self) -> dict[str, Any]:
        """This shard's load now (filled in by the autoscaling policy's work)."""
        return {}
