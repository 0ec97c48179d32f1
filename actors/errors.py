"""Mapping Ray's failures to Strata's error hierarchy, at the actor boundary."""

from __future__ import annotations

from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from strata.errors import StoreUnavailable, StrataError

__all__ = ["unwrap"]


def unwrap(exc: BaseException) -> BaseException:
    """The Strata error behind a Ray failure, or a 503 for a lost or slow actor.

    Ray wraps an actor's exception in ``RayTaskError`` (once per hop); the
    original is its ``cause``.
    """
    seen = 0
    while isinstance(exc, RayTaskError) and exc.cause is not None and seen < 10:
        exc = exc.cause
        seen += 1
    if isinstance(exc, StrataError):
        return exc
    if isinstance(exc, RayActorError):
        return StoreUnavailable("a memory layer actor is restarting; retry shortly", retry_after_s=2)
    if isinstance(exc, (GetTimeoutError, TimeoutError)):
        return StoreUnavailable("a memory layer did not answer in time; retry shortly", retry_after_s=2)
    return exc
