"""The LangChain history's mapping of messages onto turns and back (no stack)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage

from strata.schema import TurnIn
from strata.schema.outputs import SessionTurn
from strata_adapters.langchain import messages_from_turns, turns_from_messages


def _read_back(turns: list[dict[str, Any]]) -> list[BaseMessage]:
    """What a session returns for ``turns``: each validated as the API does, then read back."""
    stored = [
        SessionTurn(
            turn_id=f"t{n}",
            timestamp=datetime.now(UTC),
            text="",
            **TurnIn(**t).model_dump(exclude={"ttl_s", "timestamp", "turn_id"}),
        )
        for n, t in enumerate(turns)
    ]
    return messages_from_turns(stored)


def test_an_answer_shares_the_turn_of_what_it_answers() -> None:
    turns = turns_from_messages([HumanMessage("hi"), AIMessage("hello"), HumanMessage("bye")])
    assert turns == [{"user": "hi", "agent": "hello", "metadata": {}}, {"user": "bye", "metadata": {}}]
    assert turns_from_messages([AIMessage("unprompted"), AIMessage("again")]) == [
        {"agent": "unprompted", "metadata": {}},
        {"agent": "again", "metadata": {}},
    ]


def test_every_kind_of_message_reads_back_as_it_was() -> None:
    call = {"name": "search", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}
    messages: list[BaseMessage] = [
        SystemMessage("rules"),
        HumanMessage("q", name="ada"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("result", tool_call_id="c1"),
        AIMessage("answer"),
        ChatMessage(content="aside", role="critic"),
        AIMessage("with a call", tool_calls=[{**call, "id": "c2"}]),
    ]
    back = _read_back(turns_from_messages(messages))
    assert [(m.type, m.content, m.name) for m in back] == [(m.type, m.content, m.name) for m in messages]
    assert [getattr(m, "tool_calls", None) for m in back] == [getattr(m, "tool_calls", None) for m in messages]
    assert isinstance(back[3], ToolMessage) and back[3].tool_call_id == "c1"
    assert isinstance(back[5], ChatMessage) and back[5].role == "critic"


def test_messages_without_text_are_skipped_and_content_blocks_keep_their_text() -> None:
    turns = turns_from_messages(
        [
            HumanMessage(""),
            HumanMessage("   "),
            AIMessage(""),
            HumanMessage([{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "x"}}]),
        ]
    )
    assert turns == [{"user": "see", "metadata": {}}]


def test_turns_recorded_otherwise_read_as_human_and_ai() -> None:
    back = _read_back([{"user": "u", "agent": "a", "speaker": "bob", "metadata": {"langchain": "junk"}}])
    assert [(m.type, m.content, m.name) for m in back] == [("human", "u", "bob"), ("ai", "a", None)]
