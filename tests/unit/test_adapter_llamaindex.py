"""The LlamaIndex block's mapping from flushed chat messages to Strata turns, without a stack."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage

from strata.limits import TURN_CHARS_MAX
from strata_adapters.llamaindex import turns_from_messages


def test_a_user_message_and_the_answers_after_it_are_one_turn() -> None:
    turns = turns_from_messages(
        [
            ChatMessage(role="assistant", content="Welcome!"),
            ChatMessage(role="user", content="Book Friday"),
            ChatMessage(role="assistant", content="Checking."),
            ChatMessage(role="tool", content="table free"),
            ChatMessage(role="system", content="be brief"),
            ChatMessage(role="assistant", content="Booked."),
            ChatMessage(role="user", content="Thanks"),
        ]
    )
    assert [(t.user, t.agent) for t in turns] == [
        (None, "Welcome!"),
        ("Book Friday", "Checking.\nBooked."),
        ("Thanks", None),
    ]
    assert all(t.metadata == {"source": "llama_index"} for t in turns)


def test_empty_and_over_long_messages() -> None:
    assert (
        turns_from_messages([ChatMessage(role="assistant", content="  "), ChatMessage(role="tool", content="x")]) == []
    )
    (turn,) = turns_from_messages([ChatMessage(role="user", content="z" * (TURN_CHARS_MAX + 10))])
    assert turn.user is not None and len(turn.user) == TURN_CHARS_MAX and turn.user.endswith("…")
