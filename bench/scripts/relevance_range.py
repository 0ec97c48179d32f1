"""The cosine range an embedder's relevance is calibrated on (``RELEVANCE_RANGE`` in
:mod:`strata.providers.embedder`): the median cosine of a question and an unrelated
statement (relevance 0) and of a question and the statement that answers it
(relevance 1), embedded as Strata embeds them (questions through ``embed_query``,
turns as ``speaker: text`` through ``embed``).

The pairs are everyday small talk written for this purpose, in English and Chinese,
and belong to no benchmark: the range is a property of the model, not of a data set.
It is one of the language too: e5 gives Chinese pairs higher cosines, related or not, so
the Chinese pairs alone give the range for a CJK question and a CJK turn
(``CJK_SPANS``: how :mod:`strata.providers.routes` places the cosines of the turns it routes).

    python -m strata_bench.scripts.relevance_range [onnx-minilm|e5 ...]
"""

from __future__ import annotations

import sys

import numpy as np

from strata.config import EmbeddingSettings
from strata.providers.embedder import make_embedder
from strata.retrieval.lexical import cjk_share

#: (question, the turn that answers it). Each question is also paired with every
#: other pair's turn, which does not answer it: those are the unrelated pairs.
PAIRS: list[tuple[str, str]] = [
    ("Where did I leave my bike?", "user: I locked my bike outside the library this morning."),
    ("What is my sister's name?", "user: My sister Clara is coming to visit next week."),
    ("Which dentist do I see?", "user: My dentist is Dr. Patel on Elm Street."),
    ("When is the team offsite?", "user: The team offsite is on the 14th, in the mountains."),
    ("What car do I drive?", "user: I still drive my old blue Honda Civic."),
    ("What did the doctor say about my knee?", "user: The doctor said my knee needs six weeks of rest."),
    ("Which language am I learning?", "user: I've been practising Japanese every evening."),
    ("How much is the rent?", "user: Our rent went up to 1,400 a month."),
    ("What is the wifi password at the cabin?", "user: The cabin wifi password is on the fridge: pinecone42."),
    ("Who is my manager now?", "user: Since the reorg I report to Fatima."),
    ("What should I buy for the party?", "user: For Saturday's party we still need ice and paper cups."),
    ("What breed is my dog?", "user: Biscuit is a two-year-old beagle."),
    ("我的猫叫什么名字？", "user: 我家的猫叫小白，今年三岁了。"),
    ("我们周末去哪里爬山？", "user: 这个周末我们打算去香山爬山。"),
    ("我对什么过敏？", "user: 我对花生过敏，吃了会起疹子。"),
    ("我的生日是哪天？", "user: 我的生日是五月十二号。"),
]
#: More Chinese pairs, for the range of Chinese alone (with the four above): the same kind of
#: facts as the English ones, in other words.
MORE_CJK_PAIRS: list[tuple[str, str]] = [
    ("我把自行车停在哪儿了？", "user: 今天早上我把自行车锁在图书馆门口了。"),
    ("我姐姐叫什么？", "user: 我姐姐李娜下个星期要来看我。"),
    ("我在学哪种语言？", "user: 我每天晚上都在练习日语。"),
    ("房租现在是多少？", "user: 我们的房租涨到了每个月三千五。"),
    ("医生怎么说我的膝盖？", "user: 医生说我的膝盖要休息六个星期。"),
    ("我现在的领导是谁？", "user: 重组以后我的领导换成了王芳。"),
    ("派对还需要买什么？", "user: 星期六的派对我们还缺冰块和纸杯。"),
    ("我开的是什么车？", "user: 我还在开那辆旧的蓝色本田。"),
    ("我家的狗是什么品种？", "user: 饼干是一只两岁的比格犬。"),
    ("小屋的无线密码是什么？", "user: 小屋的无线密码贴在冰箱上，是松果四十二。"),
]


def relevance_range(provider: str, pairs: list[tuple[str, str]] | None = None) -> tuple[float, float, float, float]:
    """(unrelated median, answering median, unrelated 95th percentile, answering 5th) over ``pairs``
    (:data:`PAIRS` by default)."""
    pairs = PAIRS if pairs is None else pairs
    embedder = make_embedder(EmbeddingSettings(provider=provider))  # type: ignore[arg-type]
    questions = embedder.embed_query([q for q, _ in pairs])
    turns = embedder.embed([t for _, t in pairs])
    cosines = np.asarray(questions) @ np.asarray(turns).T
    matching = np.diag(cosines)
    unrelated = cosines[~np.eye(len(pairs), dtype=bool)]
    return (float(np.median(unrelated)), float(np.median(matching)),
            float(np.percentile(unrelated, 95)), float(np.percentile(matching, 5)))


def main(argv: list[str]) -> None:
    cjk = [pair for pair in PAIRS if cjk_share(pair[0]) > 0.5] + MORE_CJK_PAIRS
    for provider in argv or ["onnx-minilm", "e5"]:
        for label, pairs in (("all pairs", PAIRS), ("Chinese pairs", cjk)):
            lo, hi, lo95, hi5 = relevance_range(provider, pairs)
            print(f"{provider}, {label}: unrelated median {lo:.3f} (95th pct {lo95:.3f}), "
                  f"answering median {hi:.3f} (5th pct {hi5:.3f})")


if __name__ == "__main__":
    main(sys.argv[1:])
