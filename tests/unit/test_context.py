"""Tests for assemble_context: budget, selection by score, rendering order."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta, timezone

import pytest

from strata.context import LAYER_TITLES, AssembledContext, assemble_context
from strata.schema import ContextItem
from strata.tokens import TiktokenCounter

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)

EN_WORDS = (
    "the budget meeting moved to Thursday because the finance team needs more time to review "
    "quarterly numbers and Caroline wants a summary of the hiking trip plans before Friday"
).split()
ZH_CHARS = "我们明天下午三点在会议室讨论新项目的预算请记住她喜欢喝咖啡周末去爬山天气很好"


@pytest.fixture(scope="module")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


def _marker(n: int, zh: bool) -> str:
    # Unique, never a substring of another marker.
    return f"〔{n:03d}〕" if zh else f"<{n:03d}>"


def _text(rng: random.Random, n: int, zh: bool) -> str:
    if zh:
        body = "".join(rng.choice(ZH_CHARS) for _ in range(rng.randint(3, 40)))
    else:
        body = " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(2, 30)))
    # Internal newlines and runs of spaces are collapsed by the renderer.
    if rng.random() < 0.2:
        body = body.replace(" ", "\n  ", 1) if not zh else body[:2] + "\n" + body[2:]
    return f"{_marker(n, zh)} {body}"


def _items(rng: random.Random, count: int, zh: bool, start: int = 0) -> dict[str, list[ContextItem]]:
    layers: dict[str, list[ContextItem]] = {"episodic": [], "semantic": [], "procedural": []}
    for n in range(start, start + count):
        layer = rng.choice(list(layers))
        layers[layer].append(
            ContextItem(
                layer=layer,
                kind=rng.choice(["turn", "summary", "fact"]),
                id=f"i{n}",
                text=_text(rng, n, zh),
                score=round(rng.uniform(-1, 1), 3),
                timestamp=None if rng.random() < 0.15 else T0 + timedelta(minutes=rng.randint(0, 10_000)),
            )
        )
    return layers


def _messages(rng: random.Random, count: int, zh: bool, start: int = 500) -> list[dict[str, str]]:
    return [
        {"role": rng.choice(["user", "assistant"]), "content": _text(rng, start + n, zh).replace("\n", " ")}
        for n in range(count)
    ]


def _norm(text: str) -> str:
    return " ".join(text.split())


def _check_consistent(
    result: AssembledContext,
    layer_items: dict[str, list[ContextItem]],
    messages: list[dict[str, str]],
    max_tokens: int,
    counter: TiktokenCounter,
    zh: bool,
) -> None:
    assert result.tokens == counter.count(result.text)
    assert result.tokens <= max_tokens
    # Working messages kept are the newest ones, in order.
    kept = result.messages
    assert kept == messages[len(messages) - len(kept) :]
    # Sections say exactly what the text contains.
    sections = {s.layer: s for s in result.sections}
    assert list(sections)[-1] == "working"
    assert [i.text for i in sections["working"].items] == [m["content"] for m in kept]
    for layer, items in layer_items.items():
        chosen_ids = {i.id for i in sections[layer].items}
        assert chosen_ids <= {i.id for i in items}
        for item in items:
            marker = _marker(int(item.id[1:]), zh)
            if item.id in chosen_ids:
                assert _norm(item.text) in result.text
            else:
                assert marker not in result.text
        if chosen_ids:
            assert f"## {LAYER_TITLES[layer]}" in result.text
            assert sections[layer].tokens > 0
        else:
            assert LAYER_TITLES[layer] not in result.text
    for n, m in enumerate(messages):
        marker = _marker(500 + n, zh)
        assert (marker in result.text) == (m in kept)


@pytest.mark.parametrize("zh", [False, True], ids=["en", "zh"])
def test_never_exceeds_budget(counter: TiktokenCounter, zh: bool) -> None:
    rng = random.Random(1234 + zh)
    checked = 0
    for _ in range(120):
        layer_items = _items(rng, rng.randint(0, 14), zh)
        messages = _messages(rng, rng.randint(0, 6), zh)
        max_tokens = rng.choice([0, 1, 5, 20, 40, 64, 100, 150, 250, 400, 800, 3000])
        result = assemble_context(
            working_messages=messages, layer_items=layer_items, max_tokens=max_tokens, counter=counter
        )
        _check_consistent(result, layer_items, messages, max_tokens, counter, zh)
        checked += bool(result.text)
    assert checked > 50  # most cases rendered something: the checks were not vacuous


def test_everything_fits_in_a_large_budget(counter: TiktokenCounter) -> None:
    rng = random.Random(7)
    layer_items = _items(rng, 10, False)
    messages = _messages(rng, 4, False)
    result = assemble_context(working_messages=messages, layer_items=layer_items, max_tokens=100_000, counter=counter)
    assert result.messages == messages
    for layer, items in layer_items.items():
        section = next(s for s in result.sections if s.layer == layer)
        assert {i.id for i in section.items} == {i.id for i in items}


def test_empty_input(counter: TiktokenCounter) -> None:
    result = assemble_context(working_messages=[], layer_items={}, max_tokens=100, counter=counter)
    assert result.text == "" and result.tokens == 0
    assert [s.layer for s in result.sections] == ["working"]


def _equal_cost_items(counter: TiktokenCounter, n: int, layer: str = "episodic") -> list[ContextItem]:
    words = ["apple", "river", "stone", "cloud", "piano", "tiger", "lemon", "candle", "forest", "rocket",
             "pepper", "window", "garden", "silver", "bridge", "island", "planet", "butter", "castle", "dragon"]
    items = [
        ContextItem(layer=layer, kind="turn", id=f"{layer}-{w}", text=f"the {w} fact", score=0.0, timestamp=T0)
        for w in words[:n]
    ]
    from strata.context import _item_line

    costs = {counter.count(_item_line(i)) for i in items}
    assert len(costs) == 1, "test setup: every line must cost the same"
    return items


def test_keeps_higher_scored_items(counter: TiktokenCounter) -> None:
    rng = random.Random(99)
    base = _equal_cost_items(counter, 20)
    for budget in range(10, 200, 7):
        scores = rng.sample(range(1000), len(base))
        items = [i.model_copy(update={"score": s / 1000}) for i, s in zip(base, scores)]
        result = assemble_context(
            working_messages=[], layer_items={"episodic": items}, max_tokens=budget, counter=counter
        )
        assert result.tokens <= budget
        chosen = {i.id for i in result.sections[0].items}
        ranked = [i.id for i in sorted(items, key=lambda i: -i.score)]
        assert chosen == set(ranked[: len(chosen)]), f"budget {budget}: not the top {len(chosen)} by score"
        if budget >= 40:
            assert chosen


def test_best_item_of_all_layers_goes_in_first(counter: TiktokenCounter) -> None:
    episodic = _equal_cost_items(counter, 5, "episodic")
    semantic = [i.model_copy(update={"layer": "semantic", "id": "sem-" + i.id}) for i in episodic]
    layer_items = {
        "episodic": [i.model_copy(update={"score": 0.1 * n}) for n, i in enumerate(episodic)],
        "semantic": [i.model_copy(update={"score": 0.9, "text": "the best fact"}) for i in semantic[:1]],
    }
    alone = assemble_context(
        working_messages=[], layer_items={"semantic": layer_items["semantic"]}, max_tokens=10_000, counter=counter
    ).tokens
    # The selection estimates a layer's header conservatively (a few tokens more
    # than it renders to), so leave that slack; far less than a second item.
    result = assemble_context(working_messages=[], layer_items=layer_items, max_tokens=alone + 5, counter=counter)
    assert result.tokens <= alone + 5
    assert [i.text for i in result.sections[1].items] == ["the best fact"]
    assert result.sections[0].items == []


def test_layer_items_rendered_chronologically(counter: TiktokenCounter) -> None:
    rng = random.Random(5)
    items = []
    for n in range(12):
        ts = None if n in (3, 8) else T0 + timedelta(hours=rng.randint(0, 500))
        items.append(ContextItem(layer="episodic", kind="turn", id=f"i{n}", text=f"<{n:03d}> event", score=rng.random(), timestamp=ts))
    result = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=5000, counter=counter)
    positions = {i.id: result.text.index(f"<{int(i.id[1:]):03d}>") for i in items}
    in_text = sorted(items, key=lambda i: positions[i.id])
    dated = [i for i in in_text if i.timestamp is not None]
    assert [i.timestamp for i in dated] == sorted(i.timestamp for i in dated)
    assert all(i.timestamp is None for i in in_text[len(dated) :])  # undated last
    # The date is shown, and summaries are marked.
    assert f"[{dated[0].timestamp:%Y-%m-%d %H:%M}] <" in result.text


def test_summary_items_are_marked(counter: TiktokenCounter) -> None:
    item = ContextItem(layer="episodic", kind="summary", id="s1", text="they planned a trip", score=0.5, timestamp=T0)
    result = assemble_context(working_messages=[], layer_items={"episodic": [item]}, max_tokens=500, counter=counter)
    assert "- [2024-03-01 09:00] (summary) they planned a trip" in result.text


def test_working_memory_is_last_and_newest_messages_kept(counter: TiktokenCounter) -> None:
    messages = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"<{n:03d}> " + "word " * 20} for n in range(10)]
    full = assemble_context(working_messages=messages, layer_items={}, max_tokens=100_000, counter=counter)
    assert full.messages == messages
    item = ContextItem(layer="episodic", kind="turn", id="x", text="old fact", score=1.0, timestamp=T0)
    for budget in range(0, full.tokens + 1, 13):
        result = assemble_context(working_messages=messages, layer_items={"episodic": [item]}, max_tokens=budget, counter=counter)
        assert result.tokens <= budget
        assert result.messages == messages[len(messages) - len(result.messages) :]
        if result.messages and result.sections[0].items:
            # Working memory comes after the other layers in the text.
            assert result.text.index("old fact") < result.text.index(LAYER_TITLES["working"])
        lines = re.findall(r"^(user|assistant): <(\d{3})>", result.text, flags=re.MULTILINE)
        assert [int(n) for _, n in lines] == list(range(10 - len(result.messages), 10))


def test_layer_item_goes_before_any_working_message(counter: TiktokenCounter) -> None:
    messages = [{"role": "user", "content": "<001> " + "alpha " * 30}, {"role": "assistant", "content": "<002> " + "beta " * 30}]
    only_messages = assemble_context(working_messages=messages, layer_items={}, max_tokens=100_000, counter=counter).tokens
    item = ContextItem(layer="semantic", kind="fact", id="f", text="a fact " * 10, score=1.0, timestamp=T0)
    result = assemble_context(
        working_messages=messages, layer_items={"semantic": [item]}, max_tokens=only_messages + 3, counter=counter
    )
    assert result.messages == messages
    assert result.sections[0].items == []


def test_items_far_below_the_best_score_stay_out(counter: TiktokenCounter) -> None:
    items = [
        ContextItem(layer="episodic", kind="turn", id=str(n), text=f"fact number {n}", score=score)
        for n, score in enumerate([0.52, 0.30, 0.14, 0.11])
    ]
    result = assemble_context(
        working_messages=[], layer_items={"episodic": items}, max_tokens=1000, counter=counter, min_relative_score=0.4
    )
    assert [i.id for i in result.sections[0].items] == ["0", "1"]
    everything = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=1000, counter=counter)
    assert len(everything.sections[0].items) == 4


def test_a_passage_too_big_for_the_budget_gives_way_to_its_matched_child(counter: TiktokenCounter) -> None:
    from strata.schema import MatchedSpan, SourceRef

    filler = " ".join(EN_WORDS * 30)
    key = "The restart procedure is: drain the node, then run `make restart`."
    text = filler + " " + key + " " + filler
    start = len(filler) + 1
    passage = ContextItem(
        layer="semantic", kind="passage", id="runbook#0", text=text, score=1.0,
        source=SourceRef(doc_id="runbook", title="Runbook", start=1000, end=1000 + len(text)),
        matched=[MatchedSpan(id="runbook/c3", start=1000 + start, end=1000 + start + len(key), score=1.0)],
    )
    assert counter.count(text) > 300
    out = assemble_context(working_messages=[], layer_items={"semantic": [passage]}, max_tokens=100, counter=counter)
    assert out.tokens <= 100
    (item,) = out.sections[0].items
    assert item.text == key and item.source is not None and item.source.start == 1000 + start
    assert "[Runbook]" in out.text and "make restart" in out.text
