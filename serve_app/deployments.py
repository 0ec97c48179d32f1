"""The Serve deployment behind the HTTP ingress: embedding, batched.

The ingress (:class:`strata_serve.api.Api`) does a request's work itself, with
:class:`strata_actors.orchestration.Orchestration`: it embeds a query in its own process
(``serve.query_embedding``), and sends batches of turns here, where replicas batch
concurrent requests with ``@serve.batch`` and run the model off their event loop.

The model runs in as many threads as the replica has cores, not in asyncio's default executor
(up to six threads here): more model calls at once than cores embed no faster on their own,
and each holds its own activations, which the allocator keeps. On a scratch stack, 5,800 turns
from eight writers grew the replica by 187-197 MiB instead of 327-376, at 158-175 turns/s
instead of 173-183 (the extra threads took a larger share of cores the shards also want;
docs/benchmarks.md, "The embedding replica's memory").
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from ray import serve

from strata.config import StrataSettings
from strata.providers.embedder import Counted, Embedder, embed_counted, make_embedder

__all__ = ["Embedding"]


def _cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@serve.deployment(name="embedding", ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=256)
class Embedding:
    def __init__(self, settings: dict[str, Any]) -> None:
        config = StrataSettings.from_dict(settings)
        self._embedder: Embedder = make_embedder(config.embedding)
        calls = 32 if getattr(self._embedder, "waits_on_network", False) else _cores()
        self._model = ThreadPoolExecutor(max_workers=calls, thread_name_prefix="strata-embed")
        # @serve.batch adds these setters at run time; its annotations type the plain coroutine.
        for batched in (self._embed_batch, self._embed_query_batch):
            batched.set_max_batch_size(config.serve.embedding_max_batch_size)  # type: ignore[attr-defined]
            batched.set_batch_wait_timeout_s(config.serve.embedding_batch_wait_timeout_s)  # type: ignore[attr-defined]

    async def _run(self, texts: list[str], *, query: bool) -> Counted:
        model = functools.partial(embed_counted, self._embedder, texts, query=query)
        return await asyncio.get_running_loop().run_in_executor(self._model, model)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _embed_batch(self, texts: list[str]) -> list[tuple[np.ndarray, int]]:
        vectors, tokens = await self._run(texts, query=False)
        return list(zip(vectors, tokens, strict=True))

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _embed_query_batch(self, texts: list[str]) -> list[tuple[np.ndarray, int]]:
        vectors, tokens = await self._run(texts, query=True)
        return list(zip(vectors, tokens, strict=True))

    async def embed(self, texts: Sequence[str]) -> Counted:
        """Embed stored texts (turns), and say how many tokens the model read of each (the
        caller counts them for its tenant): a single one joins a batch with other callers'
        texts; several are embedded together, sorted by length, so each batch pads to texts of
        like length instead of to whichever came in with them."""
        if len(texts) > 1:
            return await self._run(list(texts), query=False)
        return self._stacked(await asyncio.gather(*(self._embed_batch(t) for t in texts)))

    async def embed_query(self, texts: Sequence[str]) -> Counted:
        """Embed queries (``serve.query_embedding: deployment``), batched as :meth:`embed`."""
        if len(texts) > 1:
            return await self._run(list(texts), query=True)
        return self._stacked(await asyncio.gather(*(self._embed_query_batch(t) for t in texts)))

    def _stacked(self, rows: Sequence[tuple[np.ndarray, int]]) -> Counted:
        if not rows:
            return np.zeros((0, self._embedder.dim), np.float32), []
        return np.stack([vector for vector, _ in rows]), [n for _, n in rows]
