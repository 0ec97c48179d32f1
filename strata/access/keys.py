"""API keys: each bearer key is bound to one tenant, or is an admin key; only its hash is stored.

A key is ``sk-strata-`` plus 32 random URL-safe characters. Its row lives in the
state collection under :data:`~strata.ids.SYSTEM_TENANT` with primary key
``system/apikey/<sha256 of the key>``, so authenticating is one primary-key
``get`` and the raw key is in no row. ``key_id`` (the first 12 hex characters of
that hash) names a key everywhere else: in listings, in ``revoke`` / ``rotate``
and as "who" in skill histories. Revoking keeps the row, marked revoked, so a
listing still shows it. Each API replica keeps a lookup for at most
``auth.key_cache_ttl_s`` (1 s; :mod:`strata.access.keycache`), so a revoked key is
refused on every replica within that time.

A key's scope (its tenant, read_only, session_id and shared, fixed when it is made)
and what that scope lets it do are in :mod:`strata.access.scopes`.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from strata.access.scopes import SESSION_LAYERS, SHARED_LAYERS
from strata.errors import InvalidInput, NotFound
from strata.ids import ID_FIELD_PATTERN, SYSTEM_TENANT, validate_id
from strata.layers import Layer
from strata.store.layout import Collections
from strata.store.records import Record, RecordStore

__all__ = [
    "KEY_ID_PATTERN",
    "KEY_PREFIX",
    "KEY_TENANT",
    "KeyCreateIn",
    "KeyCreated",
    "KeyInfo",
    "KeyList",
    "KeyStore",
    "hash_key",
    "open_keys",
    "well_formed",
]

#: Keys live in a tenant of their own, out of reach of any tenant's calls.
KEY_TENANT = SYSTEM_TENANT
KEY_PREFIX = "sk-strata-"
KEY_ID_PATTERN = re.compile(r"[0-9a-f]{12}")
_KIND = "apikey"
_MAX_KEY_CHARS = 200
_MAX_NAME_CHARS = 100

def well_formed(key: str) -> bool:
    """Whether ``key`` could be a stored key at all (its prefix and length): others need no lookup."""
    return key.startswith(KEY_PREFIX) and len(key) <= _MAX_KEY_CHARS


def hash_key(key: str) -> str:
    # surrogatepass: a garbage key with lone surrogates hashes instead of raising.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class KeyInfo(BaseModel):
    """What is known of a key, never the key itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str
    #: The tenant the key acts for; :data:`SYSTEM_TENANT` for an admin key.
    tenant: str
    admin: bool = False
    read_only: bool = False
    session_id: str | None = None
    #: Sees documents and skills; None (a row from before the field): the default of its kind.
    shared: bool | None = None
    name: str | None = None
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def sees_shared(self) -> bool:
        """Whether the key sees documents and skills: as created, else on for a tenant-wide key only."""
        return self.shared if self.shared is not None else self.session_id is None

    @property
    def layers(self) -> frozenset[Layer]:
        """The layers the key may read (and write, unless read-only or, for documents and skills, session-bound)."""
        if self.admin:
            return frozenset()
        return SESSION_LAYERS | (SHARED_LAYERS if self.sees_shared else frozenset())

    @property
    def scopes(self) -> str:
        """``admin``, ``all``, or what limits the key, e.g. ``read-only, session s1``."""
        if self.admin:
            return "admin"
        parts = (["read-only"] if self.read_only else []) + ([f"session {self.session_id}"] if self.session_id else [])
        if self.sees_shared != (self.session_id is None):  # not the default of its kind
            parts.append("documents and skills" if self.sees_shared else "no documents or skills")
        return ", ".join(parts) or "all"


class KeyCreated(KeyInfo):
    """A new key: the secret is shown this once."""

    key: str = Field(repr=False)


class KeyCreateIn(BaseModel):
    """``POST /v1/admin/keys``."""

    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(pattern=ID_FIELD_PATTERN)
    read_only: bool = False
    session_id: str | None = Field(default=None, pattern=ID_FIELD_PATTERN, description="Limit the key to this session")
    shared: bool | None = Field(
        default=None,
        description="Let the key see documents and skills (read them; write them too if it is bound to no session "
        "and not read-only). Default: true for a tenant-wide key, false for a session key",
    )
    name: str | None = Field(default=None, max_length=_MAX_NAME_CHARS, description="A label for people")


