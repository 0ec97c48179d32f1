"""LangChain's ``BaseChatMessageHistory`` over Strata: :class:`StrataChatMessageHistory`.

``get_session_history = lambda sid: StrataChatMessageHistory(sid, connection)  # was InMemoryChatMessageHistory()``
and a ``RunnableWithMessageHistory`` keeps its conversations as Strata sessions: episodic
memory (searchable, summarised) and working memory, under the key's tenant.

How messages map onto a session's turns (a turn is one exchange: ``user``, ``agent``):

- a ``HumanMessage`` opens a turn as its ``user`` side (its ``name``, if any, is the turn's
  ``speaker``); the ``AIMessage`` right after it in the same ``add_messages`` call is that turn's
  ``agent`` side. An ``AIMessage`` with no message before it to answer is a turn with only an
  ``agent`` side; a ``HumanMessage`` with no answer, a turn with only a ``user`` side. So a
  ``RunnableWithMessageHistory`` exchange (``[input, output]``) is one turn, and messages read
  back in the order they were added.
- ``SystemMessage``, ``ToolMessage`` and ``ChatMessage(role=...)`` are a user side too, with
  the role as ``speaker`` (so a search reads ``tool: ...``) and in the turn's metadata
  (``langchain.role``; a ``ToolMessage``'s ``tool_call_id`` beside it); they read back as what
  they were.
- an ``AIMessage``'s ``tool_calls`` (name, args, id) are kept in the turn's metadata and come
  back; with no text, the agent side is the calls written out (``name({...})``), so memory can
  find them, and it reads back as an empty content again.
- ``messages``: ``GET /v1/sessions/{id}/turns``, a page per 1,000 turns; no turns, no messages.
- ``clear``: ``DELETE /v1/sessions/{id}``: the session is forgotten in every layer (turns,
  vectors, summaries, working memory).

What cannot be kept: message ids, ``additional_kwargs``, ``response_metadata``, ``usage_metadata``
and an ``AIMessage``'s ``name``; content blocks other than text (images, files); a message with
no text (and no tool calls), which a turn cannot hold. Tool calls and ids together are limited
by Strata's 8 KB of metadata per turn (a larger turn is refused, 422), a side's text by its
1,000,000 characters. The tenant's PII rules may mask text before it is stored.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from strata.errors import NotFound
from strata.ids import validate_id
from strata.schema.outputs import SessionTurn, SessionTurns
from strata_adapters._common import Closes, Flow, StrataConnection, call, run_async, run_sync

__all__ = ["StrataChatMessageHistory", "StrataConnection", "messages_from_turns", "turns_from_messages"]

#: The turn metadata key holding what a message needs besides its text.
_MARK = "langchain"
#: Strata's limits: turns per batch, characters of a speaker label.
_BATCH_MAX = 1000
_SPEAKER_MAX = 64
_PAGE = 1000


def _role(message: BaseMessage) -> str | None:
    """The role a user-side message keeps in metadata; None for a ``HumanMessage``."""
    if isinstance(message, HumanMessage):
        return None
    if isinstance(message, ChatMessage):
        return message.role
    return message.type  # "system", "tool", "function", ...


def turns_from_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The turns (``TurnIn`` fields) that keep ``messages``: each answer paired with what it answers."""
    turns: list[dict[str, Any]] = []
    waiting: dict[str, Any] | None = None  # a turn whose user side has no answer yet
    for message in messages:
        text = str(message.text)
        if isinstance(message, AIMessage):
            mark: dict[str, Any] = {}
            calls = [{"name": c["name"], "args": c["args"], "id": c.get("id")} for c in message.tool_calls]
            if calls:
                mark["tool_calls"] = calls
            if not text.strip():
                if not calls:
                    continue  # nothing a turn can hold
                text = "; ".join(f"{c['name']}({json.dumps(c['args'], ensure_ascii=False)})" for c in calls)
                mark["agent_blank"] = True
            turn = waiting if waiting is not None else {"metadata": {}}
            if waiting is None:
                turns.append(turn)
            turn["agent"] = text
            if mark:
                turn["metadata"].setdefault(_MARK, {}).update(mark)
            waiting = None
            continue
        if not text.strip():
            continue
        role = _role(message)
        user_mark: dict[str, Any] = {}
        if role is not None:
            user_mark["role"] = role
        if isinstance(message, ToolMessage):
            user_mark["tool_call_id"] = message.tool_call_id
        speaker = message.name or role
        waiting = {"user": text, "metadata": {_MARK: user_mark} if user_mark else {}}
        if speaker:
            waiting["speaker"] = speaker[:_SPEAKER_MAX]
        turns.append(waiting)
    return turns


