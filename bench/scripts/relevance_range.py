"""The cosine range an embedder's relevance is calibrated on (``RELEVANCE_RANGE`` in
:mod:`strata.providers.embedder`): the median cosine of a question and an unrelated
statement (relevance 0) and of a question and the statement that answers it
(relevance 1), embedded as Strata embeds them (questions through ``embed_query``,
turns as ``speaker: text`` through ``embed``).

The pairs are everyday small talk written for this purpose, in English and Chinese,
and belong to no benchmark: the range is a property of the model, not of a data set.

    python -m strata_bench.scripts.relevance_range [onnx-minilm|e5 ...]
"""

from __future__ import annotations

import sys

import numpy as np

from strata.config import EmbeddingSettings
from strata.providers.embedder import make_embedder

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


def relevance_range(provider: str) -> tuple[float, float, float, float]:
    embedder = make_embedder(EmbeddingSettings(provider=provider))  # type: ignore[arg-type]
    questions = embedder.embed_query([q for q, _ in PAIRS])
    turns = embedder.embed([t for _, t in PAIRS])
    cosines = np.asarray(questions) @ np.asarray(turns).T
    matching = np.diag(cosines)
    unrelated = cosines[~np.eye(len(PAIRS), dtype=bool)]
    return (float(np.median(unrelated)), float(np.median(matching)),
            float(np.percentile(unrelated, 95)), float(np.percentile(matching, 5)))


def main(argv: list[str]) -> None:
    for provider in argv or ["onnx-minilm", "e5"]:
        lo, hi, lo95, hi5 = relevance_range(provider)
        print(f"{provider}: unrelated median {lo:.3f} (95th pct {lo95:.3f}), "
              f"answering median {hi:.3f} (5th pct {hi5:.3f})")


if __name__ == "__main__":
    main(sys.argv[1:])
