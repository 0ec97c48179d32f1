"""``strata status``: what of a stack runs, one line per part."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata_cli.ports import port_open

if TYPE_CHECKING:
    from strata_cli.stack import Stack

__all__ = ["stack_status"]


def stack_status(stack: Stack) -> dict[str, str]:
    """Part (``milvus``, ``ray``, ``serve``, ``data_dir``) → its state, as ``strata status`` prints it."""
    m = stack.settings.milvus
    pid = stack.milvus_pid()
    return {
        "milvus": f"running (pid {pid}) on {m.host}:{m.port}" if pid and port_open(m.host, m.port)
        else ("external " + m.address if m.uri else "not running"),
        "ray": f"running at {stack.ray_address}" if stack.ray_running() else "not running",
        "serve": f"healthy at {stack.url}" if stack.healthy() else "not answering",
        "data_dir": str(stack.data_dir),
    }
