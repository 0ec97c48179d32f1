"""Episodic search cost with and without neighbour-aware BM25 and cosines: 10,000 LoCoMo turn texts in one
session of one tenant (random unit vectors), 100 questions, p50 of EpisodicMemory.search in-process.

Run from the repository root, with LoCoMo at ``../shared/bench/locomo10.json``::

    python -m strata_bench.scripts.episodic_search_cost
    python bench/scripts/episodic_search_cost.py      # the same

Only Strata's own code: no Ray, no Milvus.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.store.records import InMemoryRecordStore
from strata_bench.stats import median

__all__ = ["main"]

LOCOMO = Path(__file__).resolve().parents[3] / "shared/bench/locomo10.json"


def main() -> None:
    """Print the p50 of a search over 10,000 turns, plain and neighbour-aware."""
    with LOCOMO.open() as f:
        d = json.load(f)
    texts = [t["text"] for c in d for k, v in c["conversation"].items()
             if k.startswith("session_") and isinstance(v, list) for t in v]
    texts = (texts * 2)[:10000]
    qs = [q["question"] for q in d[0]["qa"][:50]]
    rng = np.random.default_rng(0)
    configurations = [
        ("plain BM25 and cosines", EpisodicSettings(lexical_context_weight=0, dense_context_weight=0)),
        ("neighbour-aware BM25", EpisodicSettings(dense_context_weight=0)),
        ("neighbour-aware BM25 and cosines", EpisodicSettings()),
    ]
    for label, st in configurations:
        store = InMemoryRecordStore()
        store.ensure_collection("e", dim=384)
        m = EpisodicMemory("t", store=store, collection="e", settings=st)
        now = datetime(2024, 1, 1, tzinfo=UTC)
        for b in range(0, len(texts), 500):
            batch = texts[b : b + 500]
            inputs = [TurnInput(user=t, timestamp=now + timedelta(seconds=b + i)) for i, t in enumerate(batch)]
            turns = m.prepare("s", inputs, now=now)
            v = rng.standard_normal((len(turns), 384)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            m.record(turns, v)
        q = rng.standard_normal(384).astype(np.float32)
        q /= np.linalg.norm(q)
        ms = []
        for text in qs * 2:
            t0 = time.perf_counter()
            m.search(q, query_text=text, top_k=10)
            ms.append((time.perf_counter() - t0) * 1000)
        print(f"{label}: search over 10,000 turns in one session, p50 {median(ms):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
