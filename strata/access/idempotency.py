"""Idempotent writes: the first answer to a write sent with an ``Idempotency-Key``.

A client that retries a write after a timeout or a dropped connection cannot
know whether the first try was applied. With the same ``Idempotency-Key`` the
retry gets the first answer back instead of applying the write again. The
answer (status, a few headers, the body) is kept per tenant in the state
collection, split into rows of at most :data:`_CHUNK_CHARS` characters
(Milvus caps a text field at 65,535 bytes), for ``ttl_s``; the TTL sweep
purges it afterwards. The request is fingerprinted (method, path, query,
body): the same key with another request is refused, not replayed.

Kept answers are the record; :class:`Claims` only says which writes are in flight, so that
two API replicas that receive one key at once do not both apply it (Milvus has no
insert-if-absent): a write claims its key (in one actor per tenant range,
``strata_actors.limits``), reads the store for a kept answer, and only then applies. A
claim lost with its actor is no record: the next claim is granted and the store, read
after it, still answers any write whose answer was kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Protocol

from strata.clock import now_ms
from strata.ids import validate_id
from strata.store.records import Record, RecordStore
from strata.store.ttl import EXPIRES

__all__ = ["IDEM_KIND", "IDEM_SESSION", "Answer", "Claim", "ClaimBook", "Claims", "IdempotencyStore", "fingerprint"]

IDEM_KIND = "idem"
IDEM_SESSION = "idempotency"
_CHUNK_CHARS = 15_000  # at most 4 UTF-8 bytes a character: under Milvus' 65,535-byte text field
_MAX_CHUNKS = 200  # 3 M characters: larger answers are not kept (the write is not made idempotent)


def fingerprint(method: str, path: str, query: bytes, body: bytes) -> str:
    h = hashlib.sha256()
    for part in (method.encode(), path.encode(), query, body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


@dataclass(frozen=True)
class Answer:
    """A write's first answer, as kept for its retries."""

    fingerprint: str
    status: int
    headers: dict[str, str]
    body: str


class IdempotencyStore:
    def __init__(self, store: RecordStore, collection: str, *, ttl_s: float) -> None:
        self._store = store
        self._collection = collection
        self._ttl_ms = int(ttl_s * 1000)

    def get(self, tenant: str, key: str) -> Answer | None:
        """The answer kept for ``key``, or None (never sent, expired, or kept in part)."""
        tenant = validate_id(tenant, field="tenant")
        head = self._store.get(self._collection, tenant=tenant, pks=[self._pk(tenant, key, 0)])
        if not head or int(head[0].payload.get(EXPIRES, 0)) <= now_ms():
            return None
        p = head[0].payload
        chunks = int(p["chunks"])
        pks = [self._pk(tenant, key, n) for n in range(1, chunks)]
        rest = self._store.get(self._collection, tenant=tenant, pks=pks)
        if len(rest) != chunks - 1:
            return None  # a crash between the rows: treat as never answered
        texts = [head[0].text, *(r.text for r in sorted(rest, key=lambda r: r.pk))]
        return Answer(str(p["fingerprint"]), int(p["status"]), dict(p.get("headers") or {}), "".join(texts))

    def put(self, tenant: str, key: str, answer: Answer) -> bool:
        """Keep ``answer`` for ``key``; False when it is too large to keep."""
        pieces = [answer.body[i : i + _CHUNK_CHARS] for i in range(0, len(answer.body), _CHUNK_CHARS)] or [""]
        if len(pieces) > _MAX_CHUNKS:
            return False
        at = now_ms()
        meta = {EXPIRES: at + self._ttl_ms}
        rows = [
            Record(
                pk=self._pk(tenant, key, n), tenant=tenant, session=IDEM_SESSION, kind=IDEM_KIND, ts_ms=at, text=text,
                payload=meta if n else {**meta, "fingerprint": answer.fingerprint, "status": answer.status,
                                        "headers": answer.headers, "chunks": len(pieces)},
            )
            for n, text in enumerate(pieces)
        ]
        # The head row last: until it lands, a retry finds nothing and is applied afresh.
        self._store.upsert(self._collection, rows[1:])
        self._store.upsert(self._collection, rows[:1])
        return True

    def forget(self, tenant: str) -> int:
        """Drop every answer kept for ``tenant`` (they may hold forgotten content)."""
        return self._store.delete(self._collection, tenant=validate_id(tenant, field="tenant"), session=IDEM_SESSION,
                                  kinds=[IDEM_KIND])

    @staticmethod
    def _pk(tenant: str, key: str, n: int) -> str:
        return f"{tenant}/{IDEM_KIND}/{hashlib.sha256(key.encode()).hexdigest()[:40]}/{n:03d}"


