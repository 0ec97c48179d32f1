"""Tests for the extractive summariser and the EpisodeSummary value."""

from __future__ import annotations

import json

import pytest

from strata.episodic.summarize import EpisodeSummary, ExtractiveSummarizer, SummaryInput

EN = [
    SummaryInput("user", "I love hiking in the mountains. The mountains near Denver are great for hiking."),
    SummaryInput("assistant", "Hiking in the Denver mountains sounds wonderful. Do you go in summer?"),
    SummaryInput("user", "I need to book a cabin for the hiking trip by Friday. Also, I prefer quiet cabins."),
    SummaryInput("assistant", "Sure, quiet cabins near Denver are easy to find for a hiking trip."),
]

ZH = [
    SummaryInput("user", "我喜欢喝咖啡。每天早上我都喝咖啡。"),
    SummaryInput("assistant", "咖啡确实提神。云南的咖啡豆很有名。"),
    SummaryInput("user", "记得明天帮我买咖啡豆。周末我们去爬山。"),
]


@pytest.fixture()
def summarizer() -> ExtractiveSummarizer:
    return ExtractiveSummarizer()


def test_english_summary(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(EN)
    assert result.method == "extractive" and result.fallback_reason is None
    assert result.summary.strip()
    # At most three sentences, each copied from the input with its speaker.
    sources = {f"{t.speaker}: " for t in EN}
    assert any(result.summary.startswith(s) for s in sources)
    assert "hiking" in result.summary.lower()
    assert result.summary.count(": ") <= 3


def test_english_key_topics_are_repeated_terms(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(EN)
    assert 0 < len(result.key_topics) <= 5
    assert result.key_topics[0] == "hiking"  # the most repeated content word
    assert {"mountains", "denver"} <= set(result.key_topics)  # forms of a word count as one, shown as written
    for topic in result.key_topics:
        assert topic not in {"the", "and", "in", "i", "for"}


def test_english_action_items(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(EN)
    assert "I need to book a cabin for the hiking trip by Friday." in result.action_items
    assert not any("sounds wonderful" in a for a in result.action_items)


def test_english_preferences(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(EN)
    assert "I love hiking in the mountains." in result.user_preferences
    assert "Also, I prefer quiet cabins." in result.user_preferences
    assert not any("Denver are great" in p for p in result.user_preferences)


def test_chinese_summary(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(ZH)
    assert result.summary.strip()
    assert "咖啡" in result.summary
    assert "咖啡" in result.key_topics
    assert "记得明天帮我买咖啡豆。" in result.action_items
    assert "我喜欢喝咖啡。" in result.user_preferences
    assert not any("爬山" in p for p in result.user_preferences)


def test_chinese_other_markers(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(
        [
            SummaryInput("user", "别忘了周五交报告。我对花生过敏。"),
            SummaryInput("user", "我讨厌下雨天。今天天气不错。"),
        ]
    )
    assert "别忘了周五交报告。" in result.action_items
    assert "我对花生过敏。" in result.user_preferences
    assert "我讨厌下雨天。" in result.user_preferences
    assert "今天天气不错。" not in result.user_preferences


def test_no_action_items_or_preferences_when_none_said(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(
        [SummaryInput("user", "The train leaves at noon."), SummaryInput("assistant", "The station is close.")]
    )
    assert result.summary
    assert result.action_items == ()
    assert result.user_preferences == ()


def test_caps_and_dedup() -> None:
    turns = [SummaryInput("user", f"I need to call person{i}. I love colour{i}.") for i in range(8)]
    turns.append(SummaryInput("user", "I need to call person0."))
    result = ExtractiveSummarizer(max_sentences=2, max_topics=3).summarize(turns)
    assert len(result.action_items) == 5 and len(set(result.action_items)) == 5
    assert len(result.user_preferences) == 5
    assert len(result.key_topics) <= 3
    assert result.summary.count(": ") <= 2


def test_assistant_sentences_are_not_user_preferences(summarizer: ExtractiveSummarizer) -> None:
    result = summarizer.summarize(
        [
            SummaryInput("user", "Can you plan a trip to Rome?"),
            SummaryInput("assistant", "I love planning trips to Rome. Rome has great food."),
        ]
    )
    assert result.user_preferences == ()


def test_episode_summary_round_trip() -> None:
    original = EpisodeSummary(
        summary="user: 我喜欢喝咖啡。",
        key_topics=("咖啡", "hiking"),
        action_items=("记得买咖啡豆",),
        user_preferences=("I love tea",),
        method="extractive",
        fallback_reason="LLM request failed: APITimeoutError",
    )
    data = original.to_dict()
    assert data["key_topics"] == ["咖啡", "hiking"]
    assert EpisodeSummary.from_dict(data) == original
    # Through JSON too, as the store keeps it.
    assert EpisodeSummary.from_dict(json.loads(json.dumps(data, ensure_ascii=False))) == original


def test_episode_summary_from_partial_dict() -> None:
    assert EpisodeSummary.from_dict({"summary": "x"}) == EpisodeSummary(summary="x")
    assert EpisodeSummary.from_dict({}).summary == ""
