"""A LlamaIndex ``Memory`` with Strata as its long-term memory block; a scripted agent loop, so it
needs no LLM key.

    strata up                      # prints the dev key
    STRATA_API_KEY=sk-strata-... python examples/llamaindex_memory.py

``STRATA_URL`` defaults to http://127.0.0.1:8000. The ``Memory`` is LlamaIndex's own, with a
small token limit so that older messages are flushed from its queue early: the Strata block
records them as turns, and puts Strata's context for each new question into the system message
the LLM would see.
"""

from __future__ import annotations

import contextlib

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory

from strata.errors import NotFound
from strata_adapters.llamaindex import StrataMemoryBlock

SCRIPT = [
    ("My name is Ada and I'm allergic to peanuts.", "Thanks Ada, I'll remember the peanut allergy."),
    ("Book a table for two on Friday at 8 pm.", "Booked: Friday 8 pm, two people, at Casa Lusa."),
    ("Suggest a dessert for me.", "The fruit tart: no nuts in it."),
]


def main(session_id: str = "llamaindex-demo") -> None:
    with StrataMemoryBlock() as block:  # leaving closes its clients, the Memory's loop's too
        memory = Memory.from_defaults(
            session_id=session_id,
            token_limit=120,  # tiny, so the first exchanges are flushed to Strata during the demo
            chat_history_token_ratio=0.5,
            token_flush_size=40,
            memory_blocks=[block],  # was: memory_blocks=[] (or FactExtractionMemoryBlock(...))
        )
        with contextlib.suppress(NotFound):  # nothing to forget on a first run
            block.connection.client.forget_session(session_id)  # start the demo afresh
        for question, answer in SCRIPT:
            memory.put(ChatMessage(role="user", content=question))
            seen = memory.get()
            system = next((m.content for m in seen if m.role == "system"), None)
            print(f"user:  {question}")
            shown = [line for line in (system or "(no memory yet)").splitlines() if line.strip()][:12]
            print("       the LLM would see:\n" + "\n".join(f"       | {line}" for line in shown))
            print(f"agent: {answer}")
            memory.put(ChatMessage(role="assistant", content=answer))
        turns = block.connection.client.list_turns(session_id)
        print(f"turns in Strata: {turns.total}: " + " / ".join((t.user or "")[:30] for t in turns.turns))
        context = block.connection.client.build_context("what am I allergic to?", session_id).context
        print("context for 'what am I allergic to?':", "peanut" in context and "mentions the peanut allergy")


if __name__ == "__main__":
    main()
