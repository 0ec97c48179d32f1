"""The OpenAI Agents SDK's ``Session`` over Strata: :class:`StrataSession`.

``session = StrataSession("user-42")  # was SQLiteSession("user-42")`` and
``Runner.run(agent, prompt, session=session)`` keeps the conversation as a Strata session:
episodic memory (searchable, summarised) and working memory, under the key's tenant.

How items map onto the session's turns, one turn per item, in the order they were added:

- a message (``{"role": ..., "content": ...}``) is a turn whose text is the message's text:
  ``user`` and ``system`` / ``developer`` on the turn's user side (the role as ``speaker``),
  ``assistant`` on the agent side;
- any other item (``function_call``, ``function_call_output``, ``reasoning``, ...) is a turn on
  the agent side whose text says what it was (``[tool call] get_weather({"city": "Paris"})``,
  ``[tool output] ...``), so memory search and ``/v1/context`` see the agent's tool use;
- the item itself, exactly as given, is kept in the turn's metadata (``agents_sdk.item``),
  and that is what :meth:`StrataSession.get_items` returns. An item past Strata's 8 KB of
  turn metadata keeps its longest string as the turn's text instead (``agents_sdk.text_at``
  says where it goes back); an item that fits neither way (a string over 1,000,000 characters
  plus more than 8 KB of the rest) is refused with ``ValueError``;
- a turn the adapter did not write (recorded over REST, by another adapter) reads back as a
  user message and/or an assistant message.

``pop_item``: the session's last turn is forgotten in every layer
(``DELETE /v1/sessions/{id}/turns/{turn_id}``); a turn of another writer with both sides keeps
its user side, recorded again with its id, time and metadata. Finding the last turn reads the
session's turns. ``clear_session`` is ``DELETE /v1/sessions/{id}``: turns, vectors, summaries and
working memory. The tenant's PII rules may mask text, in the metadata too, so an item with an
e-mail address can come back with ``[EMAIL]`` in it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, cast

from pydantic import ValidationError

from strata.errors import NotFound
from strata.ids import validate_id
from strata.limits import TURN_CHARS_MAX
from strata.schema import TurnIn
from strata.schema.outputs import SessionTurn
from strata_adapters._common import StrataConnection

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

__all__ = ["StrataSession", "items_from_turn", "turn_from_item"]

#: The turn metadata key holding the item.
_MARK = "agents_sdk"
#: Turns per ``record_turns`` call, and per page read.
_BATCH_MAX = 1000
#: Characters of an item's description in a turn's text (the item itself is in the metadata).
_TEXT_CHARS = 4000
_USER_SIDE = ("user", "system", "developer")


class StrataSession:
    """An Agents SDK ``Session`` whose items are the turns of one Strata session.

    Args:
        session_id: the Strata session (letters, digits and ``_ . : -``, up to 128).
        connection: where Strata is and with which key; default
            :meth:`StrataConnection.from_env` (``STRATA_URL``, ``STRATA_API_KEY``).
        session_settings: the SDK's settings, a ``SessionSettings`` or a dict of its fields (as
            the SDK's own sessions take them); ``limit`` caps :meth:`get_items` when it is
            called without one.

    Raises:
        InvalidInput: ``session_id`` is not a valid Strata id.
        TypeError: ``session_settings`` is neither, or names a field ``SessionSettings`` has not.
    """

    def __init__(
        self,
        session_id: str,
        connection: StrataConnection | None = None,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = validate_id(session_id, field="session_id")
        # The SDK's Runner reads this attribute too (``.resolve(...)``): a dict must become the
        # settings object here, as the SDK's sessions do it, not be read as one later.
        self.session_settings: SessionSettings | None = None
        if session_settings is not None:
            from agents.memory.session_settings import coerce_session_settings

            self.session_settings = coerce_session_settings(session_settings)
        self.connection = connection or StrataConnection.from_env()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, the latest ``limit`` of them."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and limit <= 0:
            return []
        items = [item for turn in await self._turns(latest=limit) for item in items_from_turn(turn)]
        if limit is not None:
            items = items[-limit:]
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Record each item as a turn, in order.

        Raises:
            ValueError: an item that no turn can hold (see the module's notes); nothing of
                the batch is recorded then.
        """
        turns = [turn_from_item(cast("dict[str, Any]", item)) for item in items]
        client = self.connection.async_client
        for start in range(0, len(turns), _BATCH_MAX):
            await client.record_turns(self.session_id, turns[start : start + _BATCH_MAX])

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it; ``None`` for an empty session."""
        turns = await self._turns(latest=1)
        if not turns:
            return None
        last = turns[-1]
        items = items_from_turn(last)
        client = self.connection.async_client
        # One turn is forgotten, in every layer; the others are not touched (this forgot the
        # whole session and recorded it again: a failure in between lost every earlier turn).
        await client.forget_turn(self.session_id, last.turn_id)
        if len(items) > 1:  # a turn of another writer with both sides: the agent side goes
            await client.record_turns(self.session_id, [_again(last).model_copy(update={"agent": None})])
        return cast("TResponseInputItem", items[-1]) if items else None

    async def clear_session(self) -> None:
        """Forget the session in every layer (nothing to forget is no error)."""
        await _forget(self.connection, self.session_id)

    async def close(self) -> None:
        """Close the session's connection (as the SDK's own sessions' ``close``); ``async with``
        the session closes it on leaving."""
        await self.connection.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _turns(self, *, latest: int | None = None) -> list[SessionTurn]:
        """The session's turns, oldest first; with ``latest``, only the newest ones that hold at
        least ``latest`` items, read newest first a page at a time (a long session costs the
        last few turns, not all of them)."""
        client = self.connection.async_client
        turns: list[SessionTurn] = []
        after: str | None = None
        size, held = _BATCH_MAX if latest is None else min(latest, _BATCH_MAX), 0
        while True:
            try:
                page = await client.list_turns(self.session_id, after=after, limit=size,
                                               newest_first=latest is not None)
            except NotFound:
                break  # no turns yet (or forgotten)
            turns += page.turns
            if latest is not None:
                held += sum(len(items_from_turn(turn)) for turn in page.turns)
                if held >= latest:
                    break
            if page.next_after is None:
                break
            after = page.next_after
        return turns if latest is None else turns[::-1]


def turn_from_item(item: dict[str, Any]) -> TurnIn:
    """The turn that holds ``item`` (see the module's notes).

    Raises:
        ValueError: ``item`` is not a dict, or too large for a turn.
    """
    if not isinstance(item, dict):
        raise ValueError(f"an Agents SDK item is a dict, not a {type(item).__name__}")
    role = item.get("role") if item.get("type", "message") == "message" else None
    side = "user" if role in _USER_SIDE else "agent"
    speaker = role if role in ("system", "developer") else None
    text = _describe(item)
    if not text.strip():
        text = f"[{item.get('type') or role or 'item'}]"
    try:
        return _turn(side, _clip(text), speaker, {"item": item})
    except ValidationError as exc:
        if any(error["loc"][:1] != ("metadata",) for error in exc.errors()):
            raise ValueError(f"an Agents SDK item a Strata turn cannot take: {exc.errors()[0]['msg']}") from None
        # past the metadata's 8 KB: the longest string moves to the turn's text
    path, longest = _longest_string(item)
    if not longest.strip():
        raise ValueError("an Agents SDK item is past the 8 KB a Strata turn's metadata holds")
    skeleton = _replaced(item, path, "")
    try:
        return _turn(side, longest, speaker, {"item": skeleton, "text_at": path})
    except ValidationError as exc:
        raise ValueError(
            f"an Agents SDK item too large for a Strata turn: its longest text has {len(longest)} characters "
            f"(at most {TURN_CHARS_MAX}) and the rest must fit in 8 KB of JSON ({exc.errors()[0]['msg']})"
        ) from None


def _turn(side: str, text: str, speaker: str | None, mark: dict[str, Any]) -> TurnIn:
    user, agent = (text, None) if side == "user" else (None, text)
    return TurnIn(user=user, agent=agent, speaker=speaker, metadata={_MARK: mark})


def items_from_turn(turn: SessionTurn) -> list[dict[str, Any]]:
    """The items a turn holds: the one this adapter stored, else its sides as messages."""
    mark = turn.metadata.get(_MARK)
    if isinstance(mark, dict) and isinstance(mark.get("item"), dict):
        item: dict[str, Any] = mark["item"]
        path = mark.get("text_at")
        if isinstance(path, list):
            item = _replaced(item, path, turn.user if turn.user is not None else turn.agent or "")
        return [item]
    items = []
    if turn.user:
        items.append({"role": "user", "content": turn.user})
    if turn.agent:
        items.append({"role": "assistant", "content": turn.agent})
    return items


async def _forget(connection: StrataConnection, session_id: str) -> None:
    with contextlib.suppress(NotFound):  # no memory of it: forgotten already
        await connection.async_client.forget_session(session_id)


def _again(turn: SessionTurn) -> TurnIn:
    """A stored turn as it is recorded again: same id, time, sides and metadata."""
    ttl_s = None
    if turn.expires_at is not None:
        ttl_s = max((turn.expires_at - datetime.now(UTC)).total_seconds(), 1.0)
    return TurnIn(
        user=turn.user,
        agent=turn.agent,
        timestamp=turn.timestamp,
        turn_id=turn.turn_id,
        speaker=turn.speaker,
        metadata=turn.metadata,
        ttl_s=ttl_s,
    )


def _describe(item: dict[str, Any]) -> str:
    """What an item says, in words a search can match."""
    kind = item.get("type", "message")
    if kind == "message":
        return _text(item.get("content"))
    if kind == "function_call":
        return f"[tool call] {item.get('name', '?')}({_text(item.get('arguments'))})"
    if kind in ("function_call_output", "custom_tool_call_output", "computer_call_output"):
        return f"[tool output] {_text(item.get('output'))}"
    return f"[{kind}] {json.dumps(item, ensure_ascii=False, default=str)}"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: input_text / output_text / refusal / images
        parts = [
            p.get("text") or p.get("refusal") or f"[{p.get('type', 'part')}]" for p in content if isinstance(p, dict)
        ]
        return "\n".join(str(p) for p in parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def _clip(text: str) -> str:
    return text if len(text) <= _TEXT_CHARS else text[: _TEXT_CHARS - 1] + "…"


def _longest_string(value: Any, path: Sequence[str | int] = ()) -> tuple[list[str | int], str]:
    best: tuple[list[str | int], str] = (list(path), value if isinstance(value, str) else "")
    children: Any = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found = _longest_string(child, [*path, key])
        if len(found[1]) > len(best[1]):
            best = found
    return best


def _replaced(value: Any, path: Sequence[str | int], text: str) -> Any:
    """A copy of ``value`` with ``text`` at ``path``."""
    if not path:
        return text
    head, rest = path[0], path[1:]
    if isinstance(value, dict) and isinstance(head, str) and head in value:
        return {**value, head: _replaced(value[head], rest, text)}
    if isinstance(value, list) and isinstance(head, int) and 0 <= head < len(value):
        return [*value[:head], _replaced(value[head], rest, text), *value[head + 1 :]]
    return value  # the path no longer fits (an edited turn): leave the item as stored