def messages_from_turns(turns: Sequence[SessionTurn]) -> list[BaseMessage]:
    """The messages a session's turns hold, in order (turns recorded otherwise read as human/AI)."""
    out: list[BaseMessage] = []
    for turn in turns:
        mark = turn.metadata.get(_MARK)
        mark = mark if isinstance(mark, dict) else {}
        if turn.user:
            out.append(_user_message(turn.user, turn.speaker, mark))
        if turn.agent:
            calls = [
                {"name": c["name"], "args": c["args"], "id": c.get("id")}
                for c in mark.get("tool_calls") or []
                if isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("args"), dict)
            ]
            content = "" if mark.get("agent_blank") and calls else turn.agent
            out.append(AIMessage(content=content, tool_calls=calls))
    return out


def _user_message(text: str, speaker: str | None, mark: dict[str, Any]) -> BaseMessage:
    role = mark.get("role") if isinstance(mark.get("role"), str) else None
    name = speaker if speaker and speaker != role else None
    if role is None:
        return HumanMessage(content=text, name=name)
    if role == "system":
        return SystemMessage(content=text, name=name)
    if role == "tool":
        return ToolMessage(content=text, tool_call_id=str(mark.get("tool_call_id") or ""), name=name)
    return ChatMessage(content=text, role=role, name=name)


# -- the operations, each once (see strata_adapters._common) -------------------------------


def _read(session_id: str) -> Flow[list[BaseMessage]]:
    turns: list[SessionTurn] = []
    after: str | None = None
    while True:
        try:
            page: SessionTurns = yield call("list_turns", session_id, after=after, limit=_PAGE)
        except NotFound:
            return []  # a session without turns
        turns += page.turns
        if page.next_after is None:
            return messages_from_turns(turns)
        after = page.next_after


def _add(session_id: str, messages: Sequence[BaseMessage]) -> Flow[None]:
    turns = turns_from_messages(messages)
    for start in range(0, len(turns), _BATCH_MAX):
        yield call("record_turns", session_id, turns[start : start + _BATCH_MAX])
    return None


def _clear(session_id: str) -> Flow[None]:
    with contextlib.suppress(NotFound):  # nothing recorded: nothing to forget
        yield call("forget_session", session_id)
    return None


class StrataChatMessageHistory(Closes, BaseChatMessageHistory):
    """The messages of one Strata session (see the module docstring for the mapping).
    ``close()`` / ``aclose()`` (or ``with`` / ``async with`` the history) close its connection.

    Args:
        session_id: the Strata session; 1-128 letters, digits and ``_ . : -``.
        connection: where Strata is, and the key (its tenant holds the session).

    Raises:
        strata.errors.InvalidInput: ``session_id`` is not a valid Strata id.
    """

    def __init__(self, session_id: str, connection: StrataConnection) -> None:
        super().__init__()
        self.session_id = validate_id(session_id, field="session_id")
        self.connection = connection

    @classmethod
    def from_env(cls, session_id: str) -> StrataChatMessageHistory:
        """The session's history at ``STRATA_URL`` with the key ``STRATA_API_KEY``."""
        return cls(session_id, StrataConnection.from_env())

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first."""
        return run_sync(self.connection.client, _read(self.session_id))

    async def aget_messages(self) -> list[BaseMessage]:
        return await run_async(self.connection.async_client, _read(self.session_id))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        run_sync(self.connection.client, _add(self.session_id, messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await run_async(self.connection.async_client, _add(self.session_id, messages))

    def clear(self) -> None:
        run_sync(self.connection.client, _clear(self.session_id))

    async def aclear(self) -> None:
        await run_async(self.connection.async_client, _clear(self.session_id))
