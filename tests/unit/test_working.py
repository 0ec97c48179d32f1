"""Tests for strata.working.memory (token-budgeted session memory)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from strata.providers.tokens import TiktokenCounter, count_message_tokens
from strata.working.importance import ImportanceRules
from strata.working.memory import (
    WorkingItem,
    WorkingMemory,
    extractive_summary,
    retention_score,
)

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
FILLER_EN = "The quarterly numbers were reviewed in detail by the whole finance group today. "
FILLER_ZH = "今天财务小组详细审查了季度数据，并讨论了下一步的安排。"
# Identical filler turns would back-reference each other; these tests isolate
# the compression rules from that boost.
NO_BACKREF = ImportanceRules(back_reference_step=0.0)


@pytest.fixture(scope="module")
def counter() -> TiktokenCounter:
    return TiktokenCounter("cl100k_base")


def make(counter: TiktokenCounter, **options: object) -> WorkingMemory:
    return WorkingMemory(counter=counter, **options)  # type: ignore[arg-type]


def make_plain(counter: TiktokenCounter, **options: object) -> WorkingMemory:
    return make(counter, rules=NO_BACKREF, **options)


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


# --- add --------------------------------------------------------------------


def test_add_scores_counts_and_orders(counter: TiktokenCounter) -> None:
    wm = make(counter)
    first = wm.add("user", "Hello there, how are you?", now=T0, item_id="a")
    second = wm.add("assistant", "我很好，谢谢！", now=hours(1), item_id="b")
    assert first.importance == pytest.approx(0.5)
    assert first.tokens == counter.count("Hello there, how are you?")
    assert second.tokens == counter.count("我很好，谢谢！")
    assert [i.id for i in wm.items] == ["a", "b"]
    assert wm.total_tokens == first.tokens + second.tokens


def test_add_default_id_is_uuid_hex(counter: TiktokenCounter) -> None:
    item = make(counter).add("user", "hi", now=T0)
    assert len(item.id) == 32 and int(item.id, 16) >= 0


def test_add_explicit_importance_is_clamped(counter: TiktokenCounter) -> None:
    wm = make(counter)
    assert wm.add("user", "x", now=T0, importance=7.0).importance == 1.0
    assert wm.add("user", "y", now=T0, importance=-1.0).importance == 0.0


def test_add_explicit_request_en_and_zh(counter: TiktokenCounter) -> None:
    wm = make(counter)
    assert wm.add("user", "Please remember I am vegetarian.", now=T0).importance == 1.0
    assert wm.add("user", "请记住我不吃辣。", now=T0).importance == 1.0


def test_add_uses_task_relevance(counter: TiktokenCounter) -> None:
    wm = make(counter)
    item = wm.add("user", "the login page shows an error", now=T0, task="fix login page error")
    assert item.importance > 0.5 and "task_relevance" in item.reasons


@pytest.mark.parametrize("role", ["robot", "", "USER"])
def test_bad_role_rejected(counter: TiktokenCounter, role: str) -> None:
    with pytest.raises(ValueError, match="role"):
        make(counter).add(role, "hello", now=T0)


@pytest.mark.parametrize("content", ["", "   ", "\n\t"])
def test_empty_content_rejected(counter: TiktokenCounter, content: str) -> None:
    with pytest.raises(ValueError, match="content"):
        make(counter).add("user", content, now=T0)


def test_other_add_errors(counter: TiktokenCounter) -> None:
    wm = make(counter)
    wm.add("user", "hi", now=T0, item_id="same")
    with pytest.raises(ValueError, match="duplicate"):
        wm.add("user", "again", now=T0, item_id="same")
    with pytest.raises(ValueError, match="aware"):
        wm.add("user", "naive", now=datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="JSON"):
        wm.add("user", "meta", now=T0, metadata={"bad": object()})


def test_backdated_item_is_inserted_chronologically(counter: TiktokenCounter) -> None:
    wm = make(counter)
    wm.add("user", "second", now=hours(2), item_id="late")
    wm.add("user", "first", now=hours(2), created_at=hours(1), item_id="early")
    wm.add("user", "tie", now=hours(2), item_id="tie")
    assert [i.id for i in wm.items] == ["early", "late", "tie"]


# --- back references --------------------------------------------------------


def test_back_reference_english_raises_earlier_item(counter: TiktokenCounter) -> None:
    wm = make(counter)
    wm.add("user", "My cat Miso only eats salmon.", now=T0, item_id="cat")
    wm.add("user", "What time is it?", now=hours(1), item_id="other")
    wm.add("user", "As I said, Miso hates tuna.", now=hours(2))
    cat, other = wm.get("cat"), wm.get("other")
    assert cat is not None and other is not None
    assert cat.importance == pytest.approx(0.6)
    assert "back_reference" in cat.reasons
    assert other.importance == pytest.approx(0.5)


def test_back_reference_chinese_raises_earlier_item(counter: TiktokenCounter) -> None:
    wm = make(counter)
    wm.add("user", "我的猫叫咪咪，只吃三文鱼。", now=T0, item_id="cat")
    wm.add("user", "今天天气怎么样？", now=hours(1), item_id="weather")
    wm.add("user", "之前说的咪咪最近不吃饭了", now=hours(2))
    assert wm.get("cat").importance == pytest.approx(0.6)  # type: ignore[union-attr]
    assert wm.get("weather").importance == pytest.approx(0.5)  # type: ignore[union-attr]


def test_back_references_accumulate_but_cap_at_one(counter: TiktokenCounter) -> None:
    wm = make(counter)
    wm.add("user", "Remember this: the vault code is alpha seven.", now=T0, item_id="vault")
    wm.add("user", "The staging cluster runs kubernetes.", now=T0, item_id="k8s", importance=0.95)
    for n in range(3):
        wm.add("user", f"As I said, vault code alpha and staging cluster {n}", now=hours(n + 1))
    assert wm.get("vault").importance == 1.0  # type: ignore[union-attr]
    assert wm.get("k8s").importance == 1.0  # type: ignore[union-attr]


# --- compression ------------------------------------------------------------


def fill(wm: WorkingMemory, n: int, *, start: float = 0.0, text: str = FILLER_EN) -> list[str]:
    ids = []
    for i in range(n):
        item = wm.add("user", f"{text}({i})", now=hours(start + i), item_id=f"f{i}", importance=0.3)
        ids.append(item.id)
    return ids


def test_over_budget_triggers_compression_to_keep_ratio(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=200)
    fill(wm, 20)
    assert wm.total_tokens <= 200 * 0.85
    assert 0 < len(wm.items) < 20
    # The newest survived: equal importance, so recency decides.
    assert wm.items[-1].id == "f19"


def test_under_budget_does_not_compress(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=10_000)
    fill(wm, 10)
    assert len(wm.items) == 10


def test_compression_reserves_system_prompt(counter: TiktokenCounter) -> None:
    prompt = "You are Strata, a careful assistant. 你是一个细心的助手。" * 3
    wm = make_plain(counter, max_tokens=300, system_prompt=prompt)
    sys_tokens = counter.count(prompt)
    assert wm.system_tokens == sys_tokens
    fill(wm, 20, text=FILLER_ZH)
    items_tokens = wm.total_tokens - sys_tokens
    assert items_tokens <= 0.85 * (300 - sys_tokens)
    assert wm.total_tokens <= 300


def test_compress_report(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=100_000)
    ids = fill(wm, 10)
    before = wm.total_tokens
    report = wm.compress(now=hours(10), budget_tokens=100)
    assert report.tokens_before == before
    assert report.tokens_after == wm.total_tokens <= 85
    assert report.target_tokens == 85
    assert set(report.kept_ids) | set(report.dropped_ids) == set(ids)
    assert not set(report.kept_ids) & set(report.dropped_ids)
    assert list(report.kept_ids) == [i.id for i in wm.items]


def test_high_importance_item_is_summarized_not_dropped(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=100_000, summary_tokens=20)
    long_text = (
        "Please remember my passport number is X1234567. "
        + "It was issued in Lisbon and the renewal paperwork is long and boring. " * 12
    )
    wm.add("user", long_text, now=T0, item_id="vip")
    fill(wm, 8, start=1)
    report = wm.compress(now=hours(9), budget_tokens=150)
    assert "vip" in report.summarized_ids
    vip = wm.get("vip")
    assert vip is not None and vip.summarized
    assert vip.content == "Please remember my passport number is X1234567."
    assert vip.tokens <= 20
    assert vip.original_tokens == counter.count(long_text)
    assert vip.importance == 1.0


def test_chinese_high_importance_summary(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=100_000, summary_tokens=30)
    text = "请记住：我对青霉素过敏。" + "这是很久以前医生告诉我的，当时还做了很多检查。" * 10
    wm.add("user", text, now=T0, item_id="allergy")
    fill(wm, 6, start=1, text=FILLER_ZH)
    report = wm.compress(now=hours(7), budget_tokens=150)
    assert report.summarized_ids == ("allergy",)
    assert wm.get("allergy").content.startswith("请记住：我对青霉素过敏。")  # type: ignore[union-attr]


def test_low_importance_old_item_dropped_first(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=100_000)
    wm.add("user", FILLER_EN, now=T0, item_id="old_low", importance=0.1)
    wm.add("user", FILLER_EN, now=hours(1), item_id="old_high", importance=0.8)
    wm.add("user", FILLER_EN, now=hours(5), item_id="new_low", importance=0.1)
    per_item = counter.count(FILLER_EN)
    report = wm.compress(now=hours(5), budget_tokens=int(2 * per_item / 0.85) + 1)
    assert report.dropped_ids == ("old_low",)
    assert [i.id for i in wm.items] == ["old_high", "new_low"]


def test_recency_breaks_equal_importance(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=100_000)
    for n, item_id in enumerate(["a", "b", "c"]):
        wm.add("user", FILLER_EN, now=hours(n), item_id=item_id, importance=0.5)
    per_item = counter.count(FILLER_EN)
    wm.compress(now=hours(3), budget_tokens=int(per_item / 0.85) + 1)
    assert [i.id for i in wm.items] == ["c"]


def test_recency_can_outweigh_small_importance_gap() -> None:
    # 0.6 * 0.5 + 0.4 / 1 = 0.70 beats 0.6 * 0.6 + 0.4 / 25 = 0.376.
    fresh = retention_score(0.5, T0, T0)
    stale = retention_score(0.6, T0 - timedelta(hours=24), T0)
    assert fresh == pytest.approx(0.7)
    assert fresh > stale
    assert retention_score(0.5, T0 + timedelta(hours=3), T0) == pytest.approx(0.7)


def test_chronological_order_preserved(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, max_tokens=100_000)
    importances = [0.9, 0.1, 0.7, 0.2, 0.8, 0.3]
    for n, imp in enumerate(importances):
        wm.add("user", FILLER_EN, now=hours(n), item_id=f"i{n}", importance=imp)
    per_item = counter.count(FILLER_EN)
    wm.compress(now=hours(6), budget_tokens=int(3 * per_item / 0.85) + 1)
    kept = [i.id for i in wm.items]
    assert kept == sorted(kept, key=lambda s: int(s[1:]))
    assert set(kept) == {"i0", "i2", "i4"}


def test_compression_is_deterministic(counter: TiktokenCounter) -> None:
    def run() -> list[str]:
        wm = make_plain(counter, max_tokens=100_000)
        for n in range(6):
            wm.add("user", FILLER_EN, now=T0, item_id=f"x{n}", importance=0.5)
        wm.compress(now=T0, budget_tokens=100)
        return [i.id for i in wm.items]

    assert run() == run()
    # All tie: later insertions win.
    assert run()[-1] == "x5"


def test_custom_summarizer_is_bounded(counter: TiktokenCounter) -> None:
    calls: list[int] = []

    def summarizer(text: str, max_tokens: int) -> str:
        calls.append(max_tokens)
        return "SUMMARY " * 100

    wm = make_plain(counter, max_tokens=100_000, summary_tokens=10, summarizer=summarizer)
    wm.add("user", "Remember this. " + FILLER_EN * 10, now=T0, item_id="vip")
    fill(wm, 5, start=1)
    wm.compress(now=hours(6), budget_tokens=100)
    assert calls == [10]
    assert wm.get("vip").tokens <= 10  # type: ignore[union-attr]


def test_extractive_summary_sentences(counter: TiktokenCounter) -> None:
    assert extractive_summary("One. Two! Three?", 4, counter=counter) == "One. Two!"
    assert extractive_summary("第一句。第二句！第三句？", 100, counter=counter) == "第一句。第二句！第三句？"
    limit = counter.count("Pi is 3.14 exactly.")
    assert extractive_summary("Pi is 3.14 exactly. Next.", limit, counter=counter) == "Pi is 3.14 exactly."
    assert counter.count(extractive_summary(FILLER_ZH * 5, 8, counter=counter)) <= 8


# --- messages view ----------------------------------------------------------


def test_messages_full_view(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, system_prompt="Be brief.")
    wm.add("user", "你好", now=T0)
    wm.add("assistant", "Hello!", now=hours(1))
    assert wm.messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "Hello!"},
    ]


def test_messages_budget_view_does_not_mutate(counter: TiktokenCounter) -> None:
    wm = make_plain(
        counter, max_tokens=100_000, summary_tokens=16, system_prompt="You are helpful. 你很有帮助。"
    )
    wm.add("user", "Please remember: my name is Ada. " + FILLER_EN * 6, now=T0, item_id="vip")
    fill(wm, 12, start=1, text=FILLER_ZH)
    before = wm.to_dict()
    for budget in (100, 200, 400):
        view = wm.messages(budget_tokens=budget, now=hours(13))
        assert count_message_tokens(counter, view) <= budget
        assert view[0]["role"] == "system"
        assert len(view) < 14
        assert any(m["content"].startswith("Please remember: my name is Ada.") for m in view)
    # At 100 tokens the explicit item only fits as its one-sentence summary.
    tight = wm.messages(budget_tokens=100, now=hours(13))
    assert {"role": "user", "content": "Please remember: my name is Ada."} in tight
    assert wm.to_dict() == before
    full = wm.messages(budget_tokens=10**6, now=hours(13))
    assert len(full) == 14


def test_messages_budget_too_small_for_system_prompt(counter: TiktokenCounter) -> None:
    wm = make_plain(counter, system_prompt="A reasonably long system prompt for the test.")
    with pytest.raises(ValueError):
        wm.messages(budget_tokens=3, now=T0)


# --- persistence and misc ---------------------------------------------------


def test_round_trip_persistence(counter: TiktokenCounter) -> None:
    rules = ImportanceRules(base_user=0.45)
    wm = make(counter, max_tokens=500, system_prompt="系统提示", rules=rules, summary_tokens=16)
    wm.add("user", "Remember this: I live in Porto.", now=T0, metadata={"turn": 1, "tags": ["geo"]})
    wm.add("assistant", "好的，我记住了。", now=hours(1))
    data = json.loads(json.dumps(wm.to_dict()))
    restored = WorkingMemory.from_dict(data, counter=counter)
    assert restored.items == wm.items
    assert restored.to_dict() == wm.to_dict()
    assert restored.messages() == wm.messages()
    assert restored.items[0].created_at == T0 and restored.items[0].created_at.tzinfo
    later = restored.add("user", "plain words", now=hours(2))
    assert later.importance == pytest.approx(0.45)
    overridden = WorkingMemory.from_dict(data, counter=counter, max_tokens=900)
    assert overridden.to_dict()["config"]["max_tokens"] == 900


def test_item_round_trip_and_validation() -> None:
    item = WorkingItem(
        id="i1",
        role="tool",
        content="42",
        created_at=T0,
        importance=0.3,
        tokens=1,
        summarized=True,
        original_tokens=9,
        reasons=("given",),
        metadata={"k": [1, 2]},
    )
    assert WorkingItem.from_dict(item.to_dict()) == item
    assert item.to_dict()["created_at"] == "2024-05-01T12:00:00+00:00"
    with pytest.raises(ValueError):
        WorkingItem(id="x", role="bot", content="c", created_at=T0, importance=0.1, tokens=1)
    with pytest.raises(ValueError):
        WorkingItem(id="x", role="user", content="c", created_at=T0, importance=2.0, tokens=1)
    with pytest.raises(ValueError):
        WorkingItem.from_dict({**item.to_dict(), "created_at": "2024-05-01T12:00:00"})


def test_from_dict_rejects_unknown_version(counter: TiktokenCounter) -> None:
    with pytest.raises(ValueError, match="version"):
        WorkingMemory.from_dict({"version": 99}, counter=counter)


def test_remove_and_clear(counter: TiktokenCounter) -> None:
    wm = make(counter, system_prompt="sys")
    wm.add("user", "one", now=T0, item_id="1")
    wm.add("user", "two", now=T0, item_id="2")
    assert wm.remove("1") is True
    assert wm.remove("1") is False
    assert [i.id for i in wm.items] == ["2"]
    wm.add("user", "again one", now=T0, item_id="1")
    wm.clear()
    assert wm.items == () and wm.total_tokens == wm.system_tokens
    assert wm.messages() == [{"role": "system", "content": "sys"}]


def test_constructor_validation(counter: TiktokenCounter) -> None:
    with pytest.raises(ValueError):
        make(counter, max_tokens=0)
    with pytest.raises(ValueError):
        make(counter, keep_ratio=1.5)
    with pytest.raises(ValueError):
        make(counter, max_tokens=5, system_prompt="a system prompt that is too long for it")


def test_each_items_terms_are_worked_out_once_not_once_per_later_item(
    counter: TiktokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The back-reference rule sets a new item against every earlier one: with each earlier
    item's terms extracted again, adding n items cost O(n^2) extractions (8x the CPU per add
    at 215 items in a session)."""
    from strata.retrieval.terms import extract_terms
    from strata.working import importance, memory

    calls = [0]

    def counted(text: str) -> frozenset[str]:
        calls[0] += 1
        return extract_terms(text)

    monkeypatch.setattr(memory, "extract_terms", counted)
    monkeypatch.setattr(importance, "extract_terms", counted)
    wm = make(counter, max_tokens=100_000)
    for n in range(200):
        wm.add("user", f"note {n}: the deploy of service {n} failed with error {n * 7}", now=hours(0))
    assert len(wm.items) == 200
    assert calls[0] <= 2 * 200  # the new item's own terms, and each item's once


