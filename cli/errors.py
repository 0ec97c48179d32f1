"""The one error of the stack manager: what the user must fix, said in its message."""

from __future__ import annotations

__all__ = ["StackError"]


class StackError(RuntimeError):
    """Something the user must fix to start or stop the stack; the message says what."""
