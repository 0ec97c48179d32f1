"""What writing one long turn costs in process, by length and script: cutting it into passages,
counting their BM25 terms, embedding the first ``passage_vectors_max`` (the packaged MiniLM, one
thread, as a shard runs it), the write to the in-memory store and the indexing; then one search.

Texts: English log-like prose, and CJK as real sentences repeated and as random ideographs (the
segmenter's worst case), at 100,000 and 1,000,000 characters.

Run from the repository root::

    python -m strata_bench.scripts.long_turn_cost

Only Strata's own code: no Ray, no Milvus (the in-memory record store).
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.store.records import InMemoryRecordStore

__all__ = ["main"]

NOW = datetime(2026, 3, 1, tzinfo=UTC)
_WORDS = ("build", "worker", "queue", "deploy", "retry", "token", "parser", "schema", "index", "branch")
_SENTENCE = "我们上周在杭州参加了一个关于数据库迁移的技术分享会，会后大家一起去西湖边吃饭。"


def _english(chars: int, rng: random.Random) -> str:
    out, total = [], 0
    while total < chars:
        line = "INFO " + " ".join(rng.choice(_WORDS) for _ in range(12)) + "."
        out.append(line)
        total += len(line) + 1
    return "\n".join(out)[:chars]


def _texts(chars: int) -> dict[str, str]:
    rng = random.Random(chars)
    return {
        "english": _english(chars, rng),
        "chinese": (_SENTENCE * (chars // len(_SENTENCE) + 1))[:chars],
        "random ideographs": "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(chars)),
    }


def main() -> None:
    embedder = OnnxMiniLMEmbedder()
    settings = EpisodicSettings()
    print(f"passage_chars {settings.passage_chars}, passage_vectors_max {settings.passage_vectors_max}")
    print(f"{'text':<18} {'chars':>9} {'passages':>8} {'cut+terms s':>11} {'embed s':>8} "
          f"{'write+index s':>13} {'search ms':>9}")
    for chars in (100_000, 1_000_000):
        for name, text in _texts(chars).items():
            store = InMemoryRecordStore()
            store.ensure_collection("e", dim=384)
            memory = EpisodicMemory("t", store=store, collection="e", settings=settings)
            turns = memory.prepare("s", [TurnInput(user="the log:", agent=text)], now=NOW)
            started = time.perf_counter()
            passages = memory.passages(None, text)
            texts = memory.passage_texts(None, text)
            vectors = embedder.embed([turns[0].text])
            cut_s = time.perf_counter() - started
            started = time.perf_counter()
            passage_vectors = embedder.embed(texts)
            embed_s = time.perf_counter() - started
            started = time.perf_counter()
            memory.record(turns, vectors, passage_vectors)  # counts the terms (precount), writes, indexes
            write_s = time.perf_counter() - started
            query = embedder.embed_query(["when does the export job run"])[0]
            started = time.perf_counter()
            memory.search(query, query_text="when does the export job run", top_k=8)
            search_ms = (time.perf_counter() - started) * 1000
            print(f"{name:<18} {chars:>9,} {len(passages):>8} {cut_s:>11.2f} {embed_s:>8.2f} "
                  f"{write_s:>13.2f} {search_ms:>9.1f}")


if __name__ == "__main__":
    main()