@dataclass(frozen=True)
class Claim:
    """What a claim on a key was answered."""

    #: The caller holds the key: it reads the store, applies the write if no answer is kept,
    #: and releases the key.
    granted: bool
    #: Not granted: whether the holder is applying the same request (else: another one, a 422).
    same_request: bool = True
    #: Not granted: when the holder's claim runs out at the latest.
    retry_after_s: float = 0.0


class ClaimBook(Protocol):
    """Where writes with an ``Idempotency-Key`` claim it: :class:`Claims` in this process, or
    the API replicas' shared one (``strata_actors.limits.SharedLimits``)."""

    async def claim(self, tenant: str, key: str, *, fingerprint: str, holder: str) -> Claim:
        """Hold ``key`` for ``holder``; while another holds it with the same request, wait a while
        (``serve.idempotency_wait_s``) for it to be let go."""
        ...

    async def release(self, tenant: str, key: str, *, holder: str) -> None:
        """Let ``key`` go, if ``holder`` holds it; its waiters claim it in turn."""
        ...


@dataclass
class _Held:
    holder: str
    fingerprint: str
    until: float
    released: asyncio.Event = field(default_factory=asyncio.Event)


class Claims:
    """Which writes with an Idempotency-Key are in flight: per (tenant, key), who holds it, for
    which request, until when. A holder that never releases (its replica died) holds it for
    ``hold_s``; a waiter is told so after ``wait_s`` rather than waiting that long.

    Args:
        hold_s: how long a claim lasts unreleased: longer than a write takes.
        wait_s: how long a claim on a key held for the same request waits for it.
        clock: monotonic seconds.
    """

    def __init__(self, *, hold_s: float, wait_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._hold_s = hold_s
        self._wait_s = wait_s
        self._clock = clock
        self._held: dict[tuple[str, str], _Held] = {}

    async def claim(self, tenant: str, key: str, *, fingerprint: str, holder: str) -> Claim:
        deadline = self._clock() + self._wait_s
        while True:
            now = self._clock()
            held = self._held.get((tenant, key))
            if held is None or held.until <= now or held.holder == holder:
                if held is not None:
                    held.released.set()  # an expired holder's waiters look again
                if len(self._held) > 100_000:
                    self._forget_expired(now)
                self._held[(tenant, key)] = _Held(holder, fingerprint, now + self._hold_s)
                return Claim(granted=True)
            if held.fingerprint != fingerprint:
                return Claim(granted=False, same_request=False, retry_after_s=round(held.until - now, 3))
            left = min(deadline, held.until) - now
            if left <= 0:
                return Claim(granted=False, retry_after_s=round(held.until - now, 3))
            with suppress(TimeoutError):
                await asyncio.wait_for(held.released.wait(), left)

    async def release(self, tenant: str, key: str, *, holder: str) -> None:
        held = self._held.get((tenant, key))
        if held is not None and held.holder == holder:
            del self._held[(tenant, key)]
            held.released.set()

    def holding(self) -> int:
        """Claims held now (expired ones not yet dropped included)."""
        return len(self._held)

    def _forget_expired(self, now: float) -> None:
        for name, held in list(self._held.items()):
            if held.until <= now:
                del self._held[name]
                held.released.set()
