"""Concurrent queries share one model call.

A query that arrives while another is being embedded waits for that call and joins the
next batch with every other query that arrived meanwhile; a query that arrives when the
model is idle starts at once, so a lone caller waits for nothing. One model call for k
short texts costs far less than k calls (the per-call overhead of the runtime and the
tokenizer dominate a 10-word query), and the calls run in a worker thread, never on the
event loop that accepts requests.

A model call pads every text to the longest in it, so a long text must not share a call with
short ones: one 16,000-character query beside seven ten-word ones made all eight cost as much
as the long one (about 60 ms each on one core here, instead of about 5). :func:`length_groups`
cuts a batch into calls whose rows are within twice the shortest row's length, and the
batcher answers the shorter calls first.

Long texts are embedded in a thread of their own at a lower CPU priority
(:data:`EmbedBatcher.LONG_NICE`, Linux): when the cores are busy, a message of the maximum
length, five times a question's model time, takes the cycles the questions leave rather than
a share of theirs. The model and the tokenizer release the GIL while they run, so the
thread's priority does not hold up the other threads of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeAlias

import numpy as np

__all__ = ["EmbedBatcher", "length_groups"]

#: A model call: texts in, one row per text out; or the rows and the tokens read of each text
#: (:func:`~strata.providers.embedder.embed_counted`).
ModelCall: TypeAlias = Callable[[Sequence[str]], "np.ndarray | tuple[np.ndarray, list[int]]"]


def length_groups(lengths: Sequence[int], *, max_batch: int, slack: int) -> list[list[int]]:
    """Indices of ``lengths``, shortest first, cut into groups of at most ``max_batch`` in which
    no length exceeds twice the group's shortest, or the shortest plus ``slack`` (below which
    padding costs less than a call's own overhead). A group padded to its longest thus costs
    at most twice its rows' own length plus ``slack`` each; the work of a batch stays linear
    in what its texts hold whatever mix of lengths arrives together."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if groups:
            group = groups[-1]
            shortest = lengths[group[0]]
            if len(group) < max_batch and lengths[i] <= max(2 * shortest, shortest + slack):
                group.append(i)
                continue
        groups.append([i])
    return groups


class EmbedBatcher:
    """Batches concurrent :meth:`embed` calls of single texts into model calls of up to ``max_batch``.

    Args:
        embed: the model call, texts in, one row per text out (an :class:`~strata.providers.embedder.Embedder`'s
            ``embed_query``), or the rows and the tokens of each text (``embed_counted``,
            whose counts :meth:`embed_counted` answers). It runs in a worker thread, one call at a time per lane
            (short texts, long ones: :data:`LONG_CHARS`); it must allow two at once.
        max_batch: the most texts one model call takes.

    Example:
        >>> batcher = EmbedBatcher(embedder.embed_query)
        >>> vector = await batcher.embed("where do I live?")
    """

    #: Characters under which a text's length does not decide its call (a few tokens of padding).
    SLACK_CHARS = 64
    #: A text this long or longer queues in a lane of its own, beside the short ones' (each
    #: lane one model call at a time): a question must not wait behind a message of the
    #: maximum length, ~28 ms of model here (~80 before queries were cut to
    #: ``embedding.query_max_tokens``) against ~5 ms for a question (docs/benchmarks.md, the
    #: hostile neighbour).
    LONG_CHARS = 1024
    #: How much nicer than the process the long lane's thread runs (Linux; 10 gives it about a
    #: tenth of a core that a busy thread of niceness 0 also wants).
    LONG_NICE = 10

    def __init__(self, embed: ModelCall, *, max_batch: int = 32) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._embed = embed
        self._max_batch = max_batch
        self._long_thread: ThreadPoolExecutor | None = None  # made with the first long text
        #: Per lane (short texts, long ones): texts waiting for the next call, and the task calling.
        self._pending: tuple[list[tuple[str, asyncio.Future[tuple[np.ndarray, int]]]], ...] = ([], [])
        self._draining: list[asyncio.Task[None] | None] = [None, None]
        #: Model calls made and texts embedded, for the benchmark and the tests.
        self.calls = 0
        self.texts = 0

    async def embed(self, text: str) -> np.ndarray:
        """The vector of ``text``; raises what the model call raised."""
        return (await self.embed_counted(text))[0]

    async def embed_counted(self, text: str) -> tuple[np.ndarray, int]:
        """The vector of ``text`` and the tokens the model read of it (0 from a model call
        that does not count them)."""
        future: asyncio.Future[tuple[np.ndarray, int]] = asyncio.get_running_loop().create_future()
        lane = int(len(text) >= self.LONG_CHARS)
        self._pending[lane].append((text, future))
        draining = self._draining[lane]
        if draining is None or draining.done():
            self._draining[lane] = asyncio.create_task(self._drain(self._pending[lane]))
        return await future

    async def _drain(self, queue: list[tuple[str, asyncio.Future[tuple[np.ndarray, int]]]]) -> None:
        while queue:
            pending = queue[:]
            queue.clear()
            lengths = [len(text) for text, _ in pending]
            groups = length_groups(lengths, max_batch=self._max_batch, slack=self.SLACK_CHARS)
            # The shortest call first; texts that arrive meanwhile queue for the next round.
            for group in groups:
                await self._call([pending[i] for i in group], long=queue is self._pending[1])

    async def _call(self, batch: list[tuple[str, asyncio.Future[tuple[np.ndarray, int]]]], *, long: bool) -> None:
        self.calls += 1
        self.texts += len(batch)
        texts = [text for text, _ in batch]
        try:
            if long:
                if self._long_thread is None:
                    self._long_thread = ThreadPoolExecutor(
                        max_workers=1,
                        thread_name_prefix="strata-long-embed",
                        initializer=_nicer,
                        initargs=(self.LONG_NICE,),
                    )
                answer = await asyncio.get_running_loop().run_in_executor(self._long_thread, self._embed, texts)
            else:
                answer = await asyncio.to_thread(self._embed, texts)
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        vectors, tokens = answer if isinstance(answer, tuple) else (answer, [0] * len(texts))
        for (_, future), vector, n in zip(batch, vectors, tokens, strict=True):
            if not future.done():  # its caller may have been cancelled meanwhile
                future.set_result((vector, n))


def _nicer(by: int) -> None:
    """Lower the calling thread's CPU priority by ``by`` (Linux, where a thread has its own;
    elsewhere the call would name a process)."""
    if sys.platform != "linux" or not by:
        return
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, thread, min(os.getpriority(os.PRIO_PROCESS, thread) + by, 19))
