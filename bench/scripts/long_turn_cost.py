"""What writing one long turn costs in process, by length and script: the write a request waits
for (cutting it into passages, counting their BM25 terms, the write to the in-memory store and
the indexing), then the background share (embedding the first ``passage_vectors_max`` passages
with the packaged MiniLM on one thread, as a shard runs it, and writing their vectors), then one
search.

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
    rng = random.Random(chars)  # noqa: S311  a seeded workload, not a secret
    return {
        "english": _english(chars, rng),
        "chinese": (_SENTENCE * (chars // len(_SENTENCE) + 1))[:chars],
        "random ideographs": "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(chars)),
    }


def main() -> None:
    embedder = OnnxMiniLMEmbedder()
    settings = EpisodicSettings()
    print(f"passage_chars {settings.passage_chars}, passage_vectors_max {settings.passage_vectors_max}")
    print(f"{'text':<18} {'chars':>9} {'passages':>8} {'write s':>8} {'embedded':>8} {'embed s':>8} "
          f"{'search ms':>9}")
    for chars in (100_000, 1_000_000):
        for name, text in _texts(chars).items():
            store = InMemoryRecordStore()
            store.ensure_collection("e", dim=384)
            memory = EpisodicMemory("t", store=store, collection="e", settings=settings)
            turns = memory.prepare("s", [TurnInput(user="the log:", agent=text)], now=NOW)
            vectors = embedder.embed([turns[0].text])
            started = time.perf_counter()
            memory.record(turns, vectors)  # cuts, counts the terms, writes, indexes: the request's share
            write_s = time.perf_counter() - started
            key = memory.unembedded()[0]
            started = time.perf_counter()
            texts = memory.texts_to_embed(key)
            passage_vectors = embedder.embed(texts)  # the shard's background share
            memory.write_passage_vectors(key, texts, passage_vectors)
            memory.index_passage_vectors(key, passage_vectors)
            embed_s = time.perf_counter() - started
            passages = memory.passages(None, text)
            query = embedder.embed_query(["when does the export job run"])[0]
            started = time.perf_counter()
            memory.search(query, query_text="when does the export job run", top_k=8)
            search_ms = (time.perf_counter() - started) * 1000
            print(f"{name:<18} {chars:>9,} {len(passages):>8} {write_s:>8.2f} {len(texts):>8} {embed_s:>8.2f} "
                  f"{search_ms:>9.1f}")


if __name__ == "__main__":
    main()
