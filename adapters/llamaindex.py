"""A LlamaIndex memory block over Strata: :class:`StrataMemoryBlock`.

``Memory.from_defaults(session_id="user-42", memory_blocks=[StrataMemoryBlock()])`` (was
``memory_blocks=[FactExtractionMemoryBlock(...)]``, or none) gives an agent Strata's context
and keeps what falls out of its short-term memory as Strata turns.

What maps:

- ``aget`` (``Memory.get`` / ``aget`` call it with the chat history and the new input): the
  latest user message's text is the ``message`` of ``POST /v1/context`` for the session, and
  the block's content is the context Strata returns (working memory and, by the task type's
  policy, episodic, semantic and procedural memory, fitted to ``max_tokens``). The ``Memory``
  puts it in the system message (or the latest user message), inside ``<memory><strata>``.
  No user message, no context (an empty block).
- ``aput`` (``Memory`` calls it with the messages it flushes from its FIFO queue, once the
  queue passes ``token_limit * chat_history_token_ratio``): each user message and the
  assistant messages after it are one turn (``user``, ``agent``); an assistant message with
  no user message before it is a turn with only an agent side. The turns carry
  ``{"source": "llama_index"}`` as metadata.
- the session: ``session_id`` if given, else the ``Memory``'s own ``session_id`` (which must
  then be a valid Strata id: letters, digits and ``_ . : -``).

What does not map: tool and system messages, and non-text blocks (images, audio, tool-call
blocks), are not recorded; a side's text is cut to Strata's 1,000,000 characters. Messages still
in the ``Memory``'s queue are not in Strata until they are flushed (``Memory`` keeps them in
its own chat store). ``atruncate`` is the base class's (the block is dropped whole when the
``Memory`` must cut and the block's ``priority`` allows it); size the block with
``max_tokens`` instead. The interface is async only; ``Memory``'s sync methods run it.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field
from llama_index.core.memory.memory import BaseMemoryBlock

from strata.ids import validate_id
from strata.layers import Layer
from strata.limits import MESSAGE_CHARS_MAX, TURN_CHARS_MAX
from strata.schema import TurnIn
from strata_adapters._common import Closes, StrataConnection

__all__ = ["StrataConnection", "StrataMemoryBlock", "turns_from_messages"]

#: Turns per ``record_turns`` call.
_BATCH_MAX = 1000
_METADATA = {"source": "llama_index"}


class StrataMemoryBlock(Closes, BaseMemoryBlock[str]):
    """Strata's context for the latest user message; flushed messages recorded as turns.
    ``close()`` / ``aclose()`` (or ``with`` / ``async with`` the block) close its connection:
    the ``Memory``'s sync methods run the block in an event loop of their own, whose client
    ``close()`` closes.

    Args:
        connection: where Strata is and with which key; default
            :meth:`StrataConnection.from_env` (``STRATA_URL``, ``STRATA_API_KEY``).
        session_id: the Strata session; default the ``Memory``'s.
        task_type: the context policy (``general``, ``coding``, ...: which layers are read).
        max_tokens: the context's token budget; default the server's.
        layers: read these layers instead of the task type's policy.
    """

    name: str = Field(default="strata", description="The block's name: its tag in the memory template.")
    connection: StrataConnection = Field(default_factory=StrataConnection.from_env, exclude=True)
    session_id: str | None = Field(default=None, description="The Strata session; default the Memory's.")
    task_type: str = Field(default="general")
    max_tokens: int | None = Field(default=None, ge=64)
    layers: list[Layer] | None = Field(default=None)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        query = next((m.content for m in reversed(messages or []) if m.role == "user" and m.content), None)
        if query is None or not query.strip():
            return ""
        context = await self.connection.async_client.build_context(
            query[:MESSAGE_CHARS_MAX],
            self._session(block_kwargs.get("session_id")),
            task_type=self.task_type,
            max_tokens=self.max_tokens,
            layers=self.layers,
        )
        return context.context

    async def _aput(self, messages: list[ChatMessage]) -> None:
        turns = turns_from_messages(messages)
        if not turns:
            return
        flushed = next((m.additional_kwargs.get("session_id") for m in messages), None)
        session = self._session(flushed)
        client = self.connection.async_client
        for start in range(0, len(turns), _BATCH_MAX):
            await client.record_turns(session, turns[start : start + _BATCH_MAX])

    def _session(self, memory_session: Any) -> str:
        session = self.session_id or memory_session
        if not session:
            raise ValueError("no session: give StrataMemoryBlock(session_id=...) or use it inside a Memory")
        return validate_id(session, field="session_id")


def turns_from_messages(messages: list[ChatMessage]) -> list[TurnIn]:
    """Exchanges as turns: a user message and the assistant messages after it (see the module's notes)."""
    turns: list[TurnIn] = []
    user: str | None = None
    agent: list[str] = []

    def close() -> None:
        answer = "\n".join(agent)
        if (user or "").strip() or answer.strip():
            turns.append(TurnIn(user=_cut(user), agent=_cut(answer) or None, metadata=dict(_METADATA)))

    for message in messages:
        text = message.content or ""
        if message.role == "user":
            close()
            user, agent = text, []
        elif message.role == "assistant" and text.strip():
            agent.append(text)
    close()
    return turns


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= TURN_CHARS_MAX:
        return text
    return text[: TURN_CHARS_MAX - 1] + "…"
