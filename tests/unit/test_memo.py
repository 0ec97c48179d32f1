"""strata.memo.BoundedMemo: values kept by key within a bound, the least recently used leaving first."""

from __future__ import annotations

from strata.memo import BoundedMemo


def test_values_are_made_once_and_the_least_recently_used_leave_first() -> None:
    made: list[str] = []
    memo = BoundedMemo[str, int](max_weight=2)

    def length(key: str) -> int:
        def make() -> int:
            made.append(key)
            return len(key)

        return memo.get(key, make)

    assert [length(k) for k in ("a", "bb", "a", "ccc", "bb")] == [1, 2, 1, 3, 2]
    assert made == ["a", "bb", "ccc", "bb"]  # "bb" was the least recently used when "ccc" came
    assert memo.keys() == ["ccc", "bb"] and memo.weight == 2


def test_entries_weigh_what_their_weight_says_and_one_heavier_than_the_bound_is_not_kept() -> None:
    memo = BoundedMemo[str, str](max_weight=10, weight=lambda key, value: len(key) + len(value))
    memo.get("abc", lambda: "ABC")
    memo.get("de", lambda: "DE")
    assert memo.keys() == ["abc", "de"] and memo.weight == 10
    memo.get("f", lambda: "F")  # 12 > 10: "abc" leaves
    assert memo.keys() == ["de", "f"] and memo.weight == 6
    assert memo.get("x" * 6, lambda: "y" * 6) == "y" * 6 and memo.keys() == ["de", "f"]  # 12 alone: not kept
