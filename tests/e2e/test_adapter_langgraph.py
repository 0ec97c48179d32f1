"""LangGraph's store interface over a real stack: a real compiled graph with ``store=StrataStore``,
sync and async, tenants apart, TTL, values too big for metadata, and the example as a user runs it."""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import InvalidNamespaceError

from strata_adapters.langgraph import StrataConnection, StrataStore, item_doc_id
from tests.e2e.running import Running


def _store(stack: Running, tenant: str) -> StrataStore:
    return StrataStore(StrataConnection(stack.url, stack.new_key("create", tenant)))


class _State(TypedDict, total=False):
    fact: str
    question: str
    answer: str


def _graph(store: StrataStore) -> Any:
    """A graph that writes a memory in one node and searches for it in the next."""

    def write(state: _State, runtime: Runtime[None]) -> _State:
        assert runtime.store is not None
        runtime.store.put(("memories", "u1"), state["fact"].split()[-1], {"text": state["fact"]})
        return {}

    def read(state: _State, runtime: Runtime[None]) -> _State:
        assert runtime.store is not None
        hits = runtime.store.search(("memories", "u1"), query=state["question"], limit=1)
        return {"answer": hits[0].value["text"] if hits else ""}

    async def aread(state: _State, runtime: Runtime[None]) -> _State:
        assert runtime.store is not None
        hits = await runtime.store.asearch(("memories", "u1"), query=state["question"], limit=1)
        return {"answer": hits[0].value["text"] if hits else ""}

    async def awrite(state: _State, runtime: Runtime[None]) -> _State:
        assert runtime.store is not None
        await runtime.store.aput(("memories", "u1"), state["fact"].split()[-1], {"text": state["fact"]})
        return {}

    builder = StateGraph(_State)
    builder.add_node("write", write)
    builder.add_node("read", read)
    builder.add_edge(START, "write")
    builder.add_edge("write", "read")
    builder.add_edge("read", END)
    sync_graph = builder.compile(store=store)
    abuilder = StateGraph(_State)
    abuilder.add_node("write", awrite)
    abuilder.add_node("read", aread)
    abuilder.add_edge(START, "write")
    abuilder.add_edge("write", "read")
    abuilder.add_edge("read", END)
    return sync_graph, abuilder.compile(store=store)


def test_a_compiled_graph_puts_and_finds_memories_in_strata(agents_stack: Running) -> None:
    store = _store(agents_stack, "lg-graph")
    graph, _ = _graph(store)
    graph.invoke({"fact": "The user is allergic to peanuts", "question": "x"})
    out = graph.invoke({"fact": "The user prefers window seats on long flights", "question": "what allergy?"})
    assert out["answer"] == "The user is allergic to peanuts"
    out = graph.invoke({"fact": "Ada is the name of the user's daughter", "question": "seat preference on flights"})
    assert out["answer"] == "The user prefers window seats on long flights"
    # The items are Strata documents: the REST API sees them.
    doc = store.connection.client.get_document(item_doc_id(("memories", "u1"), "peanuts"), include_text=True)
    assert doc.title == "memories/u1/peanuts" and doc.text == '{"text": "The user is allergic to peanuts"}'


def test_get_search_filter_list_and_delete(agents_stack: Running) -> None:
    store = _store(agents_stack, "lg-ops")
    store.put(("prefs", "u1"), "a", {"kind": "food", "score": 3, "text": "likes ramen"})
    store.put(("prefs", "u1"), "b", {"kind": "travel", "score": 7, "text": "window seat"})
    store.put(("prefs", "u2"), "c", {"kind": "food", "score": 9, "text": "vegetarian"})
    store.put(("notes", "u1", "2024"), "d", {"text": "a note"})
    first = store.get(("prefs", "u1"), "a")
    assert first is not None and first.value == {"kind": "food", "score": 3, "text": "likes ramen"}
    assert first.namespace == ("prefs", "u1") and first.key == "a"
    store.put(("prefs", "u1"), "a", {"kind": "food", "score": 4, "text": "likes ramen a lot"})
    again = store.get(("prefs", "u1"), "a")
    assert again is not None and again.value["score"] == 4
    assert again.created_at == first.created_at and again.updated_at > first.updated_at
    assert store.get(("prefs", "u1"), "nope") is None
    assert store.get(("prefs",), "a") is None  # another namespace, same key

    assert {i.key for i in store.search(("prefs",))} == {"a", "b", "c"}
    # Newest first: a was put again last.
    assert [i.key for i in store.search(("prefs",), filter={"kind": "food"})] == ["a", "c"]
    assert [i.key for i in store.search(("prefs",), filter={"score": {"$gt": 3, "$lte": 7}})] == ["a", "b"]
    assert [i.key for i in store.search(("prefs", "u1"), filter={"kind": {"$ne": "food"}})] == ["b"]
    assert len(store.search((), limit=2)) == 2 and len(store.search((), offset=3)) == 1
    hit = store.search(("prefs",), query="vegetarian food", limit=1)
    assert [(i.key, i.namespace) for i in hit] == [("c", ("prefs", "u2"))] and hit[0].score is not None
    assert [i.key for i in store.search(("prefs",), query="vegetarian food", filter={"kind": "travel"})] == ["b"]
    with pytest.raises(ValueError, match=r"\$in"):
        store.search(("prefs",), filter={"score": {"$in": [1]}})

    assert store.list_namespaces() == [("notes", "u1", "2024"), ("prefs", "u1"), ("prefs", "u2")]
    assert store.list_namespaces(prefix=("prefs",)) == [("prefs", "u1"), ("prefs", "u2")]
    assert store.list_namespaces(suffix=("u1",)) == [("prefs", "u1")]
    assert store.list_namespaces(prefix=("*", "u1")) == [("notes", "u1", "2024"), ("prefs", "u1")]
    assert store.list_namespaces(max_depth=1) == [("notes",), ("prefs",)]

    store.delete(("prefs", "u1"), "a")
    store.delete(("prefs", "u1"), "a")  # already gone: not an error
    assert store.get(("prefs", "u1"), "a") is None
    assert {i.key for i in store.search(("prefs",), query="ramen")} <= {"b", "c"}
    with pytest.raises(InvalidNamespaceError):
        store.put(("bad.label",), "k", {"x": 1})


