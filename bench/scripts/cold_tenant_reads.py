"""What a cold tenant's first search costs in each layer, on the store given: the episodic,
working and semantic shards of a small tenant made cold (new shard objects, the store open),
then searched at once, as a context call does; then the same calls warm. Each store call is
listed with its duration and when it ended, so reads made in turn show as steps.

On a Milvus server every read of a cold load is a strong read that waits for the server's next
time tick (``proxy.timeTickInterval``, 200 ms by default); on milvus-lite they cost a few ms.

Run from the repository root, against a server (``user:password`` or an API key in the file)::

    python -m strata_bench.scripts.cold_tenant_reads --milvus-uri http://127.0.0.1:19530 \\
        --milvus-token-file token.txt [--runs 3]

The real shard classes run in this process (no Ray), with the packaged embedding model; the
tenant's rows go into collections of a random prefix, dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strata.config import load_settings
from strata.providers.embedder import make_embedder
from strata.store.milvus import MilvusRecordStore

_CALLS: list[tuple[str, float, float]] = []


def _timed(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            ended = time.perf_counter()
            _CALLS.append((name, (ended - started) * 1000, ended))

    return timed


for _name in ("scan", "get", "upsert", "delete"):
    setattr(MilvusRecordStore, _name, _timed(_name, getattr(MilvusRecordStore, _name)))


async def _run(settings: dict[str, Any], runs: int) -> None:
    from strata_actors.episodic import EpisodicShard
    from strata_actors.semantic import SemanticShard
    from strata_actors.working import WorkingShard

    # A shard is a process of its own in a stack, each with its own worker threads.
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(32))
    query = "where did Ann hike?"
    tenant = "cold-probe"
    turns = [{"user": f"I hiked the ridge trail number {n} with my sister", "speaker": "Ann"} for n in range(20)]
    await EpisodicShard(settings, 0).record_turns(tenant, "s1", turns)
    notes = [{"role": "user", "content": f"note {n}"} for n in range(5)]
    await WorkingShard(settings, 0).add_items(tenant, "s1", notes)
    doc = {"text": "# Trails\n\nAnn hiked the ridge trail in May. " * 20, "doc_id": "trails", "title": "Trails"}
    await SemanticShard(settings, 0).index_document(tenant, doc)
    vector = make_embedder(load_settings(None, **settings).embedding).embed_query([query])[0]

    for run in range(1, runs + 1):
        shards = (EpisodicShard(settings, 0), WorkingShard(settings, 0), SemanticShard(settings, 0))
        for shard in shards:
            await shard._backend()  # the store is open in a running shard: not part of a cold call
        episodic, working, semantic = shards
        for state in ("cold", "warm"):
            _CALLS.clear()
            started = time.perf_counter()

            async def timed(name: str, call: Any) -> str:
                t0 = time.perf_counter()
                await call
                return f"{name} {(time.perf_counter() - t0) * 1000:.0f} ms"

            results = await asyncio.gather(
                timed("episodic", episodic.search(tenant, query=query, vector=vector, top_k=16)),
                timed("working", working.get(tenant, "s1", budget_tokens=300)),
                timed("semantic", semantic.search(tenant, query=query, vector=vector, top_k=16)),
            )
            print(f"run {run}, {state}: {', '.join(results)}; all {(time.perf_counter() - started) * 1000:.0f} ms")
            for name, ms, ended in _CALLS:
                print(f"    {name:6} {ms:6.1f} ms, ended at +{(ended - started) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--milvus-uri", required=True)
    parser.add_argument("--milvus-token-file", required=True, type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    prefix = "cold" + uuid.uuid4().hex[:8]
    milvus = {"uri": args.milvus_uri, "token": args.milvus_token_file.read_text().strip(), "collection_prefix": prefix}
    settings = load_settings(None, milvus=milvus)
    try:
        asyncio.run(_run(settings.model_dump(mode="json"), args.runs))
    finally:
        from pymilvus import MilvusClient

        client = MilvusClient(uri=args.milvus_uri, token=milvus["token"])
        for name in client.list_collections():
            if name.startswith(prefix):
                client.drop_collection(name)


if __name__ == "__main__":
    main()
