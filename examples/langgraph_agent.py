"""A LangGraph agent whose long-term memory is Strata; scripted, so it needs no LLM key.

    strata up                      # prints the dev key
    STRATA_API_KEY=sk-strata-... python examples/langgraph_agent.py

``STRATA_URL`` defaults to http://127.0.0.1:8000. The graph is LangGraph's own: a node stores
what the user asks it to remember, another answers a question from the memories a search
finds. Strata comes in on one line, where the graph is compiled.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from strata_adapters.langgraph import StrataStore


class State(TypedDict, total=False):
    message: str
    reply: str


@dataclass
class Context:
    user_id: str


def remember(state: State, runtime: Runtime[Context]) -> State:
    """'remember <fact>': keep the fact under the user's namespace (the scripted LLM's tool call)."""
    if runtime.store is None:
        raise RuntimeError("the graph runs without a store: compile it with store=StrataStore(...)")
    fact = state["message"].removeprefix("remember ").strip()
    key = re.sub(r"[^a-z0-9]+", "-", fact.lower()).strip("-")[:60]
    runtime.store.put(("memories", runtime.context.user_id), key, {"fact": fact})
    return {"reply": f"noted: {fact}"}


def recall(state: State, runtime: Runtime[Context]) -> State:
    """Any other message: answer with the memory that matches it best."""
    if runtime.store is None:
        raise RuntimeError("the graph runs without a store: compile it with store=StrataStore(...)")
    hits = runtime.store.search(("memories", runtime.context.user_id), query=state["message"], limit=1)
    return {"reply": f"from memory: {hits[0].value['fact']}" if hits else "I don't know that yet"}


def route(state: State) -> str:
    return "remember" if state["message"].startswith("remember ") else "recall"


def build(store: StrataStore) -> object:
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_conditional_edges(START, route, ["remember", "recall"])
    builder.add_edge("remember", END)
    builder.add_edge("recall", END)
    return builder.compile(store=store)


SCRIPT = [
    "remember I am allergic to peanuts",
    "remember my daughter is called Ada",
    "remember I prefer window seats on flights",
    "what am I allergic to?",
    "which seat do I prefer on flights?",
    "what is my daughter called?",
]


def main(user_id: str = "user-1") -> None:
    with StrataStore.from_env() as store:  # was: store = InMemoryStore()
        graph = build(store)
        for message in SCRIPT:
            out = graph.invoke({"message": message}, context=Context(user_id=user_id))  # type: ignore[attr-defined]
            print(f"user:  {message}\nagent: {out['reply']}")
        print("namespaces:", store.list_namespaces(prefix=("memories",)))


if __name__ == "__main__":
    main(*sys.argv[1:2])
