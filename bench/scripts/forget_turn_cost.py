"""What forgetting one turn costs in process, by the tenant's size and shape: a tenant of
2,000 or 8,000 turns in one session, or 8,000 in 80 sessions (random unit vectors), 20
single-turn forgets each (``turn_keys``, ``delete_keys``, ``drop_keys``, as the episodic shard's
``forget_turn`` runs them), each followed by a search, p50 of each.

Run from the repository root::

    python -m strata_bench.scripts.forget_turn_cost

Only Strata's own code: no Ray, no Milvus (the in-memory record store).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np

from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.store.records import InMemoryRecordStore
from strata_bench.stats import median

__all__ = ["main"]

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _tenant(turns: int, sessions: int, rng: np.random.Generator) -> EpisodicMemory:
    store = InMemoryRecordStore()
    store.ensure_collection("episodic", dim=384)
    memory = EpisodicMemory("t", store=store, collection="episodic", settings=EpisodicSettings())
    per = turns // sessions
    for s in range(sessions):
        inputs = [
            TurnInput(user=f"turn {i} about topic {i % 97} and word{i % 13}",
                      timestamp=T0 + timedelta(seconds=s * per + i))
            for i in range(per)
        ]
        prepared = memory.prepare(f"s{s}", inputs, now=T0)
        vectors = rng.standard_normal((len(prepared), 384)).astype(np.float32)
        memory.record(prepared, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return memory


def main() -> None:
    rng = np.random.default_rng(0)
    for turns, sessions in [(2000, 1), (8000, 1), (8000, 80)]:
        memory = _tenant(turns, sessions, rng)
        took, searched = [], []
        query = rng.standard_normal(384).astype(np.float32)
        for k in range(20):
            session = f"s{k % sessions}"
            middle = memory.session_turns(session)[len(memory.session_turns(session)) // 2]
            start = time.perf_counter()
            keys = memory.turn_keys(session, middle.turn_id)
            memory.delete_keys(*keys)
            memory.drop_keys(*keys)
            took.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            memory.search(query / np.linalg.norm(query), query_text="topic 12 word3", top_k=16)
            searched.append((time.perf_counter() - start) * 1000)
        print(f"{turns} turns in {sessions} session(s): forgetting one turn p50 {median(took):.2f} ms, "
              f"the search after it {median(searched):.2f} ms")


if __name__ == "__main__":
    main()
