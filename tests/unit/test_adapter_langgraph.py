"""The LangGraph store's pure parts: item ids, filters, the flow drivers (no stack)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from strata.errors import NotFound
from strata.ids import ID_PATTERN
from strata_adapters._common import Flow, call, run_async, run_sync
from strata_adapters.langgraph import item_doc_id, matches_filter


def test_item_ids_are_valid_strata_ids_and_tell_paths_apart() -> None:
    paths = [
        (("a", "b"), "c"),
        (("a",), "b/c"),
        (("a/b",), "c"),
        (("a", "b", "c"), ""),
        (("ü 🙂", "\"'"), "key with spaces ?&#"),
        (tuple("x" * 200 for _ in range(20)), "y" * 5000),
    ]
    ids = [item_doc_id(ns, key) for ns, key in paths]
    assert all(ID_PATTERN.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert item_doc_id(("a", "b"), "c") == item_doc_id(("a", "b"), "c")


@pytest.mark.parametrize(
    ("value", "condition", "expected"),
    [
        ({"kind": "food"}, {"kind": "food"}, True),
        ({"kind": "food"}, {"kind": "travel"}, False),
        ({"n": 3}, {"n": {"$gt": 2, "$lte": 3}}, True),
        ({"n": 3}, {"n": {"$gte": 4}}, False),
        ({"n": "abc"}, {"n": {"$gt": 1}}, False),  # not a number: no match, no crash
        ({}, {"n": {"$lt": 1}}, False),  # missing: no match
        ({"n": 1}, {"n": {"$ne": 2}}, True),
        ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 2]}}, True),
        ({"a": {"b": [1, 2]}}, {"a": {"b": [1]}}, False),
        ({"a": "x"}, {"a": {"b": 1}}, False),
    ],
)
def test_filters_follow_langgraphs_semantics(value: dict[str, Any], condition: dict[str, Any], expected: bool) -> None:
    assert matches_filter(value, condition) is expected


def test_an_unknown_filter_operator_says_which_exist() -> None:
    with pytest.raises(ValueError, match=r"\$regex.*\$eq, \$ne, \$gt"):
        matches_filter({"a": "x"}, {"a": {"$regex": "x"}})


class _Client:
    """Answers ``get_document`` from a dict: enough to drive a flow without a network."""

    def __init__(self, docs: dict[str, str]) -> None:
        self.docs, self.calls = docs, 0

    def get_document(self, doc_id: str) -> str:
        self.calls += 1
        if doc_id not in self.docs:
            raise NotFound(f"no document {doc_id}")
        return self.docs[doc_id]


class _AsyncClient(_Client):
    async def get_document(self, doc_id: str) -> str:  # type: ignore[override]
        return super().get_document(doc_id)


def _flow() -> Flow[list[str]]:
    found = []
    for doc_id in ("a", "missing", "b"):
        try:
            found.append((yield call("get_document", doc_id)))
        except NotFound:
            found.append("-")
    return found


def test_both_drivers_answer_a_flow_and_throw_strata_errors_into_it() -> None:
    client = _Client({"a": "A", "b": "B"})
    assert run_sync(client, _flow()) == ["A", "-", "B"]  # type: ignore[arg-type]
    assert asyncio.run(run_async(_AsyncClient({"a": "A", "b": "B"}), _flow())) == ["A", "-", "B"]  # type: ignore[arg-type]
    assert client.calls == 3
