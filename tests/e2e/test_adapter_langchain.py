"""LangChain's chat history over a real stack: ``RunnableWithMessageHistory`` with a fake chat model
keeps its exchanges as Strata turns, sync and async; roles and tool calls come back; clear
forgets; tenants apart; the example as a user runs it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from strata.errors import InvalidInput
from strata_adapters.langchain import StrataChatMessageHistory, StrataConnection
from tests.e2e.running import Running


def _connection(stack: Running, tenant: str) -> StrataConnection:
    return StrataConnection(stack.url, stack.new_key("create", tenant))


def _chat(connection: StrataConnection, replies: list[str], seen: list[list[BaseMessage]]) -> Any:
    """A ``RunnableWithMessageHistory`` over a scripted model; ``seen`` collects each model input."""

    def look(prompt: Any) -> list[BaseMessage]:
        messages: list[BaseMessage] = prompt.to_messages()
        seen.append(messages)
        return messages

    prompt = ChatPromptTemplate.from_messages(
        [("system", "be brief"), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = prompt | RunnableLambda(look) | GenericFakeChatModel(messages=iter(replies))
    return RunnableWithMessageHistory(
        chain,
        lambda session_id: StrataChatMessageHistory(session_id, connection),
        input_messages_key="question",
        history_messages_key="history",
    )


def _shape(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    return [(m.type, str(m.content)) for m in messages]


def test_runnable_with_message_history_keeps_each_exchange_as_one_turn(agents_stack: Running) -> None:
    connection = _connection(agents_stack, "lc-chat")
    seen: list[list[BaseMessage]] = []
    chat = _chat(connection, ["Lisbon is sunny in May.", "You asked about Lisbon."], seen)
    config = {"configurable": {"session_id": "trip-1"}}
    chat.invoke({"question": "How is Lisbon in May?"}, config=config)
    chat.invoke({"question": "Which city did I ask about?"}, config=config)
    # The second call's model input carried the first exchange, read back from Strata.
    assert _shape(seen[1]) == [
        ("system", "be brief"),
        ("human", "How is Lisbon in May?"),
        ("ai", "Lisbon is sunny in May."),
        ("human", "Which city did I ask about?"),
    ]
    turns = connection.client.list_turns("trip-1").turns
    assert [(t.user, t.agent) for t in turns] == [
        ("How is Lisbon in May?", "Lisbon is sunny in May."),
        ("Which city did I ask about?", "You asked about Lisbon."),
    ]
    found = connection.client.search("sunny Lisbon", layers=["episodic"], session_id="trip-1", top_k=1)
    assert found.hits and turns[0].turn_id in found.hits[0].turn_ids


def test_roles_names_and_tool_calls_come_back(agents_stack: Running) -> None:
    history = StrataChatMessageHistory("tools-1", _connection(agents_stack, "lc-roles"))
    call = {"name": "weather", "args": {"city": "Lisbon", "days": 2}, "id": "call-1", "type": "tool_call"}
    messages: list[BaseMessage] = [
        SystemMessage("You are a travel agent."),
        HumanMessage("Weather in Lisbon?", name="ada"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("22 C and sunny", tool_call_id="call-1"),
        AIMessage("It is 22 C and sunny."),
        AIMessage("Anything else?"),
        HumanMessage(""),  # no text: a turn cannot hold it
        HumanMessage("No, thanks."),
    ]
    history.add_messages(messages)
    back = history.messages
    assert _shape(back) == _shape(messages[:6] + messages[7:])
    assert back[1].name == "ada" and isinstance(back[2], AIMessage)
    assert [(c["name"], c["args"], c["id"]) for c in back[2].tool_calls] == [("weather", call["args"], "call-1")]
    assert isinstance(back[3], ToolMessage) and back[3].tool_call_id == "call-1"
    # Stored as turns an agent's memory can read: the tool call written out, the tool result labelled.
    turns = history.connection.client.list_turns("tools-1").turns
    assert [(t.user, t.speaker, t.agent) for t in turns] == [
        ("You are a travel agent.", "system", None),
        ("Weather in Lisbon?", "ada", 'weather({"city": "Lisbon", "days": 2})'),
        ("22 C and sunny", "tool", "It is 22 C and sunny."),
        (None, None, "Anything else?"),
        ("No, thanks.", None, None),
    ]


def test_clear_forgets_the_session_and_an_unknown_session_is_empty(agents_stack: Running) -> None:
    connection = _connection(agents_stack, "lc-clear")
    history = StrataChatMessageHistory("to-forget", connection)
    assert history.messages == []
    history.clear()  # nothing recorded: nothing to forget, no error
    history.add_user_message("remember the code 4242")
    history.add_ai_message("noted")
    assert _shape(history.messages) == [("human", "remember the code 4242"), ("ai", "noted")]
    history.clear()
    assert history.messages == []
    assert connection.client.search("code 4242", session_id="to-forget").hits == []
    with pytest.raises(InvalidInput, match="session_id"):
        StrataChatMessageHistory("not a valid id!", connection)


def test_a_key_of_another_tenant_sees_nothing(agents_stack: Running) -> None:
    mine = StrataChatMessageHistory("same-id", _connection(agents_stack, "lc-tenant-a"))
    theirs = StrataChatMessageHistory("same-id", _connection(agents_stack, "lc-tenant-b"))
    mine.add_messages([HumanMessage("my secret is swordfish"), AIMessage("kept")])
    assert theirs.messages == []
    theirs.clear()
    assert len(mine.messages) == 2


def test_async_history_through_ainvoke_across_event_loops(agents_stack: Running) -> None:
    connection = _connection(agents_stack, "lc-async")
    seen: list[list[BaseMessage]] = []
    chat = _chat(connection, ["first answer", "second answer"], seen)
    config = {"configurable": {"session_id": "async-1"}}
    asyncio.run(chat.ainvoke({"question": "first question"}, config=config))
    asyncio.run(chat.ainvoke({"question": "second question"}, config=config))  # another loop
    assert _shape(seen[1])[1:3] == [("human", "first question"), ("ai", "first answer")]
    history = StrataChatMessageHistory("async-1", connection)

    async def check() -> None:
        assert len(await history.aget_messages()) == 4
        await history.aadd_messages([AIMessage("an afterthought")])
        assert _shape(await history.aget_messages())[-1] == ("ai", "an afterthought")
        await history.aclear()
        assert await history.aget_messages() == []

    asyncio.run(check())


def test_the_example_runs_against_the_stack(agents_stack: Running) -> None:
    out = agents_stack.run_example("langchain_chat.py", "lc-ex")
    assert "agent: You said under 150 euros a night." in out
    # Each call's model sees the system prompt, the history kept in Strata, and the question.
    assert [line.strip() for line in out.splitlines() if "model sees" in line] == [
        "(the model sees 2 messages)",
        "(the model sees 4 messages)",
        "(the model sees 6 messages)",
    ]
    assert "history in Strata: 6 messages" in out
    assert "search 'hotel budget': " in out and "150 euros" in out.split("search 'hotel budget': ")[1]
