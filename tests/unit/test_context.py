"""Tests for assemble_context: budget, selection by score, rendering order."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta

import pytest

from strata.context.assemble import LAYER_TITLES, AssembledContext, assemble_context
from strata.providers.tokens import TiktokenCounter
from strata.schema import ContextItem

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)

EN_WORDS = [
    "the", "budget", "meeting", "moved", "to", "Thursday", "because", "the", "finance", "team",
    "needs", "more", "time", "to", "review", "quarterly", "numbers", "and", "Caroline", "wants",
    "a", "summary", "of", "the", "hiking", "trip", "plans", "before", "Friday",
]
ZH_CHARS = "我们明天下午三点在会议室讨论新项目的预算请记住她喜欢喝咖啡周末去爬山天气很好"


@pytest.fixture(scope="module")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


def _marker(n: int, zh: bool) -> str:
    # Unique, never a substring of another marker; in Chinese, within CJK tortoise-shell brackets.
    return f"\u3014{n:03d}\u3015" if zh else f"<{n:03d}>"


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
    from strata.context.assemble import _item_line

    costs = {counter.count(_item_line(i)) for i in items}
    assert len(costs) == 1, "test setup: every line must cost the same"
    return items


def test_keeps_higher_scored_items(counter: TiktokenCounter) -> None:
    rng = random.Random(99)
    base = _equal_cost_items(counter, 20)
    for budget in range(10, 200, 7):
        scores = rng.sample(range(1000), len(base))
        items = [i.model_copy(update={"score": s / 1000}) for i, s in zip(base, scores, strict=True)]
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
        text = f"<{n:03d}> event"
        items.append(
            ContextItem(layer="episodic", kind="turn", id=f"i{n}", text=text, score=rng.random(), timestamp=ts)
        )
    result = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=5000, counter=counter)
    positions = {i.id: result.text.index(f"<{int(i.id[1:]):03d}>") for i in items}
    in_text = sorted(items, key=lambda i: positions[i.id])
    dated = [i.timestamp for i in in_text if i.timestamp is not None]
    assert dated == sorted(dated)
    assert all(i.timestamp is None for i in in_text[len(dated) :])  # undated last
    # The date is shown, and summaries are marked.
    assert f"[{dated[0]:%Y-%m-%d %H:%M}] <" in result.text


def test_summary_items_are_marked(counter: TiktokenCounter) -> None:
    item = ContextItem(layer="episodic", kind="summary", id="s1", text="they planned a trip", score=0.5, timestamp=T0)
    result = assemble_context(working_messages=[], layer_items={"episodic": [item]}, max_tokens=500, counter=counter)
    assert "- [2024-03-01 09:00] (summary) they planned a trip" in result.text


def test_working_memory_is_last_and_newest_messages_kept(counter: TiktokenCounter) -> None:
    messages = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"<{n:03d}> " + "word " * 20} for n in range(10)
    ]
    full = assemble_context(working_messages=messages, layer_items={}, max_tokens=100_000, counter=counter)
    assert full.messages == messages
    item = ContextItem(layer="episodic", kind="turn", id="x", text="old fact", score=1.0, timestamp=T0)
    for budget in range(0, full.tokens + 1, 13):
        result = assemble_context(
            working_messages=messages, layer_items={"episodic": [item]}, max_tokens=budget, counter=counter
        )
        assert result.tokens <= budget
        assert result.messages == messages[len(messages) - len(result.messages) :]
        if result.messages and result.sections[0].items:
            # Working memory comes after the other layers in the text.
            assert result.text.index("old fact") < result.text.index(LAYER_TITLES["working"])
        lines = re.findall(r"^(user|assistant): <(\d{3})>", result.text, flags=re.MULTILINE)
        assert [int(n) for _, n in lines] == list(range(10 - len(result.messages), 10))


def test_layer_item_goes_before_any_working_message(counter: TiktokenCounter) -> None:
    messages = [
        {"role": "user", "content": "<001> " + "alpha " * 30},
        {"role": "assistant", "content": "<002> " + "beta " * 30},
    ]
    only_messages = assemble_context(
        working_messages=messages, layer_items={}, max_tokens=100_000, counter=counter
    ).tokens
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
    everything = assemble_context(
        working_messages=[], layer_items={"episodic": items}, max_tokens=1000, counter=counter
    )
    assert len(everything.sections[0].items) == 4


def test_a_passage_too_big_for_the_budget_gives_way_to_its_matched_child(
    counter: TiktokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strata.context import assemble
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

    # A passage that fits goes in whole, and no stand-in is made for it.
    made: list[str] = []
    original = assemble._narrower
    def narrower(whole: ContextItem) -> list[ContextItem]:  # records each passage narrowed
        made.append(whole.id)
        return original(whole)

    monkeypatch.setattr(assemble, "_narrower", narrower)
    whole = assemble_context(working_messages=[], layer_items={"semantic": [passage]}, max_tokens=2000, counter=counter)
    assert whole.sections[0].items == [passage] and made == []
    assemble_context(working_messages=[], layer_items={"semantic": [passage]}, max_tokens=100, counter=counter)
    assert made == ["runbook#0"]


# --- per-layer budgets, leftovers, dropped items, the refined section -----------------


def _uniform_layer(counter: TiktokenCounter, layer: str, n: int, score_scale: float = 1.0) -> list[ContextItem]:
    """``n`` items of one layer that cost the same, best first."""
    return [
        item.model_copy(update={"score": score_scale * (1 - k / (2 * n))})
        for k, item in enumerate(_equal_cost_items(counter, n, layer))
    ]


def _section(result: AssembledContext, layer: str) -> list[ContextItem]:
    return next(s.items for s in result.sections if s.layer == layer)


def test_layer_weights_give_a_proportional_share(counter: TiktokenCounter) -> None:
    # Incomparable scales: without shares, the layer with the bigger raw scores would take everything.
    layer_items = {
        "episodic": _uniform_layer(counter, "episodic", 20, score_scale=0.03),  # fused rank scores
        "semantic": _uniform_layer(counter, "semantic", 20, score_scale=0.9),  # cosine-like
    }
    even = assemble_context(working_messages=[], layer_items=layer_items, max_tokens=200, counter=counter)
    assert abs(len(_section(even, "episodic")) - len(_section(even, "semantic"))) <= 1
    assert even.budgets["episodic"] == even.budgets["semantic"] == 100
    heavy = assemble_context(
        working_messages=[], layer_items=layer_items, max_tokens=200, counter=counter,
        layer_weights={"episodic": 3.0, "semantic": 1.0},
    )
    assert heavy.tokens <= 200
    assert (heavy.budgets["episodic"], heavy.budgets["semantic"]) == (150, 50)
    sections = {s.layer: s for s in heavy.sections}
    assert sections["episodic"].tokens > 2 * sections["semantic"].tokens
    assert len(sections["episodic"].items) >= 2.5 * len(sections["semantic"].items) > 0
    # Each layer keeps its own best items.
    for layer in ("episodic", "semantic"):
        chosen = {i.id for i in sections[layer].items}
        assert chosen == {i.id for i in layer_items[layer][: len(chosen)]}


def test_budgets_follow_the_working_memory_and_ignore_empty_layers(counter: TiktokenCounter) -> None:
    messages = [{"role": "user", "content": "hello " * 30}]
    layer_items = {"episodic": _uniform_layer(counter, "episodic", 10), "semantic": [], "procedural": []}
    result = assemble_context(working_messages=messages, layer_items=layer_items, max_tokens=300, counter=counter)
    working = counter.count(_render_working(messages))
    assert result.budgets == {"episodic": 300 - working, "semantic": 0, "procedural": 0}


def _render_working(messages: list[dict[str, str]]) -> str:
    from strata.context.assemble import _render

    return _render([], messages)


def test_a_weight_of_zero_reserves_nothing_but_uses_leftovers(counter: TiktokenCounter) -> None:
    layer_items = {
        "episodic": _uniform_layer(counter, "episodic", 20),
        "procedural": _uniform_layer(counter, "procedural", 20),
    }
    result = assemble_context(
        working_messages=[], layer_items=layer_items, max_tokens=150, counter=counter,
        layer_weights={"procedural": 0.0},
    )
    assert result.budgets == {"episodic": 150, "procedural": 0}
    assert _section(result, "episodic") and not _section(result, "procedural")
    few = {"episodic": layer_items["episodic"][:1], "procedural": layer_items["procedural"]}
    result = assemble_context(
        working_messages=[], layer_items=few, max_tokens=150, counter=counter, layer_weights={"procedural": 0.0}
    )
    assert len(_section(result, "episodic")) == 1
    assert len(_section(result, "procedural")) >= 5


def test_leftover_of_a_small_layer_goes_to_the_others(counter: TiktokenCounter) -> None:
    layer_items = {
        "episodic": _uniform_layer(counter, "episodic", 1),
        "semantic": _uniform_layer(counter, "semantic", 20),
        "procedural": _uniform_layer(counter, "procedural", 20),
    }
    budget = 240
    result = assemble_context(working_messages=[], layer_items=layer_items, max_tokens=budget, counter=counter)
    assert len(_section(result, "episodic")) == 1
    assert result.budgets["semantic"] == result.budgets["procedural"] == budget // 3
    sections = {s.layer: s for s in result.sections}
    # Semantic and procedural went past their third: together they used the episodic leftover.
    assert sections["semantic"].tokens + sections["procedural"].tokens > 2 * (budget // 3)
    from strata.context.assemble import _item_line

    line = counter.count(_item_line(layer_items["semantic"][0])) + 1
    assert budget - line - 4 <= result.tokens <= budget  # nothing that fits was left unused
    assert result.dropped


def test_leftover_is_shared_by_normalised_score(counter: TiktokenCounter) -> None:
    # The leftover fills by score relative to each layer's best, not by raw score.
    semantic = _uniform_layer(counter, "semantic", 20, score_scale=0.9)
    episodic = _uniform_layer(counter, "episodic", 20, score_scale=0.02)
    result = assemble_context(
        working_messages=[], layer_items={"episodic": episodic, "semantic": semantic, "procedural": []},
        max_tokens=300, counter=counter,
    )
    assert abs(len(_section(result, "episodic")) - len(_section(result, "semantic"))) <= 1


def test_dropped_lists_what_did_not_fit_and_nothing_that_did(counter: TiktokenCounter) -> None:
    layer_items = {
        "episodic": _uniform_layer(counter, "episodic", 12),
        "semantic": _uniform_layer(counter, "semantic", 12),
    }
    below_floor = ContextItem(layer="semantic", kind="fact", id="semantic-weak", text="the weak fact", score=0.01)
    layer_items["semantic"].append(below_floor)
    result = assemble_context(
        working_messages=[], layer_items=layer_items, max_tokens=120, counter=counter, min_relative_score=0.2
    )
    chosen = {i.id for s in result.sections for i in s.items if s.layer != "working"}
    dropped = [i.id for i in result.dropped]
    assert chosen and dropped
    assert not chosen & set(dropped)
    assert len(dropped) == len(set(dropped))
    assert chosen | set(dropped) == {i.id for items in layer_items.values() for i in items} - {"semantic-weak"}
    # Best first (normalised: these layers share one scale), alternating layers.
    scores = [i.score for i in result.dropped]
    assert scores == sorted(scores, reverse=True)
    everything = assemble_context(working_messages=[], layer_items=layer_items, max_tokens=100_000, counter=counter)
    assert everything.dropped == []


def test_a_narrowed_passage_is_not_dropped(counter: TiktokenCounter) -> None:
    from strata.schema import MatchedSpan, SourceRef

    filler = " ".join(EN_WORDS * 20)
    key = "Run `make restart` after draining."
    text = f"{filler} {key} {filler}"
    start = len(filler) + 1
    passage = ContextItem(
        layer="semantic", kind="passage", id="doc#0", text=text, score=1.0,
        source=SourceRef(doc_id="doc", start=0, end=len(text)),
        matched=[MatchedSpan(id="doc/c1", start=start, end=start + len(key), score=1.0)],
    )
    result = assemble_context(working_messages=[], layer_items={"semantic": [passage]}, max_tokens=60, counter=counter)
    assert [i.text for i in _section(result, "semantic")] == [key]
    assert result.dropped == []


def test_invalid_weights_and_budget_are_rejected(counter: TiktokenCounter) -> None:
    items = {"episodic": _uniform_layer(counter, "episodic", 2)}
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="weight"):
            assemble_context(
                working_messages=[], layer_items=items, max_tokens=100, counter=counter,
                layer_weights={"episodic": bad},
            )
    with pytest.raises(ValueError, match="max_tokens"):
        assemble_context(working_messages=[], layer_items=items, max_tokens=-1, counter=counter)


def _random_passage(rng: random.Random, n: int, zh: bool) -> ContextItem:
    from strata.schema import MatchedSpan, SourceRef

    parts = [_text(rng, n * 10 + k, zh) for k in range(rng.randint(2, 6))]
    text = " ".join(parts)
    matched, offset = [], 0
    for k, part in enumerate(parts):
        if rng.random() < 0.5:
            matched.append(MatchedSpan(id=f"p{n}/c{k}", start=1000 + offset, end=1000 + offset + len(part), score=0.5))
        offset += len(part) + 1
    return ContextItem(
        layer="semantic", kind="passage", id=f"p{n}", text=text, score=round(rng.uniform(-0.2, 1), 3),
        source=SourceRef(doc_id=f"doc{n}", title=rng.choice([None, "Guide"]), start=1000, end=1000 + len(text)),
        matched=matched,
    )


def test_random_inputs_never_exceed_the_budget(counter: TiktokenCounter) -> None:
    rng = random.Random(20240301)
    rendered = 0
    for case in range(300):
        zh = rng.random() < 0.5
        layer_items = _items(rng, rng.randint(0, 16), zh)
        layer_items["semantic"] += [_random_passage(rng, 900 + k, zh) for k in range(rng.randint(0, 3))]
        for layer in list(layer_items):
            if rng.random() < 0.15:
                layer_items[layer] = []
            elif rng.random() < 0.15:
                del layer_items[layer]
        if rng.random() < 0.3:  # fused rank scores: a tiny scale
            for layer, items in layer_items.items():
                layer_items[layer] = [i.model_copy(update={"score": i.score / 40}) for i in items]
        messages = _messages(rng, rng.randint(0, 6), zh)
        max_tokens = rng.choice([0, 1, 2, 3, 5, 8, 12, 20, 33, 64, 100, 180, 400, 1500])
        weights = None if rng.random() < 0.2 else {
            layer: rng.choice([0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 10.0]) for layer in layer_items if rng.random() < 0.8
        }
        floor = rng.choice([0.0, 0.0, 0.3, 0.8])
        result = assemble_context(
            working_messages=messages, layer_items=layer_items, max_tokens=max_tokens, counter=counter,
            min_relative_score=floor, layer_weights=weights,
        )
        where = f"case {case}"
        assert result.tokens == counter.count(result.text), where
        assert result.tokens <= max_tokens, where
        assert result.messages == messages[len(messages) - len(result.messages) :], where
        working = counter.count(_render_working(result.messages))
        assert sum(result.budgets.values()) <= max_tokens - working, where
        assert set(result.budgets) == set(layer_items), where
        chosen = [i.id for s in result.sections if s.layer != "working" for i in s.items]
        dropped = [i.id for i in result.dropped]
        assert len(set(chosen)) == len(chosen) and not set(chosen) & set(dropped), where
        for layer, items in layer_items.items():
            section = next(s for s in result.sections if s.layer == layer)
            for item in section.items:
                assert _norm(item.text) in result.text, where
            best = max((i.score for i in items), default=0.0)
            cut = floor * best if floor > 0 and best > 0 else float("-inf")
            above = {i.id for i in items if i.score >= cut}
            assert {i.id for i in section.items} | {i.id for i in result.dropped if i.layer == layer} == above, where
        for item in result.dropped:
            assert _norm(item.text) not in result.text, where
        rendered += bool(chosen)
    assert rendered > 60  # the checks were not vacuous


def test_render_refined_fits_or_returns_none(counter: TiktokenCounter) -> None:
    from strata.context.assemble import refined_budget, render_refined

    messages = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"<{n:03d}> " + "word " * 15} for n in range(6)
    ]
    refined = "Caroline moved the budget meeting to Thursday 14:00; ticket OPS-1234; run `make restart`."
    full = render_refined(working_messages=messages, refined_text=refined, max_tokens=10_000, counter=counter)
    assert full is not None
    assert full.messages == messages
    assert full.text.startswith(f"## {LAYER_TITLES['refined']}\n- {refined}\n\n## {LAYER_TITLES['working']}\n")
    assert [s.layer for s in full.sections] == ["refined", "working"]
    (item,) = full.sections[0].items
    assert (item.layer, item.kind, item.id, item.text, item.score) == ("refined", "refined", "refined", refined, 1.0)
    assert full.dropped == [] and full.tokens == counter.count(full.text)

    alone = render_refined(working_messages=[], refined_text=refined, max_tokens=10_000, counter=counter)
    assert alone is not None
    for budget in range(full.tokens + 3):
        result = render_refined(working_messages=messages, refined_text=refined, max_tokens=budget, counter=counter)
        if budget < alone.tokens:
            assert result is None
            continue
        assert result is not None
        assert result.tokens == counter.count(result.text) <= budget
        assert refined in result.text
        assert result.messages == messages[len(messages) - len(result.messages) :]
    assert render_refined(working_messages=messages, refined_text="  \n", max_tokens=1000, counter=counter) is None

    # A text of refined_budget tokens keeps every message.
    budget = 400
    room = refined_budget(working_messages=messages, max_tokens=budget, counter=counter)
    text = counter.truncate("新しい予算会議は木曜日です。 " * 200, room)
    assert counter.count(text) == room
    result = render_refined(working_messages=messages, refined_text=text, max_tokens=budget, counter=counter)
    assert result is not None and result.messages == messages and result.tokens <= budget


def test_a_passage_that_goes_in_as_its_child_is_reported_narrowed(counter: TiktokenCounter) -> None:
    from strata.schema import MatchedSpan, SourceRef

    parent = "Intro sentence about nothing much. " * 40 + "The keepalive_timeout must be 120 s."
    start = parent.index("The keepalive")
    item = ContextItem(
        layer="semantic", kind="passage", id="p1", text=parent, score=1.0,
        source=SourceRef(doc_id="d", start=0, end=len(parent)),
        matched=[MatchedSpan(id="c1", start=start, end=len(parent), score=1.0)],
    )
    out = assemble_context(working_messages=[], layer_items={"semantic": [item]}, max_tokens=60, counter=counter)
    assert "keepalive_timeout" in out.text and "Intro sentence" not in out.text
    assert out.narrowed == [item] and out.dropped == [] and out.cut
    whole = assemble_context(working_messages=[], layer_items={"semantic": [item]}, max_tokens=2000, counter=counter)
    assert whole.narrowed == [] and not whole.cut


def test_each_text_is_counted_once_per_assembly(counter: TiktokenCounter) -> None:
    """An item's line is costed, then counted in every candidate text and in its section; the
    working block when fitted, for the budget left and for its section: each text once."""
    counted: list[str] = []

    class Recording:
        def count(self, text: str) -> int:
            counted.append(text)
            return counter.count(text)

        def truncate(self, text: str, max_tokens: int) -> str:
            return counter.truncate(text, max_tokens)

    def item(layer: str, n: int, text: str, score: float) -> ContextItem:
        return ContextItem(layer=layer, kind="turn", id=f"{layer}{n}", text=text, score=score,
                           timestamp=T0 + timedelta(hours=n))

    items = {
        "episodic": [item("episodic", n, f"turn {n} " + "about the hiking trip " * 8, 1.0 - n / 20) for n in range(12)],
        "semantic": [item("semantic", n, f"passage {n} " + "quarterly numbers " * 12, 0.9 - n / 20) for n in range(6)],
    }
    messages = [{"role": "user", "content": f"message {n} " + "we moved the meeting " * 10} for n in range(8)]
    out = assemble_context(working_messages=messages, layer_items=items, max_tokens=600, counter=Recording())
    assert out.tokens <= 600 and out.sections
    repeated = {text[:40] for text in counted if counted.count(text) > 1}
    assert not repeated, repeated


def test_long_texts_made_one_line_are_remembered_within_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from strata.context import assemble
    from strata.memo import BoundedMemo

    lines = BoundedMemo[str, str](max_weight=4500, weight=lambda text, line: len(text) + len(line))
    monkeypatch.setattr(assemble, "_one_lines", lines)
    # ~2,050 characters with its line
    texts = [f"Passage {n}.\n\n" + "The gate opens at  seven.\t" * 40 for n in range(3)]
    made = [assemble._one_line(text) for text in texts]
    assert made == [" ".join(text.split()) for text in texts] and "\n" not in made[0] and "  " not in made[0]
    assert lines.keys() == texts[1:] and lines.weight <= 4500  # the oldest went first
    assert assemble._one_line(texts[1]) is made[1] and lines.keys() == [texts[2], texts[1]]
    assert assemble._one_line(" short \n text ") == "short text" and len(lines) == 2  # short: not kept


def test_a_turn_that_speaks_of_a_time_shows_that_time_beside_when_it_was_said() -> None:
    from strata.schema.outputs import TimeRangeOut

    wednesday = datetime(2024, 3, 6, tzinfo=UTC)
    items = [
        ContextItem(layer="episodic", kind="turn", id="told", text="user: Next Wednesday I'm at the lecture.",
                    score=1.0, timestamp=T0,
                    speaks_of=TimeRangeOut(start=wednesday, end=wednesday + timedelta(days=1))),
        ContextItem(layer="episodic", kind="turn", id="week", text="user: Next week I'm away.", score=0.9,
                    timestamp=T0, speaks_of=TimeRangeOut(start=datetime(2024, 3, 4, tzinfo=UTC),
                                                         end=datetime(2024, 3, 11, tzinfo=UTC))),
        ContextItem(layer="episodic", kind="turn", id="plain", text="user: Hello.", score=0.8, timestamp=T0),
        ContextItem(layer="episodic", kind="turn", id="today", text="user: Cold today.", score=0.7, timestamp=T0,
                    speaks_of=TimeRangeOut(start=T0.replace(hour=0), end=T0.replace(hour=0) + timedelta(days=1))),
    ]
    text = assemble_context(working_messages=[], layer_items={"episodic": items}, max_tokens=500,
                            counter=TiktokenCounter("cl100k_base")).text
    assert "[2024-03-01 09:00] (of 2024-03-06) user: Next Wednesday I'm at the lecture." in text
    assert "(of 2024-03-04 to 2024-03-10) user: Next week I'm away." in text
    assert "[2024-03-01 09:00] user: Hello." in text
    assert "[2024-03-01 09:00] user: Cold today." in text  # the day it was said: nothing to add
