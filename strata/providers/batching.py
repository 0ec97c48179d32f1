"""Concurrent queries share one model call.

A query that arrives while another is being embedded waits for that call and joins the
next batch with every other query that arrived meanwhile; a query that arrives when the
model is idle starts at once, so a lone caller waits for nothing. One model call for k
short texts costs far less than k calls (the per-call overhead of the runtime and the
tokenizer dominate a 10-word query), and the calls run in a worker thread, never on the
event loop that accepts requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["EmbedBatcher"]


class EmbedBatcher:
    """Batches concurrent :meth:`embed` calls of single texts into model calls of up to ``max_batch``.

    Args:
        embed: the model call, texts in, one row per text out (an :class:`~strata.providers.embedder.Embedder`'s
            ``embed_query``). It runs in a worker thread, one call at a time.
        max_batch: the most texts one model call takes.

    Example:
        >>> batcher = EmbedBatcher(embedder.embed_query)
        >>> vector = await batcher.embed("where do I live?")
    """

    def __init__(self, embed: Callable[[Sequence[str]], np.ndarray], *, max_batch: int = 32) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._embed = embed
        self._max_batch = max_batch
        self._pending: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        self._draining: asyncio.Task[None] | None = None
        #: Model calls made and texts embedded, for the benchmark and the tests.
        self.calls = 0
        self.texts = 0

    async def embed(self, text: str) -> np.ndarray:
        """The vector of ``text``; raises what the model call raised."""
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._pending.append((text, future))
        if self._draining is None or self._draining.done():
            self._draining = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
            self.calls += 1
            self.texts += len(batch)
            try:
                vectors = await asyncio.to_thread(self._embed, [text for text, _ in batch])
            except Exception as exc:  # noqa: BLE001 - every waiter gets the model's error, whatever it is
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), vector in zip(batch, vectors, strict=True):
                if not future.done():  # its caller may have been cancelled meanwhile
                    future.set_result(vector)
