"""Tests for strata.working.importance (English and Chinese rules)."""

from __future__ import annotations

import dataclasses

import pytest

from strata.retrieval.terms import extract_terms
from strata.working.importance import ImportanceRules, ImportanceSignal

RULES = ImportanceRules()


def score(text: str, role: str = "user", task: str | None = None) -> ImportanceSignal:
    return RULES.score(text, role=role, task=task)


# --- baseline ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "expected"), [("user", 0.5), ("assistant", 0.4), ("tool", 0.3)]
)
def test_neutral_baseline_by_role(role: str, expected: float) -> None:
    signal = score("The file has three sections.", role=role)
    assert signal.importance == pytest.approx(expected)
    assert signal.reasons == ()


def test_neutral_chinese_baseline() -> None:
    signal = score("这个文件有三个部分。")
    assert signal.importance == pytest.approx(0.5)
    assert signal.reasons == ()


def test_unknown_role_rejected() -> None:
    with pytest.raises(ValueError, match="role"):
        score("hello", role="robot")


def test_rules_are_frozen_and_tunable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        RULES.base_user = 0.9  # type: ignore[misc]
    custom = ImportanceRules(base_user=0.2)
    assert custom.score("plain words here", role="user").importance == pytest.approx(0.2)


# --- explicit requests ------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Remember this: my flight is on Friday.",
        "please remember my daughter is allergic to peanuts",
        "REMEMBER THAT I prefer window seats",
        "Don't forget the meeting with Alice.",
        "Don\u2019t forget the meeting with Alice.",
        "keep in mind that the budget is fixed",
        "Note that the API key rotates weekly",
        "Important: use metric units",
    ],
)
def test_explicit_english_is_one(text: str) -> None:
    signal = score(text, role="user")
    assert signal.importance == 1.0
    assert "explicit" in signal.reasons


@pytest.mark.parametrize(
    "text",
    [
        "记住我的生日是五月三日", "请记住我不吃辣", "别忘了明天开会", "不要忘记带护照", "记一下这个电话号码",
        "这个很重要",
    ],
)
def test_explicit_chinese_is_one(text: str) -> None:
    signal = score(text, role="user")
    assert signal.importance == 1.0
    assert "explicit" in signal.reasons


def test_explicit_applies_to_assistant_and_tool() -> None:
    assert score("Note that the cache is cold.", role="assistant").importance == 1.0
    assert score("Important: quota reached", role="tool").importance == 1.0


def test_negated_chinese_important_is_not_explicit() -> None:
    assert "explicit" not in score("这个不重要").reasons
    assert "explicit" not in score("其实没那么重要").reasons


def test_remember_inside_other_words_is_not_explicit() -> None:
    assert "explicit" not in score("the remembrance day parade").reasons


# --- task relevance ---------------------------------------------------------


def test_task_relevance_raises_english() -> None:
    task = "Finish the quarterly sales report before the deadline"
    text = "What numbers go into the quarterly sales report?"
    relevant = score(text, task=task)
    assert relevant.importance > score(text).importance
    assert "task_relevance" in relevant.reasons


def test_task_relevance_raises_chinese() -> None:
    task = "修复登录页面的错误"
    relevant = score("登录页面打不开", task=task)
    assert relevant.importance > score("登录页面打不开").importance
    assert "task_relevance" in relevant.reasons


def test_task_relevance_is_proportional_and_capped() -> None:
    task = "migrate postgres database schema to version twelve"
    weak = score("the database is slow", task=task).importance
    strong = score("migrate the postgres database schema now", task=task).importance
    assert 0.5 < weak < strong <= 0.5 + RULES.task_relevance_max_boost + 1e-9


def test_unrelated_task_gives_no_boost() -> None:
    signal = score("I like hiking in the mountains", task="fix the login bug")
    assert "task_relevance" not in signal.reasons