def test_an_item_summarised_in_place_is_matched_by_its_new_terms(counter: TiktokenCounter) -> None:
    wm = make(counter, max_tokens=100_000)
    first = wm.add("user", "the staging cluster runs kubernetes on three nodes", now=hours(0))
    wm.add("user", "unrelated: lunch was good", now=hours(0))
    assert wm._rules.boost_from(wm._terms_of(first), wm._rules.back_reference("staging kubernetes nodes")) > 0
    wm._items[0] = replace(first, content="a cluster of lisbon photographs")  # what a summary does
    assert wm._rules.boost_from(wm._terms_of(wm._items[0]), wm._rules.back_reference("staging kubernetes nodes")) == 0


def _first_sentence(made: list[str]) -> Callable[[str, int], str]:
    """A summarizer that keeps a text's first sentence and notes every text it was given."""

    def summarizer(text: str, max_tokens: int) -> str:
        made.append(text)
        return text.split(".")[0] + "."

    return summarizer


def test_a_read_fitted_to_a_budget_summarises_each_item_once_not_at_every_read(counter: TiktokenCounter) -> None:
    """Every context call fits the session to its budget; the summaries it needs were made
    again at each call (most of the working shard's CPU per context call)."""
    made: list[str] = []
    wm = make(counter, max_tokens=100_000, summarizer=_first_sentence(made), summarize_above=0.0)
    for n in range(12):
        wm.add("user", f"Remember: the deploy key of service {n} is in vault path {n}. " + "More detail. " * 30,
               now=hours(0))
    first = wm.messages(budget_tokens=300, now=hours(1))
    assert made and len(made) <= 12
    assert wm.messages(budget_tokens=300, now=hours(1)) == first
    assert wm.messages(budget_tokens=250, now=hours(1))
    assert len(made) <= 12  # each item summarised at most once


def test_an_item_changed_in_place_is_summarised_again(counter: TiktokenCounter) -> None:
    made: list[str] = []
    wm = make(counter, max_tokens=100_000, summarizer=_first_sentence(made), summarize_above=0.0)
    item = wm.add("user", "Remember: first version. " + "Filler words. " * 60, now=hours(0))
    wm.messages(budget_tokens=60, now=hours(1))
    wm._items[0] = replace(item, content="Remember: second version. " + "Other filler. " * 60)
    assert "second version" in wm.messages(budget_tokens=60, now=hours(1))[-1]["content"]
    assert [t.split(".")[0] for t in made] == ["Remember: first version", "Remember: second version"]
