"""An OpenAI Agents SDK agent whose session is a Strata session; a scripted model, so it needs
no LLM key and makes no OpenAI call.

    strata up                      # prints the dev key
    STRATA_API_KEY=sk-strata-... python examples/openai_agents_session.py

``STRATA_URL`` defaults to http://127.0.0.1:8000. The loop is the SDK's own ``Runner`` with a
tool; Strata comes in on one line, the session. Every item of the run (the question, the tool
call, its output, the answer) becomes a turn, which the next run reads back and Strata's
search finds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from strata_adapters.openai_agents import StrataSession

QUESTIONS = ["Hi, I'm flying to Lisbon on Friday.", "What's the weather there?", "Where am I flying?"]


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 24 C"


class ScriptedModel(Model):
    """Answers from the conversation it is given, as an LLM would, without one."""

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items: list[dict[str, Any]] = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        print(f"       (the model sees {len(items)} items)")
        last = items[-1]
        if last.get("type") == "function_call_output":
            return _reply(f"It's {last['output']}.")
        question = str(last.get("content", ""))
        if "weather" in question:
            said = " ".join(str(i.get("content", "")) for i in items if i.get("role") == "user")
            city = "Lisbon" if "Lisbon" in said else "Paris"
            call = ResponseFunctionToolCall(
                type="function_call",
                id="fc_1",
                call_id=f"call_{len(items)}",
                name="get_weather",
                arguments=json.dumps({"city": city}),
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        if "Where am I" in question:
            said = [str(i["content"]) for i in items if i.get("role") == "user" and "flying to" in str(i["content"])]
            return _reply(f"You said: {said[0]}" if said else "You haven't told me.")
        return _reply("Noted, have a good trip!")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the example does not stream")


def _reply(text: str) -> ModelResponse:
    message = ResponseOutputMessage(
        type="message",
        id="msg_1",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )
    return ModelResponse(output=[message], usage=Usage(), response_id=None)


async def main(session_id: str = "agents-demo") -> None:
    set_tracing_disabled(True)  # the SDK would send traces to OpenAI
    agent = Agent(name="travel", instructions="Help with trips.", tools=[get_weather], model=ScriptedModel())
    async with StrataSession(session_id) as session:  # was: SQLiteSession(session_id)
        await session.clear_session()  # start the demo afresh
        for question in QUESTIONS:
            result = await Runner.run(agent, question, session=session)
            print(f"user:  {question}\nagent: {result.final_output}")
        items = await session.get_items()
        print(f"session in Strata: {len(items)} items: {', '.join(i.get('type', i.get('role', '?')) for i in items)}")
        undone = await session.pop_item()
        print(f"pop_item: {undone.get('role') if undone else None}, {len(await session.get_items())} items left")
        client = session.connection.async_client
        found = await client.search("weather", layers=["episodic"], session_id=session_id, top_k=1)
        print("search 'weather':", found.hits[0].text.replace("\n", " | ") if found.hits else "nothing")


if __name__ == "__main__":
    asyncio.run(main())
