"""Idempotent writes: the first answer to a write sent with an ``Idempotency-Key``.

A client that retries a write after a timeout or a dropped connection cannot
know whether the first try was applied. With the same ``Idempotency-Key`` the
retry gets the first answer back instead of applying the write again. The
answer (status, a few headers, the body) is kept per tenant in the state
collection, split into rows of at most :data:`_CHUNK_CHARS` characters
(Milvus caps a text field at 65,535 bytes), for ``ttl_s``; the TTL sweep
purges it afterwards. The request is fingerprinted (method, path, query,
body): the same key with another request is refused, not replayed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from strata.clock import now_ms
from strata.ids import validate_id
from strata.store.records import Record, RecordStore
from strata.store.ttl import EXPIRES

__all__ = ["IDEM_KIND", "IDEM_SESSION", "Answer", "IdempotencyStore", "fingerprint"]

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
        head = self._store.get(self._collection, tenant=validate_id(tenant, field="tenant"), pks=[self._pk(tenant, key, 0)])
        if not head or int(head[0].payload.get(EXPIRES, 0)) <= now_ms():
            return None
        p = head[0].payload
        chunks = int(p["chunks"])
        rest = self._store.get(self._collection, tenant=tenant, pks=[self._pk(tenant, key, n) for n in range(1, chunks)])
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
