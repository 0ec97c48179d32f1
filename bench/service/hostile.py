"""The hostile neighbour: the latency phase's concurrent ``/v1/context`` calls once more, while
one more client sends the worst inputs the API has to read, so the clients' p50 / p99 with it
can be set against the latency phase's without it.

The neighbour sends, round after round until the clients are done (it is then cancelled,
mid-request if need be):

1. ``POST /v1/search`` with the bench's own key and each query of :func:`hostile_queries`,
   one after the other: ``MESSAGE_CHARS_MAX`` characters made to make the PII rules
   backtrack (every query is redacted before it is embedded), or the time-expression reader
   try reading after reading; then each text of
   :func:`~strata_bench.service.text.hostile_texts` (random CJK, mixed scripts, emoji,
   combining marks), which a query's segmentation reads;
2. :data:`FLOOD` ``POST /v1/context`` calls at once, each with a different random key of a
   real key's form, so that none is refused on its form before the key store is asked;
3. ``POST /v1/documents`` with a random key of that form and a body of ``max_body_bytes``
   less :data:`BODY_MARGIN_BYTES` that parses and validates as a document
   (:func:`maximal_body`), streamed: it is never whole in this process.

Against a stack on loopback the neighbour connects from :data:`NEIGHBOUR_ADDRESS`, so the
stack's limit on failed keys per client address counts it apart from the clients, as it would
a neighbour on another machine (from the clients' own address, its wrong keys would get the
clients refused too: a figure of the limit, not of isolation).

:func:`text_write_cpu_ms` measures, in this process, what writing each of those texts costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np

from strata.access.keys import KEY_PREFIX
from strata.errors import StrataError
from strata.limits import DOCUMENT_CHARS_MAX, MESSAGE_CHARS_MAX
from strata_bench.service.latency import _timed, cpu_ms_per_unit, stack_cpu_s
from strata_bench.service.sizes import Sizes
from strata_bench.service.text import hostile_texts
from strata_bench.service.timing import summary
from strata_bench.target import RAW
from strata_serve.client import AsyncStrataClient

__all__ = ["BODY_MARGIN_BYTES", "FLOOD", "NEIGHBOUR_ADDRESS", "hostile_queries", "maximal_body", "measure_hostile",
           "text_write_cpu_ms"]

#: Requests with random wrong keys the neighbour sends at once, each round.
FLOOD = 50
#: How far under ``serve.max_body_bytes`` the neighbour's body stays: it must be read, not refused.
BODY_MARGIN_BYTES = 4096
#: The neighbour's source address when the stack's is a loopback one (all of 127/8 is this machine).
NEIGHBOUR_ADDRESS = "127.0.0.2"

_BODY_HEAD = b'{"doc_id": "hostile-neighbour", "text": "'
#: "a" as JSON's six-byte escape: the most parsing per byte a valid document can ask for.
_ESCAPE = b"\\u0061"


def hostile_queries(chars: int = MESSAGE_CHARS_MAX) -> dict[str, str]:
    """Queries of exactly ``chars`` characters, named by the PII rule each is aimed at.

    ``word_separators`` and ``dotted_words``: the key-value rule's ``(?:[A-Za-z0-9]+[_\\-.])*``
    prefix, tried from every word and undone pair by pair looking for a key word that never
    comes (quadratic); ``unterminated_password``: a value that the not-a-value check
    ``[a-z_]*_[a-z_]*$`` tries every split of, failing at the final ``!`` (quadratic);
    ``digit_groups``: the phone, card and id rules on digits that never make a number;
    ``at_signs``: an e-mail candidate at every ``@``; ``unreadable_dates``: a date that does not
    exist, again and again, each a failed reading for the time-expression reader (quadratic in
    the number of them before 041c6e9: 232 ms for this one).
    """

    def fill(unit: str, *, head: str = "", tail: str = "") -> str:
        room = chars - len(head) - len(tail)
        return head + (unit * (room // len(unit) + 1))[:room] + tail

    return {
        "word_separators": fill("a_"),
        "dotted_words": fill("a."),
        "unterminated_password": fill("_", head="password=", tail="!"),
        "digit_groups": fill("1 "),
        "at_signs": fill("a@"),
        "unreadable_dates": fill("31 Nov "),
    }


def _repeat(unit: bytes, count: int, chunk_bytes: int) -> Iterator[bytes]:
    """``unit * count`` in chunks of at most ``chunk_bytes`` (one chunk object, yielded again)."""
    per = max(1, chunk_bytes // len(unit))
    block = unit * per
    full, rest = divmod(count, per)
    for _ in range(full):
        yield block
    if rest:
        yield unit * rest


def maximal_body(size_bytes: int, *, chunk_bytes: int = 2**20) -> Iterator[bytes]:
    """A ``POST /v1/documents`` body of exactly ``size_bytes``, in chunks of at most ``chunk_bytes``.

    The text is up to ``DOCUMENT_CHARS_MAX`` characters, each written as a six-byte JSON
    escape, and whitespace (JSON allows it between tokens) fills the rest: the body parses and
    validates as a document, so a server that reads it before the key has to do all of that.

    Raises:
        ValueError: ``size_bytes`` cannot hold the JSON around one character.
    """
    room = size_bytes - len(_BODY_HEAD) - 2  # the closing quote and brace
    chars = min(DOCUMENT_CHARS_MAX, room // len(_ESCAPE))
    if chars < 1:
        raise ValueError(f"a document body needs at least {len(_BODY_HEAD) + 2 + len(_ESCAPE)} bytes")
    yield _BODY_HEAD
    yield from _repeat(_ESCAPE, chars, chunk_bytes)
    yield b'"'
    yield from _repeat(b" ", room - chars * len(_ESCAPE), chunk_bytes)
    yield b"}"


async def _streamed(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def _random_key() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY_PREFIX}{secrets.token_urlsafe(24)}"}


class _Neighbour:
    """One client sending :func:`hostile_queries`, a flood of wrong keys and a maximal body, round
    after round; what each kind of request got back (status codes, or the transport error's
    name) and its latencies."""

    KINDS = ("search", "bad_keys", "maximal_body")

    def __init__(self, url: str, key: str, session: str, *, body_bytes: int, flood: int = FLOOD,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=url, timeout=120, transport=transport)
        self._key, self._session, self._body_bytes, self._flood = key, session, body_bytes, flood
        self._queries = {**hostile_queries(), **hostile_texts()}
        self._ms: dict[str, list[float]] = {kind: [] for kind in self.KINDS}
        self._outcomes: dict[str, Counter[str]] = {kind: Counter() for kind in self.KINDS}
        self._rounds = 0

    async def _send(self, kind: str, request: Awaitable[httpx.Response]) -> None:
        t0 = time.perf_counter()
        try:
            outcome = str((await request).status_code)
        except httpx.HTTPError as exc:  # a server may close the connection on a body it will not read
            outcome = type(exc).__name__
        self._ms[kind].append((time.perf_counter() - t0) * 1000)
        self._outcomes[kind][outcome] += 1

    async def run(self) -> None:
        """Round after round, until cancelled."""
        own = {"Authorization": f"Bearer {self._key}"}
        while True:
            for query in self._queries.values():
                body = {"query": query, "layers": ["episodic", "semantic"], "top_k": 10}
                await self._send("search", self._http.post("/v1/search", json=body, headers=own))
            ask = {"message": "what did we decide?", "session_id": self._session}
            flood = (self._http.post("/v1/context", json=ask, headers=_random_key()) for _ in range(self._flood))
            await asyncio.gather(*(self._send("bad_keys", request) for request in flood))
            headers = {**_random_key(), "Content-Type": "application/json", "Content-Length": str(self._body_bytes)}
            await self._send("maximal_body", self._http.post(
                "/v1/documents", content=_streamed(maximal_body(self._body_bytes)), headers=headers))
            self._rounds += 1

    def report(self) -> dict[str, Any]:
        kinds = {kind: {**summary(self._ms[kind]), "statuses": dict(sorted(self._outcomes[kind].items()))}
                 for kind in self.KINDS}
        return {**kinds, "rounds_completed": self._rounds, "query_chars": MESSAGE_CHARS_MAX,
                "queries": list(self._queries), "body_bytes": self._body_bytes, "flood": self._flood}

    async def aclose(self) -> None:
        await self._http.aclose()


async def measure_hostile(url: str, key: str, queries: list[str], session: str, sizes: Sizes, *,
                          body_bytes: int, pids: Callable[[], Sequence[int]] | None = None) -> dict[str, Any]:
    """The latency phase's ``sizes.clients`` concurrent ``/v1/context`` calls again, with the
    neighbour (module docstring) sending from the first call to the last.

    A client's call that fails (a 429 of a rate limit, a timeout) is counted in ``errors`` by
    its error class, and its time stays among the latencies. With ``pids`` (the stack's
    processes), the CPU the stack spent over the phase is reported per client call, in all
    and by kind of process: what the neighbour cost is that less the latency phase's.

    Args:
        body_bytes: the size of the neighbour's maximal body (``serve.max_body_bytes`` less
            :data:`BODY_MARGIN_BYTES`).
    """
    clients = [AsyncStrataClient(url, key, timeout_s=120, **RAW) for _ in range(sizes.clients)]
    errors: Counter[str] = Counter()
    turn = [0]

    def context(q: str) -> Callable[[], Awaitable[Any]]:
        async def call() -> Any:
            turn[0] += 1
            try:
                return await clients[turn[0] % len(clients)].build_context(q, session, task_type="planning")
            except (StrataError, httpx.HTTPError) as exc:
                errors[type(exc).__name__] += 1
                return None
        return call

    calls = [context(queries[i % len(queries)]) for i in range(sizes.clients * sizes.calls_per_client)]
    apart = httpx.URL(url).host.startswith("127.")
    transport = httpx.AsyncHTTPTransport(local_address=NEIGHBOUR_ADDRESS) if apart else None
    neighbour = _Neighbour(url, key, session, body_bytes=body_bytes, transport=transport)
    running = asyncio.create_task(neighbour.run())
    try:
        before, started = stack_cpu_s(pids), time.perf_counter()
        ms, missing = await _timed(calls, sizes.clients, f"{sizes.clients} clients, context, with the neighbour")
        seconds = time.perf_counter() - started
        cpu_per_call, by_process = cpu_ms_per_unit(before, stack_cpu_s(pids), len(ms))
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running  # re-raises what made the neighbour stop early, if anything did
        await asyncio.gather(neighbour.aclose(), *(c.aclose() for c in clients))
    return {
        "clients": sizes.clients,
        "context": {**summary(ms), "calls_per_s": round(len(ms) / seconds, 1), "calls_with_missing_layers": missing,
                    "errors": dict(sorted(errors.items())), "stack_cpu_ms_per_call": cpu_per_call,
                    "cpu_ms_per_call_by_process": by_process},
        "neighbour": {**neighbour.report(), "source_address": NEIGHBOUR_ADDRESS if apart else "the clients' own"},
    }


def text_write_cpu_ms(embedder: Any, settings: Any, *, chars: int = MESSAGE_CHARS_MAX) -> dict[str, dict[str, Any]]:
    """CPU milliseconds, in this process, to write each text of :func:`hostile_texts` (other
    scripts) and of :func:`hostile_queries` (the English worst cases) as a turn, and its text
    work as a document.

    A turn is redacted by the PII rules, embedded, prepared (its entities) and recorded by an
    episodic layer over an :class:`~strata.store.records.InMemoryRecordStore`, and added to a
    session's working memory: a stack's write without Ray or HTTP. A document is cut, its
    children's entities extracted, written and indexed by a semantic layer, with one vector for
    every child instead of the embedder's: the embedder's cost is per child whatever the text
    (the ingest phase's floor), and ``children`` says how many it would embed. The CPU of every
    thread of the process counts.
    """
    from strata.config import PII_TYPES
    from strata.episodic.turns import TurnInput
    from strata.privacy.pii import RuleDetector
    from strata.privacy.redaction import Redactor
    from strata.providers.tokens import TiktokenCounter
    from strata.semantic.documents import DocumentInput
    from strata.store.layout import Collections
    from strata.store.records import InMemoryRecordStore
    from strata.working.memory import WorkingMemory
    from strata_bench.service.floor import _layers

    store, collections = InMemoryRecordStore(), Collections.for_settings(settings)
    for name in (collections.episodic, collections.semantic):
        store.ensure_collection(name, dim=collections.dim)
    layers = _layers("hostile-text", settings, store, collections)
    redactor = Redactor(RuleDetector(), dict.fromkeys(PII_TYPES, "mask"), hash_key=b"bench")
    counter = TiktokenCounter(settings.working.encoding)
    unit = np.full(collections.dim, collections.dim**-0.5, dtype=np.float32)
    now = datetime.now(UTC)

    def turn(name: str, text: str) -> int:
        said = redactor.redact(text).text
        prepared = layers.episodic.prepare(f"s-{name}", [TurnInput(user=said)], now=now)
        layers.episodic.record(prepared, embedder.embed([said]))
        WorkingMemory(counter=counter).add("user", said, now=now)
        return 1

    def document(name: str, text: str) -> int:
        prepared = layers.semantic.prepare(DocumentInput(text=text, doc_id=f"d-{name}"), now=now)
        vectors = np.tile(unit, (len(prepared.embed_texts()), 1))
        layers.semantic.write(prepared, vectors)
        layers.semantic.index(prepared, vectors)
        return len(vectors)

    def cpu_ms(write: Callable[[str, str], int], name: str, text: str) -> tuple[float, int]:
        started = time.process_time()
        count = write(name, text)
        return round((time.process_time() - started) * 1000, 1), count

    turn("warm-up", "我的上司名叫赵雅琳。She works at Acme Labs in Lisbon.")  # models and dictionaries loaded
    out: dict[str, dict[str, Any]] = {}
    texts = {**hostile_texts(chars), **{f"english_{name}": text for name, text in hostile_queries(chars).items()}}
    for name, text in texts.items():
        turn_ms, _ = cpu_ms(turn, name, text)
        document_ms, children = cpu_ms(document, name, text)
        out[name] = {"chars": len(text), "turn_ms": turn_ms, "document_ms": document_ms, "document_children": children}
    return out
