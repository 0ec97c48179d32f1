"""Strata's one error hierarchy.

Every error a caller can meet derives from :class:`StrataError`; backend
errors (pymilvus, openai, Ray) are mapped to these at the boundary where
they happen, and the HTTP layer maps each class to one status code in one
place (``serve_app/errors.py``)::

    StrataError
    ├── InvalidInput          422  a field or id the caller must fix
    ├── Unauthorized          401  missing, unknown or revoked API key
    ├── Forbidden             403  the key's scope does not allow the call (strata.access.scopes)
    ├── NotFound              404  no such session, item or record
    ├── VersionConflict       409  expected version is stale; carries the current one
    ├── PreconditionRequired  428  the change needs If-Match (the version it was made against)
    ├── RateLimited           429  the key sent more than its rate; carries retry_after_s
    ├── StoreUnavailable      503  Milvus (or another store) cannot be reached
    │   ├── TenantMoved            a layer shard no longer owns the tenant (a scale moved it): retried
    │   └── ForgetInProgress       the tenant or session is being forgotten: writes wait for the forget's end
    ├── VectorModelMismatch   503  stored vectors were made by another embedder: run `strata reindex`
    ├── EmbedderError         502  the configured embedding endpoint failed or answered garbage
    └── LLMError              502  the configured LLM failed or answered garbage
        └── LLMOutputInvalid       its answer did not parse or validate

Each class pickles with its fields intact, so an error raised inside a Ray
actor reaches the HTTP layer as the same type (Ray re-raises the original
exception class when it can be unpickled).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EmbedderError",
    "ForgetInProgress",
    "InvalidInput",
    "LLMBreakerOpen",
    "LLMBusy",
    "LLMError",
    "LLMOutputInvalid",
    "LLMTimedOut",
    "NotFound",
    "PreconditionRequired",
    "RateLimited",
    "StoreUnavailable",
    "StrataError",
    "TenantMoved",
    "Unauthorized",
    "VectorModelMismatch",
    "VersionConflict",
]


class StrataError(Exception):
    """Base of every Strata error. ``message`` is safe to show to the caller."""

    status_code = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def to_dict(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "message": self.message, **self.details}


def _rebuild(cls: type[StrataError], message: str, details: dict[str, Any]) -> StrataError:
    return cls(message, **details)


class InvalidInput(StrataError):
    status_code = 422


class Unauthorized(StrataError):
    status_code = 401


class NotFound(StrataError):
    status_code = 404


class VersionConflict(StrataError):
    """A mutation's expected version does not match; ``current_version`` says what is."""

    status_code = 409

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.current_version: int = int(details.get("current_version", 0))


class PreconditionRequired(StrataError):
    status_code = 428


class RateLimited(StrataError):
    status_code = 429
    #: Raised for an address's failed authentications (wrong keys), not a key's own rate: the
    #: ingress tells the HAProxy in front of it, which turns a flood away before Python.
    failed_auth: bool = False


class StoreUnavailable(StrataError):
    status_code = 503


class TenantMoved(StoreUnavailable):
    """A layer shard refused a call for a tenant it does not own under its placement epoch
    (``epoch``): the tenant moved, or the caller's view of the layer is stale. The router's
    handles catch it and send the call to the new owner; it reaches an HTTP caller (503) only
    when the move does not settle in time."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.epoch: int = int(details.get("epoch", 0))


class ForgetInProgress(StoreUnavailable):
    """A write refused because its tenant (``tenant``), or its session (``session_id``), is being
    forgotten: every layer refuses writes under the forget's tombstone until all of them have
    forgotten it (docs/scaling.md). Retried after ``retry_after_s``, it goes to the emptied tenant."""


class VectorModelMismatch(StrataError):
    """The store's vectors were made by another embedder than the configured one."""

    status_code = 503


class EmbedderError(StrataError):
    """An embedding endpoint (``embedding.provider: openai``) did not answer, refused the texts
    (its status and its own message are in ``message``) or answered vectors of another size."""

    status_code = 502


class LLMError(StrataError):
    status_code = 502


class LLMOutputInvalid(LLMError):
    pass


class LLMTimedOut(LLMError):
    """An LLM call had no answer in its time (or no time was left to start it)."""


class LLMBusy(LLMError):
    """Every slot of ``llm.max_concurrency`` stayed taken for the time an LLM call had."""


class LLMBreakerOpen(LLMError):
    """The feature's LLM breaker is open after failures in a row: it falls back without calling."""
