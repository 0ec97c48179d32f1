"""What a key may do: its scope checked against what a route needs.

A key's scope is four facts, fixed when it is made (a rotated key keeps them; they are
stored with it, :mod:`strata.access.keys`):

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

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata.errors import StrataError
from strata.layers import LAYERS, Layer

if TYPE_CHECKING:  # keys.py reads the layer sets below at import
    from strata.access.keys import KeyInfo

__all__ = ["SESSION_LAYERS", "SHARED_LAYERS", "Forbidden", "Need", "authorize", "may", "visible_layers"]

#: The layers that hold one session's memory; a session key reaches its own session's only.
SESSION_LAYERS: frozenset[Layer] = frozenset(("working", "episodic"))
#: The tenant-wide layers: documents (semantic) and skills (procedural), seen by a ``shared`` key.
SHARED_LAYERS: frozenset[Layer] = frozenset(LAYERS) - SESSION_LAYERS
_WHAT = {"working": "working memory", "episodic": "episodic memory", "semantic": "documents", "procedural": "skills"}


class Forbidden(StrataError):
    """403: the key is valid but its scope does not cover the call; the message says what it may do."""

    status_code = 403


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