def test_task_stop_words_alone_do_not_count() -> None:
    signal = score("what is this about", task="what is the plan for this")
    assert "task_relevance" not in signal.reasons


# --- emotion ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "This is terrible",
        "I am so frustrated with this build",
        "We need it ASAP",
        "It works!!",
        "WHY does this KEEP failing",
    ],
)
def test_emotion_raises_english(text: str) -> None:
    signal = score(text)
    assert signal.importance > 0.5
    assert "emotion" in signal.reasons


@pytest.mark.parametrize("text", ["我真的很生气", "太好了！", "我很担心明天的考试", "服务器崩溃了", "这是紧急情况"])
def test_emotion_raises_chinese(text: str) -> None:
    signal = score(text)
    assert signal.importance > 0.5
    assert "emotion" in signal.reasons


def test_emotion_is_capped() -> None:
    shouted = score("I HATE THIS TERRIBLE AWFUL FURIOUS UPSET BUG!!!!!!!!")
    assert shouted.importance == pytest.approx(0.5 + RULES.emotion_max_boost)


def test_acronyms_are_not_shouting() -> None:
    assert "emotion" not in score("Send the JSON over HTTP to the API").reasons


def test_combined_boosts_stay_below_explicit() -> None:
    task = "fix the login page crash"
    signal = score("The LOGIN page crash is TERRIBLE!!! fix login page", task=task)
    assert signal.importance <= RULES.implicit_cap < 1.0
    assert set(signal.reasons) == {"task_relevance", "emotion"}


# --- back references --------------------------------------------------------


def test_back_reference_english_explicit_marker() -> None:
    earlier = "My cat Miso only eats salmon."
    assert RULES.back_reference_boost(earlier, "As I said, Miso is picky") == pytest.approx(0.1)
    assert RULES.back_reference_boost(earlier, "like I mentioned, salmon only") > 0


def test_back_reference_chinese_explicit_marker() -> None:
    earlier = "我的猫叫咪咪，只吃三文鱼。"
    assert RULES.back_reference_boost(earlier, "之前说的咪咪最近不吃饭了") == pytest.approx(0.1)
    assert RULES.back_reference_boost(earlier, "刚才提到的三文鱼买到了") > 0


def test_back_reference_strong_overlap_alone() -> None:
    earlier = "The staging cluster uses kubernetes version 1.29"
    later = "Can we upgrade the staging cluster?"
    assert RULES.back_reference_boost(earlier, later) > 0
    assert RULES.back_reference_boost("项目预算是五十万元", "项目预算需要调整") > 0


def test_back_reference_unrelated_is_zero() -> None:
    assert RULES.back_reference_boost("My cat Miso only eats salmon.", "What is the weather?") == 0
    assert RULES.back_reference_boost("我的猫叫咪咪", "今天天气怎么样") == 0


def test_marker_without_overlap_is_zero() -> None:
    assert RULES.back_reference_boost("My cat Miso only eats salmon.", "As I said earlier, no") == 0
    # The marker's own characters must not count as shared content.
    assert RULES.back_reference_boost("之前的版本很慢", "之前说的那件事呢") == 0


def test_single_shared_word_without_marker_is_zero() -> None:
    assert RULES.back_reference_boost("The report is due Monday", "The report looks fine") == 0


# --- terms ------------------------------------------------------------------


def test_extract_terms_english_and_chinese() -> None:
    assert extract_terms("The Deadlines for THE reports") == {"deadlin", "report"}
    # Snowball English stems: a word's forms meet, stop words go before stemming.
    assert extract_terms("painted") == extract_terms("painting") == extract_terms("paints") == {"paint"}
    assert extract_terms("Caroline's adoption") == extract_terms("caroline adopting") == {"carolin", "adopt"}
    terms = extract_terms("修复登录页面")
    assert {"修复", "登录", "页面"} <= terms
    assert "我们" not in extract_terms("我们")
    assert extract_terms("猫") == {"猫"}
