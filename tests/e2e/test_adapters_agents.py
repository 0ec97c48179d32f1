"""The LlamaIndex memory block and the OpenAI Agents SDK session against the real libraries and
the shared running stack; traces of any shape through ``/v1/skills:extract``; the examples as a
user runs them. Each test works in a tenant of its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, Runner, TResponseInputItem, Usage, set_tracing_disabled
from agents.memory import Session, SessionSettings
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from strata_adapters._common import StrataConnection
from strata_adapters.llamaindex import StrataMemoryBlock
from strata_adapters.openai_agents import StrataSession
from tests.e2e.running import Running


def _connection(stack: Running, tenant: str) -> StrataConnection:
    return StrataConnection(stack.url, stack.new_key("create", tenant))


# -- OpenAI Agents SDK ------------------------------------------------------------------

ITEMS: list[Any] = [
    {"role": "user", "content": "  What's the weather in Paris?  "},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 21, "sky": "clear"}'},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Clear and 21 C in Paris.", "annotations": []}],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "looked it up"}]},
    # Past the 8 KB of turn metadata: its long text becomes the turn's text, and comes back in place.
    {"role": "user", "content": [{"type": "input_text", "text": "Here is my itinerary: " + "day by day. " * 900}]},
]


def test_agents_session_round_trip_pop_and_clear(agents_stack: Running) -> None:
    session = StrataSession("trip-1", _connection(agents_stack, "agents-rt"))
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol

    async def scenario() -> None:
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items(ITEMS[:3])
        await session.add_items(ITEMS[3:])
        assert await session.get_items() == ITEMS
        assert await session.get_items(limit=2) == ITEMS[-2:]
        assert await session.pop_item() == ITEMS[-1]
        assert await session.get_items() == ITEMS[:-1]
        await session.add_items([ITEMS[0]])
        assert await session.get_items() == [*ITEMS[:-1], ITEMS[0]]  # a re-recorded session still takes items
        found = await session.connection.async_client.search(
            "get_weather Paris", layers=["episodic"], session_id="trip-1"
        )
        assert any("[tool call] get_weather" in hit.text for hit in found.hits)
        await session.clear_session()
        assert await session.get_items() == []
        await session.clear_session()  # nothing left to forget: no error

    asyncio.run(scenario())
    # A new event loop (a second asyncio.run) works with the same session object.
    asyncio.run(session.add_items([ITEMS[0]]))
    assert asyncio.run(session.get_items()) == [ITEMS[0]]


def test_agents_session_settings_limit_and_turns_of_other_writers(agents_stack: Running) -> None:
    connection = _connection(agents_stack, "agents-limit")
    connection.client.record_turn("mixed", user="I prefer aisle seats", agent="Noted: aisle seats.")
    session = StrataSession("mixed", connection, session_settings=SessionSettings(limit=1))

    async def scenario() -> None:
        assert await session.get_items() == [{"role": "assistant", "content": "Noted: aisle seats."}]
        assert await session.get_items(limit=5) == [
            {"role": "user", "content": "I prefer aisle seats"},
            {"role": "assistant", "content": "Noted: aisle seats."},
        ]
        assert await session.pop_item() == {"role": "assistant", "content": "Noted: aisle seats."}
        assert await session.get_items(limit=5) == [{"role": "user", "content": "I prefer aisle seats"}]

    asyncio.run(scenario())


class _Echo(Model):
    """A model that answers with how many items it was given: no network."""

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        text = f"I see {len(input) if isinstance(input, list) else 1} items"
        message = ResponseOutputMessage(
            type="message",
            id="msg_1",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_agents_runner_keeps_its_history_in_strata_per_tenant(agents_stack: Running) -> None:
    set_tracing_disabled(True)
    agent = Agent(name="echo", model=_Echo())
    alpha = StrataSession("shared-name", _connection(agents_stack, "agents-alpha"))
    beta = StrataSession("shared-name", _connection(agents_stack, "agents-beta"))

    async def scenario() -> list[str]:
        answers = [
            str((await Runner.run(agent, prompt, session=alpha)).final_output) for prompt in ("one", "two", "three")
        ]
        answers.append(str((await Runner.run(agent, "alone", session=beta)).final_output))
        return answers

    assert asyncio.run(scenario()) == ["I see 1 items", "I see 3 items", "I see 5 items", "I see 1 items"]
    alpha_items, beta_items = asyncio.run(alpha.get_items()), asyncio.run(beta.get_items())
    assert [i.get("content") for i in alpha_items if i.get("role") == "user"] == ["one", "two", "three"]
    assert [i.get("content") for i in beta_items if i.get("role") == "user"] == ["alone"]  # never alpha's


def test_agents_session_refuses_what_no_turn_can_hold(agents_stack: Running) -> None:
    session = StrataSession("big", _connection(agents_stack, "agents-big"))
    huge: TResponseInputItem = {"role": "user", "content": "x" * 1_000_001}
    with pytest.raises(ValueError, match="1000000"):
        asyncio.run(session.add_items([ITEMS[0], huge]))
    assert asyncio.run(session.get_items()) == []  # nothing of the batch was recorded
    with pytest.raises(Exception, match="not a valid id"):
        StrataSession("has spaces", session.connection)


# -- LlamaIndex ---------------------------------------------------------------------------


def test_llamaindex_block_puts_strata_context_into_a_real_memory(agents_stack: Running) -> None:
    connection = _connection(agents_stack, "llama-ctx")
    other = _connection(agents_stack, "llama-other")
    other.client.record_turn("diet", user="I am allergic to shellfish", agent="Noted.")
    block = StrataMemoryBlock(connection=connection)
    memory = Memory.from_defaults(
        session_id="diet", token_limit=60, chat_history_token_ratio=0.5, token_flush_size=20, memory_blocks=[block]
    )
    assert all(m.role != "system" for m in memory.get(input="hello"))  # nothing in Strata yet: no block
    exchanges = [
        ("I am allergic to peanuts, remember that.", "Noted: no peanuts."),
        ("Book a table for Friday at 8 pm.", "Booked for Friday 8 pm."),
        ("And a taxi at 7:30 pm.", "Taxi booked for 7:30 pm."),
    ]
    for question, answer in exchanges:
        memory.put(ChatMessage(role="user", content=question))
        memory.put(ChatMessage(role="assistant", content=answer))
    turns = connection.client.list_turns("diet")
    assert turns.turns[0].user == exchanges[0][0] and turns.turns[0].agent == exchanges[0][1]  # flushed, paired
    assert turns.turns[0].metadata == {"source": "llama_index"}
    messages = memory.get(input="What can't I eat?")
    assert messages[0].role == "system" and "<strata>" in str(messages[0].content)
    assert "peanuts" in str(messages[0].content) and "shellfish" not in str(messages[0].content)  # tenant's own
    still_queued = [m.content for m in messages[1:]]
    assert exchanges[-1][1] in still_queued  # the latest exchange is in the Memory's queue, not flushed


def test_llamaindex_block_async_and_without_a_user_message(agents_stack: Running) -> None:
    connection = _connection(agents_stack, "llama-async")
    block = StrataMemoryBlock(connection=connection, session_id="direct", max_tokens=256)

    async def scenario() -> tuple[str, str]:
        await block.aput(
            [
                ChatMessage(role="assistant", content="Welcome back!"),
                ChatMessage(role="user", content="My locker code is 4417"),
                ChatMessage(role="tool", content="ignored"),
                ChatMessage(role="assistant", content="Saved it."),
            ]
        )
        empty = await block.aget([ChatMessage(role="assistant", content="hi")])
        return empty, await block.aget([ChatMessage(role="user", content="What is my locker code?")])

    empty, context = asyncio.run(scenario())
    assert empty == "" and "4417" in context
    turns = connection.client.list_turns("direct").turns
    assert [(t.user, t.agent) for t in turns] == [(None, "Welcome back!"), ("My locker code is 4417", "Saved it.")]


# -- traces of any shape ----------------------------------------------------------------


def test_a_trace_with_result_and_other_shapes_is_taken(agents_stack: Running) -> None:
    key = agents_stack.new_key("create", "traces")
    trace = [
        {"tool": "git_clone", "args": {"repo": "payments"}, "result": "cloned"},
        {"type": "function_call", "name": "run_tests", "arguments": '{"path": "tests"}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "Error: 2 failed"},
        [{"tool": "apply_patch", "tool_input": "fix.diff", "log": "Thought: patch it"}, "patched"],
        {"name": "run_tests", "arguments": {"path": "tests"}, "result": "12 passed", "duration_ms": 5300},
        {"level": "info", "message": "opened the pull request"},
    ]
    r = agents_stack.call("POST", "/v1/skills:extract", key, {"task": "Fix the failing payments tests", "trace": trace})
    assert r.status_code == 201, r.text
    skill = r.json()
    assert any("run_tests" in step for step in skill["steps"]), skill
    assert any("2 failed" in pitfall for pitfall in skill["common_pitfalls"]), skill


# -- the examples, as a user runs them ---------------------------------------------------


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("openai_agents_session.py", "agent: You said: Hi, I'm flying to Lisbon on Friday."),
        ("llamaindex_memory.py", "mentions the peanut allergy"),
    ],
)
def test_example_runs(agents_stack: Running, example: str, expected: str) -> None:
    out = agents_stack.run_example(example, f"example-{example.split('_')[0]}")
    assert expected in out, out
    if example.startswith("openai"):
        assert "session in Strata: 8 items" in out and "7 items left" in out
        assert "search 'weather': nothing" not in out


def test_one_turn_is_forgotten_in_every_layer_and_the_rest_stays(agents_stack: Running) -> None:
    """``DELETE /v1/sessions/{id}/turns/{turn_id}``, which ``pop_item`` uses: the turn leaves
    episodic and working memory; its neighbours stay; a second forget is a 404."""
    from strata.errors import NotFound

    client = _connection(agents_stack, "forget-turn").client
    secret = "Zebra-Tango-4410"
    recorded = client.record_turns(
        "ft",
        [{"user": "I fly to Oslo on Friday.", "agent": "Noted."},
         {"user": f"My locker code is {secret}.", "agent": f"Kept: {secret}."},
         {"user": "I prefer window seats.", "agent": "Window it is."}],
    )
    turn = recorded.turns[1].turn_id
    forgotten = client.forget_turn("ft", turn)
    assert forgotten.removed == {"episodic": 1, "working": 2}, forgotten
    assert [t.user for t in client.list_turns("ft").turns] == ["I fly to Oslo on Friday.", "I prefer window seats."]
    assert secret not in str(client.get_working("ft").model_dump())
    assert all(secret not in h.text for h in client.search(secret, layers=["episodic"]).hits)
    assert secret not in client.build_context(secret, session_id="ft").context
    with pytest.raises(NotFound):
        client.forget_turn("ft", turn)
    ops = [(e.op, e.layer, e.record_id) for e in client.audit(limit=1000).entries]
    assert ("forget_turn", "episodic", f"ft/{turn}") in ops and ("forget_turn", "working", f"ft/{turn}") in ops
