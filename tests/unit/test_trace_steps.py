"""Skill trace steps of any shape: OpenAI tool calls, LangChain intermediate steps, logs, and
fields nobody planned for, which are kept as the step's bounded metadata instead of refusing
the trace."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from strata.procedural.extractors import RuleSkillExtractor
from strata.schema import InteractionIn, SkillExtractIn, TraceStepIn
from strata.schema.inputs import STEP_METADATA_BYTES_MAX, STEP_METADATA_KEYS_MAX


def _steps(*trace: Any) -> list[Any]:
    body = SkillExtractIn(task="check the weather", trace=list(trace))
    return [s.model_dump(exclude_defaults=True) if isinstance(s, TraceStepIn) else s for s in body.trace]


def test_a_step_with_result_is_taken_not_refused() -> None:
    # Before: "Extra inputs are not permitted" for result, and the whole trace was refused.
    assert _steps({"tool": "pytest", "result": "3 passed"}) == [{"tool": "pytest", "output": "3 passed"}]


def test_openai_responses_function_call_and_its_output() -> None:
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    }
    output = {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 21}'}
    assert _steps(call, output) == [
        {
            "tool": "get_weather",
            "args": {"city": "Paris"},
            "status": "ok",
            "metadata": {"type": "function_call", "id": "fc_1", "call_id": "call_1"},
        },
        {"output": '{"temp_c": 21}', "metadata": {"type": "function_call_output", "call_id": "call_1"}},
    ]


def test_openai_chat_completions_tool_call_nested_in_function() -> None:
    step = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "ls", "arguments": "not json"},
        "output": {"files": ["a.py"]},
    }
    assert _steps(step) == [
        {
            "tool": "ls",
            "args": {"input": "not json"},
            "output": '{"files": ["a.py"]}',
            "metadata": {"id": "call_9", "type": "function"},
        }
    ]


def test_langchain_intermediate_steps_in_their_three_spellings() -> None:
    action = {"tool": "search", "tool_input": "weather in Paris", "log": "Thought: look it up", "type": "AgentAction"}
    expected = {
        "tool": "search",
        "args": {"input": "weather in Paris"},
        "output": "sunny, 21 C",
        "metadata": {"type": "AgentAction", "log": "Thought: look it up"},
    }
    pair = [action, "sunny, 21 C"]  # (AgentAction, observation), as JSON
    nested = {"action": action, "observation": "sunny, 21 C"}
    serialized = {"lc": 1, "type": "constructor", "kwargs": {**action, "tool_input": {"q": "Paris"}}}
    assert _steps(pair, nested) == [expected, expected]
    lc = _steps(serialized)[0]
    assert lc["tool"] == "search" and lc["args"] == {"q": "Paris"} and lc["metadata"]["lc"] == 1


def test_plain_logs_strings_and_records() -> None:
    assert _steps(
        "ran the migration",
        {"level": "info", "message": "connected to db01"},
        {"level": "ERROR", "msg": "timeout after 30 s", "ts": "2025-01-01T00:00:00Z"},
    ) == [
        "ran the migration",
        {"action": "connected to db01", "metadata": {"level": "info"}},
        {
            "error": "timeout after 30 s",
            "status": "error",
            "metadata": {"level": "ERROR", "ts": "2025-01-01T00:00:00Z"},
        },
    ]


def test_status_words_map_and_unknown_ones_are_kept() -> None:
    ok, failed, running = _steps(
        {"tool": "a", "status": "Succeeded"}, {"tool": "b", "status": "failed"}, {"tool": "c", "status": "in_progress"}
    )
    assert ok["status"] == "ok" and failed["status"] == "error"
    assert "status" not in running and running["metadata"] == {"status": "in_progress"}


def test_a_long_observation_is_cut_not_refused() -> None:
    (step,) = _steps({"tool": "fetch", "observation": "x" * 50_000})
    assert len(step["output"]) == 4000 and step["output"].endswith("…")


def test_unknown_fields_are_metadata_within_their_bounds() -> None:
    hostile: dict[str, object] = {f"field{i}": i for i in range(10_000)}
    hostile.update({"blob": "y" * 20_000, "huge": 2**80, "nan": float("nan"), "k" * 500: 1})
    deep: Any = "bottom"
    for _ in range(200):
        deep = {"d": deep}
    (step,) = _steps({"command": "make", "deep": deep, **hostile})
    metadata = step["metadata"]
    assert len(json.dumps(metadata).encode()) <= STEP_METADATA_BYTES_MAX
    assert len(metadata) <= STEP_METADATA_KEYS_MAX + 1  # and _dropped
    assert metadata["_dropped"][-1] == f"+{10_004 + 1 - (len(metadata) - 1) - 3} more"
    assert "deep" in metadata and len(json.dumps(metadata["deep"])) < 1000  # cut below 6 levels
    (step,) = _steps({"tool": "t", "huge": 2**80, "nan": float("nan")})
    assert step["metadata"] == {"huge": str(2**80), "nan": "nan"}  # kept as text, not refused


def test_the_callers_own_metadata_wins_over_a_field_of_the_same_name() -> None:
    (step,) = _steps({"tool": "t", "run": 1, "metadata": {"run": 2, "owner": "ops"}})
    assert step["metadata"] == {"run": 2, "owner": "ops"}


def test_what_is_still_refused_says_what_to_fix() -> None:
    with pytest.raises(ValidationError, match="60000 bytes"):
        SkillExtractIn.model_validate(
            {"task": "t", "trace": [{"tool": "t", "output": "o" * 3900, "x": "y" * 3000}] * 20}
        )
    with pytest.raises(ValidationError, match="trace"):
        SkillExtractIn.model_validate({"task": "t", "trace": [42]})
    with pytest.raises(ValidationError, match="lone surrogate"):
        SkillExtractIn.model_validate({"task": "t", "trace": [{"tool": "t", "note": "\ud800"}]})


def test_interactions_take_the_same_shapes() -> None:
    body = InteractionIn.model_validate(
        {"session_id": "s1", "user": "weather?", "trace": [{"name": "get_weather", "result": "sunny"}]}
    )
    assert body.trace is not None and isinstance(body.trace[0], TraceStepIn)
    assert (body.trace[0].tool, body.trace[0].output) == ("get_weather", "sunny")


def test_the_rule_extractor_learns_from_an_agents_sdk_trace() -> None:
    trace = _steps(
        {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}', "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        [{"tool": "send_email", "tool_input": {"to": "team"}, "log": "Thought: tell them"}, "Error: SMTP down"],
        {"name": "send_email", "arguments": {"to": "team", "retry": True}, "result": "sent"},
    )
    draft = RuleSkillExtractor().extract("Tell the team the weather in Paris", trace)
    assert draft.steps[0].startswith("Call `get_weather` with city=")
    assert any("send_email" in s for s in draft.steps[1:])
    assert any("SMTP down" in p for p in draft.common_pitfalls)
