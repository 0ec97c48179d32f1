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

A key's scope is four facts, fixed when it is made (a rotated key keeps them):

- its **tenant** (an admin key has none: ``/v1/admin`` routes only, 403 on tenant routes);
- **read_only**: it may read and never write, nor store an idempotent answer;
- **session_id**: working and episodic memory of that one session only (the
  session layers, :data:`SESSION_LAYERS`); without it, of every session;
- **shared**: whether it sees the tenant-wide layers, documents (semantic) and
  skills (procedural). On by default for a tenant-wide key, off for a session key.

Every tenant route says what it needs as a :class:`Need` (the layers it reads and
writes; the table is ``ROUTES`` in ``serve_app/auth.py``), and :func:`authorize`
checks the key against it:

- each layer read or written must be one the key sees (:attr:`KeyInfo.layers`);
- a write needs a key that is not read-only;
- a session layer, read or written, needs the session the route names to be the
  key's own (a route over every session, such as ``/v1/audit`` or a search without
  ``session_id``, is refused to a session key);
- a tenant-wide layer is written only by a key bound to no session: a session key,
  shared or not, writes its own session's memory and nothing else.

``/v1/search`` and ``/v1/context`` read the layers the request names (403 for one the
key does not see) or, by default, every layer the key sees: the others are left out
without a word. ``/v1/interactions`` teaches a skill only for a key that may write
skills. Rows written before scopes existed hold only tenant and key_id: they read as
full tenant keys, and a row without ``shared`` takes the default of its kind.
"""

from __future__ import annotations

import builtins
import hashlib
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from strata.errors import InvalidInput, NotFound, StrataError
from strata.ids import ID_PATTERN, SYSTEM_TENANT, validate_id
from strata.layers import LAYERS, Layer
from strata.store.layout import Collections
from strata.store.records import Record, RecordStore

__all__ = [
    "KEY_ID_PATTERN",
    "KEY_PREFIX",
    "KEY_TENANT",
    "SESSION_LAYERS",
    "SHARED_LAYERS",
    "Forbidden",
    "KeyCreateIn",
    "KeyCreated",
    "KeyInfo",
    "KeyList",
    "KeyStore",
    "Need",
    "authorize",
    "hash_key",
    "may",
    "open_keys",
    "visible_layers",
    "well_formed",
]

#: Keys live in a tenant of their own, out of reach of any tenant's calls.
KEY_TENANT = SYSTEM_TENANT
KEY_PREFIX = "sk-strata-"
KEY_ID_PATTERN = re.compile(r"[0-9a-f]{12}")
_KIND = "apikey"
_MAX_KEY_CHARS = 200
_MAX_NAME_CHARS = 100
_ID = ID_PATTERN.pattern.join("^$")

#: The layers that hold one session's memory; a session key reaches its own session's only.
SESSION_LAYERS: frozenset[Layer] = frozenset(("working", "episodic"))
#: The tenant-wide layers: documents (semantic) and skills (procedural), seen by a ``shared`` key.
SHARED_LAYERS: frozenset[Layer] = frozenset(LAYERS) - SESSION_LAYERS
_WHAT = {"working": "working memory", "episodic": "episodic memory", "semantic": "documents", "procedural": "skills"}


class Forbidden(StrataError):
    """403: the key is valid but its scope does not cover the call; the message says what it may do."""

    status_code = 403


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

    tenant: str = Field(pattern=_ID)
    read_only: bool = False
    session_id: str | None = Field(default=None, pattern=_ID, description="Limit the key to this session")
    shared: bool | None = Field(
        default=None,
        description="Let the key see documents and skills (read them; write them too if it is bound to no session "
        "and not read-only). Default: true for a tenant-wide key, false for a session key",
    )
    name: str | None = Field(default=None, max_length=_MAX_NAME_CHARS, description="A label for people")


class KeyList(BaseModel):
    keys: list[KeyInfo]


@dataclass(frozen=True)
class Need:
    """What a tenant route does: the layers it reads and the layers it writes.

    Attributes:
        reads: layers the route reads.
        writes: layers the route writes (any write needs a key that is not read-only).
        chosen: the request names the layers it reads among ``reads`` (search, context):
            see :func:`visible_layers`.
        learns: layers the route also writes when the key may, and leaves alone when
            it may not (an interaction teaches a skill: procedural).
    """

    reads: frozenset[Layer] = frozenset()
    writes: frozenset[Layer] = frozenset()
    chosen: bool = False
    learns: frozenset[Layer] = frozenset()

    @property
    def stores(self) -> bool:
        """Whether the route changes memory (and so may keep an answer for an Idempotency-Key)."""
        return bool(self.writes)


def authorize(info: KeyInfo, need: Need, *, session: str | None) -> None:
    """Raise :class:`Forbidden` unless ``info``'s scope covers ``need``.

    Args:
        need: what the route reads and writes (for a route whose request names its
            layers, the ``Need`` of those layers).
        session: the session the route is confined to (its path's or its body's
            ``session_id``); None for a route over every session.

    Raises:
        Forbidden: the message says what the key may do instead.
    """
    if info.admin:
        raise Forbidden("an admin key may call /v1/admin routes only; use a tenant key here")
    if need.writes and info.read_only:
        raise Forbidden(f"{_describe(info)}: it may call GET routes, POST /v1/context and POST /v1/search only")
    hidden = sorted((need.reads | need.writes) - info.layers, key=LAYERS.index)
    if hidden:
        raise Forbidden(f"{_describe(info)}: it may not reach {_names(hidden)}; a key created with shared=true may")
    if info.session_id is not None:
        if (need.reads | need.writes) & SESSION_LAYERS and session != info.session_id:
            where = f"session {session!r}" if session is not None else "every session (give session_id)"
            raise Forbidden(f"{_describe(info)}: it may call routes of session {info.session_id!r}, not of {where}")
        if need.writes & SHARED_LAYERS:
            written = sorted(need.writes & SHARED_LAYERS, key=LAYERS.index)
            raise Forbidden(f"{_describe(info)}: it may not change {_names(written)}; a key bound to no session may")


def may(info: KeyInfo, need: Need, *, session: str | None) -> bool:
    """Whether :func:`authorize` lets ``info`` do ``need``."""
    try:
        authorize(info, need, session=session)
    except Forbidden:
        return False
    return True


def visible_layers(info: KeyInfo, asked: Iterable[Layer] | None, *, default: Iterable[Layer]) -> list[Layer]:
    """The layers a search or context call of ``info`` reads: the ones it ``asked`` for, each
    one the key must see (:class:`Forbidden` otherwise); without any asked (None), those of
    ``default`` the key sees, the others left out. An empty list asks for nothing and gets
    nothing: the stages after authorization read the layers returned here, never the request's
    own field, so ``[]`` cannot turn into "every layer" later (STYLE.md, habit 17)."""
    if asked is not None:
        wanted = list(dict.fromkeys(asked))
        hidden = [layer for layer in wanted if layer not in info.layers]
        if hidden:
            raise Forbidden(f"{_describe(info)}: it may not read {_names(hidden)}; leave layers out to read all it may")
        return wanted
    return [layer for layer in dict.fromkeys(default) if layer in info.layers]


def _describe(info: KeyInfo) -> str:
    limits = (
        (["read-only"] if info.read_only else [])
        + ([f"limited to session {info.session_id!r}"] if info.session_id is not None else [])
        + ([] if info.sees_shared else ["without documents and skills"])
    )
    return f"this key is {' and '.join(limits)}" if limits else "this key"


def _names(layers: Iterable[Layer]) -> str:
    return ", ".join(f"{_WHAT[layer]} ({layer})" for layer in layers)


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
        revoked: KeyInfo | None = None
        now_ms = int(self._clock() * 1000)
        for row in self._find(key_id):
            if row.payload.get("revoked_ms") is None:
                row = replace(row, payload={**row.payload, "revoked_ms": now_ms})
                self._store.upsert(self._collection, [row])
            revoked = _info(row)
        assert revoked is not None
        return revoked

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
