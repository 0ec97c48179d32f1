"""The HTTP clients' retries (issue 45: a 429 reached the caller at once, "retry in 0.00 s"),
both clients against a scripted server on loopback: Retry-After honoured, attempts and total wait
bounded, and a write without an Idempotency-Key never sent twice."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, TypeVar

import pytest

from strata.errors import RateLimited, StoreUnavailable
from strata.schema import RecordTurnsResult, SessionList
from strata_actors.client import InClusterClient
from strata_serve.client import AsyncStrataClient, StrataClient
from strata_serve.retry import NO_RETRY, Retry, parse_retry_after
from tests.strata_server import strata_server


def call(kind: str, url: str, method: str, *, retry: Retry, idempotency_keys: bool = True) -> float:
    """``method`` of the ``kind`` client ("sync" or "async") with no arguments but its session;
    returns the seconds it took (the call's own error raised)."""
    args: dict[str, tuple[Any, ...]] = {"list_sessions": (), "search": ("q",), "forget_session": ("s1",)}
    start = time.monotonic()
    if kind == "sync":
        with StrataClient(url, "sk-x", retry=retry, idempotency_keys=idempotency_keys) as client:
            getattr(client, method)(*args[method])
    else:

        async def run() -> None:
            async with AsyncStrataClient(url, "sk-x", retry=retry, idempotency_keys=idempotency_keys) as client:
                await getattr(client, method)(*args[method])

        asyncio.run(run())
    return time.monotonic() - start


CLIENTS = pytest.mark.parametrize("kind", ["sync", "async"])
#: No jitter: a retry waits exactly what the server's Retry-After says.
EXACT = Retry(base_delay_s=0.0)


@CLIENTS
def test_a_429_is_retried_after_its_retry_after(kind: str) -> None:
    with strata_server(lambda n: (429, "0.3") if n == 0 else None) as (url, seen):
        took_s = call(kind, url, "list_sessions", retry=EXACT)
    assert len(seen) == 2 and 0.3 <= took_s < 2.0


@CLIENTS
def test_a_write_is_retried_with_the_same_idempotency_key(kind: str) -> None:
    with strata_server(lambda n: (503, "0") if n < 2 else None) as (url, seen):
        call(kind, url, "forget_session", retry=EXACT)
    keys = {key for _, _, key in seen}
    assert len(seen) == 3 and len(keys) == 1 and None not in keys


@CLIENTS
def test_retries_are_bounded_in_attempts_and_in_total_wait(kind: str) -> None:
    with strata_server(lambda n: (503, "0")) as (url, seen), pytest.raises(StoreUnavailable):
        call(kind, url, "list_sessions", retry=Retry(max_attempts=3, base_delay_s=0.01))
    assert len(seen) == 3
    # A Retry-After past the total wait is not waited for: the error comes at once.
    with strata_server(lambda n: (429, "5")) as (url, seen), pytest.raises(RateLimited):
        took_s = call(kind, url, "list_sessions", retry=Retry(max_total_wait_s=2.0))
        raise AssertionError(f"answered after {took_s:.1f} s")
    assert len(seen) == 1


@CLIENTS
def test_a_write_without_an_idempotency_key_is_not_retried_and_a_read_is(kind: str) -> None:
    with strata_server(lambda n: (503, "0")) as (url, seen), pytest.raises(StoreUnavailable):
        call(kind, url, "forget_session", retry=EXACT, idempotency_keys=False)
    assert seen == [("DELETE", "/v1/sessions/s1", None)]
    with strata_server(lambda n: (503, "0") if n == 0 else None) as (url, seen):  # a search reads: no key
        call(kind, url, "search", retry=EXACT, idempotency_keys=False)
    assert seen == [("POST", "/v1/search", None)] * 2


def test_retry_after_reads_seconds_and_dates_and_backoff_is_capped() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0 and parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after(format_datetime(now + timedelta(seconds=7), usegmt=True), now=now) == 7.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=7), usegmt=True), now=now) == 0.0
    assert [parse_retry_after(v) for v in (None, "-1", "soon", "nan")] == [None] * 4
    policy = Retry(base_delay_s=0.25, max_delay_s=1.0)
    assert [policy.backoff_s(n, draw=lambda: 1.0) for n in (1, 2, 3, 4)] == [0.25, 0.5, 1.0, 1.0]
    assert policy.backoff_s(1, 2.0, draw=lambda: 0.0) == 2.0  # never sooner than Retry-After
    with pytest.raises(ValueError, match="max_attempts"):
        Retry(max_attempts=0)

_T = TypeVar("_T")


class _Restarting:
    """The in-cluster client's boundary to the layer actors (``Orchestration``): each call meets
    a restarting actor ``refusals`` times, then answers."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.calls = refusals, 0

    async def _answer(self, answer: _T) -> _T:
        self.calls += 1
        if self.calls <= self.refusals:
            raise StoreUnavailable("a memory layer actor is restarting; retry shortly", retry_after_s=0.05)
        return answer

    async def list_sessions(self, tenant: str, **_: Any) -> SessionList:
        return await self._answer(SessionList(sessions=[], total=0))

    async def record_turns(self, tenant: str, session_id: str, turns: Any, **_: Any) -> RecordTurnsResult | None:
        return await self._answer(None)


def _in_cluster(flow: _Restarting, retry: Retry) -> InClusterClient:
    client = InClusterClient.__new__(InClusterClient)  # no embedder, no Ray: only the boundary faked
    client._tenant, client._retry, client._flow = "t1", retry, flow  # type: ignore[assignment]
    return client


async def test_the_in_cluster_client_retries_a_read_after_a_503_and_never_a_write() -> None:
    flow = _Restarting(refusals=2)
    assert (await _in_cluster(flow, EXACT).list_sessions()).total == 0 and flow.calls == 3
    with pytest.raises(StoreUnavailable):
        await _in_cluster(_Restarting(refusals=1), NO_RETRY).list_sessions()
    writes = _Restarting(refusals=1)
    with pytest.raises(StoreUnavailable):
        await _in_cluster(writes, EXACT).record_turns("s1", [{"user": "hi"}])
    assert writes.calls == 1
