"""The Agents SDK session's mapping between items and Strata turns, without a stack."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from agents.memory import SessionSettings

from strata.schema import TurnIn
from strata.schema.outputs import SessionTurn, SessionTurns
from strata_adapters._common import StrataConnection
from strata_adapters.openai_agents import StrataSession, items_from_turn, turn_from_item
from strata_serve.client import AsyncStrataClient


def _stored(turn: TurnIn) -> SessionTurn:
    """The turn as ``GET /v1/sessions/{id}/turns`` reads it back."""
    return SessionTurn(
        turn_id="t1",
        timestamp=datetime.now(UTC),
        text="",
        user=turn.user,
        agent=turn.agent,
        speaker=turn.speaker,
        metadata=turn.metadata,
    )


@pytest.mark.parametrize(
    ("item", "side", "text"),
    [
        ({"role": "user", "content": "hi"}, "user", "hi"),
        ({"role": "developer", "content": "be brief"}, "user", "be brief"),
        ({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yes"}]}, "agent", "yes"),
        (
            {"type": "function_call", "name": "ls", "arguments": '{"path": "/"}', "call_id": "c"},
            "agent",
            '[tool call] ls({"path": "/"})',
        ),
        ({"type": "function_call_output", "call_id": "c", "output": "a.py"}, "agent", "[tool output] a.py"),
        ({"role": "assistant", "content": ""}, "agent", "[assistant]"),
    ],
)
def test_each_item_is_one_turn_that_gives_it_back(item: dict[str, Any], side: str, text: str) -> None:
    turn = turn_from_item(item)
    assert getattr(turn, side) == text and items_from_turn(_stored(turn)) == [item]
    assert turn.speaker == (item["role"] if item.get("role") == "developer" else None)


def test_an_item_past_the_metadata_limit_moves_its_longest_text() -> None:
    item = {"role": "user", "content": [{"type": "input_text", "text": " padded " * 1500}], "id": "m1"}
    turn = turn_from_item(item)
    assert turn.user == " padded " * 1500 and turn.metadata["agents_sdk"]["text_at"] == ["content", 0, "text"]
    assert items_from_turn(_stored(turn)) == [item]


def test_what_no_turn_can_hold_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="1000000"):
        turn_from_item({"role": "user", "content": "x" * 1_000_001})
    with pytest.raises(ValueError, match="8 KB"):
        turn_from_item({"type": "custom", "parts": ["y" * 3000] * 5})
    with pytest.raises(ValueError, match="lone surrogate"):
        turn_from_item({"role": "user", "content": "\ud800"})
    with pytest.raises(ValueError, match="dict"):
        turn_from_item("hello")  # type: ignore[arg-type]


def test_turns_of_other_writers_read_as_messages() -> None:
    turn = SessionTurn(turn_id="t", timestamp=datetime.now(UTC), text="", user="hello", agent="hi there")
    assert items_from_turn(turn) == [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


class _Canned(StrataConnection):
    """A connection whose async client is answered in this process, the session's turns newest first."""

    def __init__(self, turns: list[SessionTurn]) -> None:
        super().__init__("http://strata", "sk-test")

        def answer(request: httpx.Request) -> httpx.Response:
            limit = int(request.url.params["limit"])
            page = SessionTurns(session_id="s1", turns=turns[::-1][:limit], total=len(turns))
            return httpx.Response(200, content=page.model_dump_json())

        self._canned = AsyncStrataClient(self.url, "sk-test", transport=httpx.MockTransport(answer))

    @property
    def async_client(self) -> AsyncStrataClient:
        return self._canned


@pytest.mark.parametrize("settings", [{"limit": 2}, SessionSettings(limit=2)], ids=["dict", "class"])
async def test_session_settings_may_be_a_dict_as_the_sdks_sessions_take_them(settings: Any) -> None:
    """The SDK's tests/test_session.py::test_session_settings_constructor_normalizes_dictionary
    for this session: a dict raised AttributeError in ``get_items`` (issue 45)."""
    said = [SessionTurn(turn_id=f"t{i}", timestamp=datetime.now(UTC), text="", user=f"m{i}") for i in range(4)]
    session = StrataSession("s1", _Canned(said), session_settings=settings)
    assert isinstance(session.session_settings, SessionSettings) and session.session_settings.limit == 2
    assert session.session_settings.resolve({"limit": 4}).limit == 4  # what the SDK's Runner calls
    assert await session.get_items() == [{"role": "user", "content": "m2"}, {"role": "user", "content": "m3"}]
    with pytest.raises(TypeError, match="limitt"):
        StrataSession("s1", _Canned(said), session_settings={"limitt": 2})