def test_keys_and_values_outside_what_metadata_holds(agents_stack: Running) -> None:
    """Labels and keys of any text map to valid ids; a value over 8 KB or with a 70-bit integer
    is read back from the document's text."""
    store = _store(agents_stack, "lg-values")
    namespace, key = ("üser 1/ü", "x\"y'z", "🙂"), "key with spaces / and ?&#"
    big = {"text": "lorem ipsum " * 725, "n": 2**70, "nested": {"list": [1, 2.5, None, True]}}
    store.put(namespace, key, big)
    got = store.get(namespace, key)
    assert got is not None and got.value == big
    [found] = store.search(namespace[:1])
    assert found.value == big and found.key == key
    assert store.list_namespaces() == [namespace]


def test_a_key_of_another_tenant_sees_nothing(agents_stack: Running) -> None:
    mine, theirs = _store(agents_stack, "lg-tenant-a"), _store(agents_stack, "lg-tenant-b")
    mine.put(("memories", "shared-user"), "secret", {"text": "the launch code is 0000"})
    assert theirs.get(("memories", "shared-user"), "secret") is None
    assert theirs.search(("memories",)) == [] and theirs.search((), query="launch code") == []
    assert theirs.list_namespaces() == []
    theirs.delete(("memories", "shared-user"), "secret")  # their delete is of their own (absent) item
    assert mine.get(("memories", "shared-user"), "secret") is not None


def test_async_graph_and_operations_across_event_loops(agents_stack: Running) -> None:
    store = _store(agents_stack, "lg-async")
    _, agraph = _graph(store)

    async def first() -> None:
        await agraph.ainvoke({"fact": "The user lives in Lisbon", "question": "x"})
        out = await agraph.ainvoke({"fact": "The user plays the cello", "question": "which city?"})
        assert out["answer"] == "The user lives in Lisbon"

    async def second() -> None:  # a new event loop: the store makes it an async client of its own
        await store.aput(("a",), "k", {"v": 1})
        item = await store.aget(("a",), "k")
        assert item is not None and item.value == {"v": 1}
        assert [i.key for i in await store.asearch(("a",))] == ["k"]
        assert await store.alist_namespaces() == [("a",), ("memories", "u1")]
        await store.adelete(("a",), "k")
        assert await store.aget(("a",), "k") is None

    asyncio.run(first())
    asyncio.run(second())


def test_ttl_becomes_the_documents_and_expired_items_are_gone(agents_stack: Running) -> None:
    store = StrataStore(StrataConnection(agents_stack.url, agents_stack.new_key("create", "lg-ttl")))
    store.put(("t",), "hour", {"v": 1}, ttl=60)
    doc = store.connection.client.get_document(item_doc_id(("t",), "hour"))
    assert doc.expires_at is not None and doc.updated_at is not None
    assert 3590 <= (doc.expires_at - doc.updated_at).total_seconds() <= 3610
    store.put(("t",), "blink", {"v": 2}, ttl=0.02)  # 1.2 s
    deadline = time.monotonic() + 60
    while store.get(("t",), "blink") is not None:
        assert time.monotonic() < deadline, "an item past its TTL is still returned"
        time.sleep(0.5)
    assert [i.key for i in store.search(("t",))] == ["hour"]
    with_default = StrataStore(store.connection, ttl={"default_ttl": 30})
    with_default.put(("t",), "half-hour", {"v": 3})
    doc = store.connection.client.get_document(item_doc_id(("t",), "half-hour"))
    assert doc.expires_at is not None and doc.updated_at is not None
    assert 1790 <= (doc.expires_at - doc.updated_at).total_seconds() <= 1810


def test_the_example_runs_against_the_stack(agents_stack: Running) -> None:
    out = agents_stack.run_example("langgraph_agent.py", "lg-ex")
    assert "agent: from memory: I am allergic to peanuts" in out
    assert "agent: from memory: I prefer window seats on flights" in out
    assert "agent: from memory: my daughter is called Ada" in out
    assert "namespaces: [('memories', 'user-1')]" in out