class KeyList(BaseModel):
    keys: list[KeyInfo]


def _check_name(name: str | None) -> str | None:
    if name is None:
        return None
    name = name.strip()
    if len(name) > _MAX_NAME_CHARS or not name.isprintable():
        raise InvalidInput(f"name must be at most {_MAX_NAME_CHARS} printable characters", field="name")
    return name or None


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class KeyStore:
    """Keys in ``collection`` of ``store`` (the keys collection: :func:`open_keys`).

    Raises (every method):
        strata.errors.StoreUnavailable: the store does not answer.
    """

    def __init__(self, store: RecordStore, collection: str, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._collection = collection
        self._clock = clock

    # -- creating -------------------------------------------------------------

    def create(
        self,
        tenant: str,
        *,
        read_only: bool = False,
        session_id: str | None = None,
        shared: bool | None = None,
        name: str | None = None,
    ) -> str:
        """A new key for ``tenant``; the secret is returned once and stored hashed.

        Args:
            shared: the key sees documents and skills; None: only if it is bound to no session.

        Raises:
            strata.errors.InvalidInput: a bad tenant or session id, or the reserved tenant.
        """
        return self.issue(tenant, read_only=read_only, session_id=session_id, shared=shared, name=name).key

    def issue(
        self,
        tenant: str,
        *,
        read_only: bool = False,
        session_id: str | None = None,
        shared: bool | None = None,
        name: str | None = None,
    ) -> KeyCreated:
        """As :meth:`create`, returning the key with its :class:`KeyInfo`."""
        validate_id(tenant, field="tenant")
        if tenant == SYSTEM_TENANT:
            raise InvalidInput(
                f"tenant {SYSTEM_TENANT!r} is reserved for Strata's own rows; choose another", field="tenant"
            )
        if session_id is not None:
            validate_id(session_id, field="session_id")
        if shared is None:
            shared = session_id is None
        return self._issue(
            tenant, admin=False, read_only=read_only, session_id=session_id, shared=shared, name=_check_name(name)
        )

    def issue_admin(self, *, name: str | None = None) -> KeyCreated:
        """A new admin key, good for ``/v1/admin`` routes only."""
        return self._issue(
            SYSTEM_TENANT, admin=True, read_only=False, session_id=None, shared=None, name=_check_name(name)
        )

    def _issue(
        self,
        tenant: str,
        *,
        admin: bool,
        read_only: bool,
        session_id: str | None,
        shared: bool | None,
        name: str | None,
    ) -> KeyCreated:
        key = KEY_PREFIX + secrets.token_urlsafe(24)
        digest = hash_key(key)
        now_ms = int(self._clock() * 1000)
        created = KeyCreated(
            key=key,
            key_id=digest[:12],
            tenant=tenant,
            admin=admin,
            read_only=read_only,
            session_id=session_id,
            shared=shared,
            name=name,
            created_at=_at(now_ms),
        )
        payload: dict[str, Any] = {
            "tenant": tenant,
            "key_id": created.key_id,
            "admin": admin,
            "read_only": read_only,
            "session_id": session_id,
            "shared": shared,
            "name": name,
            "revoked_ms": None,
        }
        self._store.upsert(
            self._collection,
            [
                Record(
                    pk=_pk(digest), tenant=KEY_TENANT, session=_KIND, kind=_KIND, ts_ms=now_ms, text="", payload=payload
                )
            ],
        )
        return created

    # -- authenticating -------------------------------------------------------

    def lookup(self, key: str) -> KeyInfo | None:
        """The active key's info; None for an unknown or revoked key (one primary-key get)."""
        if not well_formed(key):
            return None
        rows = self._store.get(self._collection, tenant=KEY_TENANT, pks=[_pk(hash_key(key))])
        if not rows:
            return None
        info = _info(rows[0])
        return info if info.active else None

    def tenant_of(self, key: str) -> str | None:
        """The tenant an active tenant key belongs to; None for an unknown, revoked or admin key."""
        info = self.lookup(key)
        return info.tenant if info is not None and not info.admin else None

    # -- managing ---------------------------------------------------------------

    def list(self, tenant: str | None = None) -> builtins.list[KeyInfo]:
        """Every key (of ``tenant``), revoked ones too, oldest first."""
        if tenant is not None:
            validate_id(tenant, field="tenant")
        infos = [_info(row) for row in self._rows()]
        return sorted(
            (i for i in infos if tenant is None or i.tenant == tenant), key=lambda i: (i.created_at, i.key_id)
        )

    def revoke(self, key_id: str) -> KeyInfo:
        """Revoke the key at once; revoking a revoked key changes nothing.

        Raises:
            strata.errors.NotFound: no key has this id.
            strata.errors.InvalidInput: ``key_id`` is not 12 hex characters.
        """
        now_ms = int(self._clock() * 1000)
        revoked: builtins.list[KeyInfo] = []
        for row in self._find(key_id):  # at least one row, or NotFound
            if row.payload.get("revoked_ms") is None:
                row = replace(row, payload={**row.payload, "revoked_ms": now_ms})
                self._store.upsert(self._collection, [row])
            revoked.append(_info(row))
        return revoked[-1]

    def rotate(self, key_id: str) -> KeyCreated:
        """A new key with the old one's tenant, scopes and name; the old one is revoked.

        The new key is stored before the old one is revoked, so a failure in
        between leaves both working rather than neither.

        Raises:
            strata.errors.NotFound: no key has this id.
            strata.errors.InvalidInput: the key is revoked already, or the id is malformed.
        """
        active = [_info(row) for row in self._find(key_id) if row.payload.get("revoked_ms") is None]
        if not active:
            raise InvalidInput(f"key {key_id} is revoked; create a new key instead", field="key_id")
        old = active[0]
        new = self._issue(
            old.tenant,
            admin=old.admin,
            read_only=old.read_only,
            session_id=old.session_id,
            shared=old.shared,
            name=old.name,
        )
        self.revoke(key_id)
        return new

    def _rows(self) -> builtins.list[Record]:
        return _key_rows(self._store, self._collection)

    def adopt(self, collection: str) -> int:
        """Move the key rows ``collection`` holds into this store's collection (where keys
        lived before they had one of their own); returns how many. Copied first, then
        deleted, so a crash between the two leaves both copies and the next call ends it."""
        rows = _key_rows(self._store, collection)
        if rows:
            self._store.upsert(self._collection, rows)
            self._store.delete(collection, tenant=KEY_TENANT, pks=[row.pk for row in rows])
        return len(rows)

    def _find(self, key_id: str) -> builtins.list[Record]:
        # A scan, not an id -> hash row: key management is rare, and one row per
        # key cannot go out of step with an index row.
        if not isinstance(key_id, str) or not KEY_ID_PATTERN.fullmatch(key_id):
            raise InvalidInput(f"key id {str(key_id)[:40]!r} is not 12 lowercase hex characters", field="key_id")
        rows = [row for row in self._rows() if row.payload.get("key_id") == key_id]
        if not rows:
            raise NotFound(f"no key has id {key_id}")
        return rows


def _key_rows(store: RecordStore, collection: str) -> builtins.list[Record]:
    return store.scan(collection, tenant=KEY_TENANT, session=_KIND, kinds=[_KIND], with_vectors=False)


_ADOPTED: set[tuple[int, str]] = set()


def open_keys(store: RecordStore, collections: Collections) -> KeyStore:
    """The key store of ``collections``, with keys of an older data dir (in the state
    collection) moved into it once per process."""
    keys = KeyStore(store, collections.keys)
    if (id(store), collections.keys) not in _ADOPTED:
        keys.adopt(collections.state)
        _ADOPTED.add((id(store), collections.keys))
    return keys


def _pk(digest: str) -> str:
    return f"{KEY_TENANT}/{_KIND}/{digest}"


def _info(row: Record) -> KeyInfo:
    # Rows written before scopes existed hold only tenant and key_id; before `shared`, no `shared`.
    p = row.payload
    revoked_ms = p.get("revoked_ms")
    shared = p.get("shared")
    return KeyInfo(
        key_id=str(p["key_id"]),
        tenant=str(p["tenant"]),
        admin=bool(p.get("admin", False)),
        read_only=bool(p.get("read_only", False)),
        session_id=p.get("session_id"),
        shared=None if shared is None else bool(shared),
        name=p.get("name"),
        created_at=_at(row.ts_ms),
        revoked_at=None if revoked_ms is None else _at(int(revoked_ms)),
    )
