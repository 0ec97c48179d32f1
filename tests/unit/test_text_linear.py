"""Text work stays linear with a small constant in every script, counted rather than timed.

jieba's part-of-speech tagger weighs each state of a character against each state of the one
before it; a character it has never seen may be any of 256 states, so 1,000 random ideographs
took 3.4 s to tag, and a 16,000-character turn 59 s to write. The tagger's work is counted here
as the transitions it looks up (one per pair of states weighed), and must stay within the
budget of :func:`strata.retrieval.segmenter.tagged_words`; within that budget its words and tags
must be jieba's own, so the entities of real Chinese do not change.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from strata.retrieval import lexical
from strata.retrieval.entities import RuleExtractor
from strata.retrieval.segmenter import (
    TAGGER_STEPS_BASE,
    TAGGER_STEPS_PER_CHAR,
    jieba,
    jieba_posseg,
    tagged_words,
)
from strata_bench.service.text import hostile_texts

CHARS = 16_000

#: Ordinary sentences (MemSim's kind), with names, places and organisations jieba's dictionary lacks.
REAL = [
    "我的上司名叫赵雅琳。",
    "我的上司在深圳上班呢，就是广东的那个深圳。",
    "我表弟的邮箱地址是zhangwei0715@hangzhouwestlakehospital.com。",
    "我的上司他们单位叫上海先锋传媒集团。",
    "张伟和李娜上周去了杭州西湖，还在楼外楼吃了饭。",
    "王小明在阿里巴巴工作，负责开发Strata项目，他用Python和Redis。",
    "欧阳娜娜明天要去北京大学参加会议，然后飞往乌鲁木齐。",
    "我妈妈叫刘秀英，她住在四川成都的锦江区。",
]


class _Counted(dict[Any, float]):
    """A state's transitions, counting the look-ups: one per pair of states the tagger weighs."""

    looked_up = 0

    def get(self, key: Any, default: Any = None) -> Any:
        _Counted.looked_up += 1
        return super().get(key, default)


@pytest.fixture()
def weighed(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Counted]]:
    posseg = jieba_posseg()
    monkeypatch.setattr(posseg, "trans_P", {state: _Counted(nexts) for state, nexts in posseg.trans_P.items()})
    _Counted.looked_up = 0
    yield _Counted


def _runs(unit: str, chars: int = CHARS) -> str:
    return (unit * (chars // len(unit) + 1))[:chars]


def _adversarial() -> dict[str, str]:
    """Stretches the dictionary makes no word of, each short enough for the tagger to take."""
    posseg = jieba_posseg()
    rng = random.Random(1)
    unseen = [chr(c) for c in range(0x4E00, 0x9FA6) if chr(c) not in posseg.char_state_tab_P]
    richest = sorted(posseg.char_state_tab_P, key=lambda c: -len(posseg.char_state_tab_P[c]))[:50]
    return {
        "unseen_pairs": "".join(rng.choice(unseen) + rng.choice(unseen) + "。" for _ in range(CHARS // 3))[:CHARS],
        "unseen_triples_between_words": "".join("".join(rng.sample(unseen, 3)) + "中国" for _ in range(CHARS // 5)),
        "many_state_characters": "".join(rng.choice(richest) for _ in range(CHARS)),
        "random_cjk_between_commas": "".join(
            "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(8)) + "，" for _ in range(CHARS // 9)),
    }


_HOSTILE = {**hostile_texts(CHARS), **_adversarial()}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_the_tagger_weighs_no_more_state_pairs_than_its_budget(name: str, weighed: type[_Counted]) -> None:
    text = _HOSTILE[name]
    RuleExtractor().extract(text)
    budget = TAGGER_STEPS_BASE + TAGGER_STEPS_PER_CHAR * len(text)
    assert weighed.looked_up <= budget, f"{name}: {weighed.looked_up:,} pairs weighed, budget {budget:,}"


@pytest.mark.parametrize("text", REAL)
def test_real_chinese_is_tagged_as_jieba_tags_it(text: str, weighed: type[_Counted]) -> None:
    expected = [(pair.word, pair.flag) for pair in jieba_posseg().cut(text)]
    assert list(tagged_words(text)) == expected
    assert weighed.looked_up <= 2 * TAGGER_STEPS_BASE  # jieba's and ours: far within the budget


@pytest.mark.parametrize("seed", range(3))
def test_within_its_budget_the_tagger_is_jiebas_own_on_any_text(seed: int) -> None:
    rng = random.Random(seed)
    pieces = [*REAL, "，", " ", "abc", "3.14", "\n", "龘", "𠀀"]
    text = "".join(rng.choice(pieces) if rng.random() < 0.5 else chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(60))
    expected = [(pair.word, pair.flag) for pair in jieba_posseg().cut(text)]
    assert list(tagged_words(text, steps_max=10**9)) == expected


def test_a_stretch_over_the_budget_leaves_the_names_after_it_their_tags() -> None:
    found = RuleExtractor().extract(hostile_texts(4_000)["random_cjk"] + "。我的上司名叫赵雅琳。")
    assert "赵雅琳" in {entity.name for entity in found.entities}


def test_a_text_over_the_budget_is_cut_into_words_all_the_same() -> None:
    text = hostile_texts(2_000)["random_cjk"]
    words = list(tagged_words(text, steps_max=0))
    assert "".join(word for word, _ in words) == text


def test_jieba_is_given_no_more_than_a_window_of_a_cjk_run(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[int] = []
    cut = jieba().cut

    def counted(sentence: str, *args: Any, **kwargs: Any) -> Any:
        given.append(len(sentence))
        return cut(sentence, *args, **kwargs)

    monkeypatch.setattr(jieba(), "cut", counted)
    lexical.lexical_terms(hostile_texts(CHARS)["random_cjk"])
    assert max(given) <= lexical.JIEBA_WINDOW_CHARS
    assert sum(given) == CHARS


def test_a_turn_is_segmented_where_it_is_written_not_where_it_is_indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An actor writes in a worker thread and indexes on its event loop: the costly part goes first."""
    import numpy as np

    from strata.config import EpisodicSettings
    from strata.episodic.memory import EpisodicMemory
    from strata.episodic.turns import TurnInput
    from strata.store.records import InMemoryRecordStore
    from tests.unit.test_episodic import NOW, unit

    store = InMemoryRecordStore()
    store.ensure_collection("episodic", dim=384)
    memory = EpisodicMemory("t1", store=store, collection="episodic", settings=EpisodicSettings())
    text = hostile_texts(2_000)["random_cjk"]
    turns = memory.prepare("s1", [TurnInput(user=text)], now=NOW)
    vectors = np.stack([unit(0)])
    memory.write(turns, vectors)

    def refused(text: str) -> frozenset[str]:
        raise AssertionError("segmented on the event loop")

    monkeypatch.setattr(lexical, "lexical_terms", refused)
    memory.index(turns, vectors)
    monkeypatch.undo()
    assert memory.search(unit(1), query_text=text[:40], top_k=1)  # found by its terms
