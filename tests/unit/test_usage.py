"""Usage: the process's counter, its flush to the store's state collection (two processes'
rows summed, a failed flush kept for the next), the window checks, the items count, the
middleware that counts a tenant route by its key's tenant, and tokens counted for the tenant
whose work embedded them or sent them to the LLM."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Header

from strata.access.keys import KeyStore
from strata.access.usage import HOUR_S, USAGE_KIND, UsageCounter, Window, counts_from_rows, held_items
from strata.config import AuthSettings, EmbeddingSettings, ServeSettings, StrataSettings
from strata.counting import count_tokens, on_behalf_of, working_for
from strata.errors import InvalidInput, StoreUnavailable
from strata.ids import SYSTEM_TENANT
from strata.providers.embedder import OnnxMiniLMEmbedder, embed_counted, make_embedder
from strata.store.layout import Collections
from strata.store.records import InMemoryRecordStore, Record
from strata_actors.shard import LayerShard
from strata_serve.auth import Authenticate, KeyGate
from strata_serve.errors import install_handlers
from strata_serve.usage import CountCalls, UsageBook

T0 = 1_800_000_000.0  # an hour's start plus 2,400 s
NAMES = Collections(episodic="ep", semantic="sem", procedural="proc", state="state", keys="keys", dim=4)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class FlakyStore(InMemoryRecordStore):
    def __init__(self) -> None:
        super().__init__()
        self.down = False
        for name in ("ep", "sem", "proc", "state", "keys"):
            self.ensure_collection(name, dim=4)

    def upsert(self, collection: str, records: Sequence[Record]) -> None:
        if self.down:
            raise StoreUnavailable("Milvus does not answer")
        super().upsert(collection, records)


def usage_rows(store: InMemoryRecordStore) -> list[Record]:
    return store.scan("state", tenant=SYSTEM_TENANT, kinds=[USAGE_KIND], with_vectors=False)


ALL = Window(since=0, until=2**40)


def test_two_replicas_write_rows_of_their_own_and_a_read_sums_them() -> None:
    store, clock = FlakyStore(), Clock()
    a, b = UsageCounter(replica="a", clock=clock), UsageCounter(replica="b", clock=clock)
    for _ in range(3):
        a.count("acme", "search")
    b.count("acme", "search")
    b.count("acme", "record_turn")
    b.count("other", "search")
    assert a.flush(store, "state") == 1 and b.flush(store, "state") == 2
    a.count("acme", "search")  # the same bucket again: the row is rewritten with the running total
    assert a.flush(store, "state") == 1
    assert a.flush(store, "state") == 0  # nothing new: no write
    hour = int(T0) // HOUR_S * HOUR_S
    assert counts_from_rows(usage_rows(store), ALL) == {
        "acme": {hour: {"search": 5, "record_turn": 1}},
        "other": {hour: {"search": 1}},
    }
    clock.now += HOUR_S  # the next hour is a bucket of its own
    a.count("acme", "search")
    a.flush(store, "state")
    calls = counts_from_rows(usage_rows(store), ALL)["acme"]
    assert calls == {hour: {"search": 5, "record_turn": 1}, hour + HOUR_S: {"search": 1}}
    assert counts_from_rows(usage_rows(store), Window(since=hour + HOUR_S, until=hour + 2 * HOUR_S)) == {
        "acme": {hour + HOUR_S: {"search": 1}}
    }


def test_a_failed_flush_keeps_the_counts_for_the_next() -> None:
    store, clock = FlakyStore(), Clock()
    counter = UsageCounter(replica="a", clock=clock)
    counter.count("acme", "search")
    store.down = True
    with pytest.raises(StoreUnavailable):
        counter.flush(store, "state")
    counter.count("acme", "search")
    store.down = False
    assert counter.flush(store, "state") == 1
    assert counts_from_rows(usage_rows(store), ALL)["acme"] == {int(T0) // HOUR_S * HOUR_S: {"search": 2}}


def test_a_bucket_counted_while_its_row_was_written_stays_due() -> None:
    store, clock = FlakyStore(), Clock()
    counter = UsageCounter(replica="a", clock=clock)
    counter.count("acme", "search")
    rows = counter.pending()
    store.upsert("state", rows)
    counter.count("acme", "search")  # between the write and its mark
    counter.written(rows)
    assert counter.flush(store, "state") == 1
    assert counts_from_rows(usage_rows(store), ALL)["acme"] == {int(T0) // HOUR_S * HOUR_S: {"search": 2}}


def test_old_buckets_are_let_go_once_written() -> None:
    store, clock = FlakyStore(), Clock()
    counter = UsageCounter(replica="a", clock=clock)
    counter.count("acme", "search")
    counter.flush(store, "state")
    clock.now += 5 * HOUR_S
    counter.count("acme", "search")
    counter.flush(store, "state")
    assert [r.payload["calls"] for r in counter.pending()] == []
    assert len(counter._buckets) == 1


def test_a_window_is_whole_hours_and_a_bad_one_names_its_field() -> None:
    now = datetime(2026, 12, 7, 5, 30, tzinfo=UTC)
    w = Window.resolve(None, None, now=now)
    assert (w.until - w.since) == 25 * HOUR_S and w.until == int(datetime(2026, 12, 7, 6, tzinfo=UTC).timestamp())
    naive = Window.resolve(datetime(2026, 12, 7, 1, 15), datetime(2026, 12, 7, 1, 15), now=now)
    assert naive.until - naive.since == HOUR_S  # an empty window still reads its hour
    with pytest.raises(InvalidInput) as after:
        Window.resolve(now, now - timedelta(hours=1), now=now)
    assert after.value.details["field"] == "since" and "after until" in after.value.message
    with pytest.raises(InvalidInput) as long:
        Window.resolve(now - timedelta(days=40), now, now=now)
    assert "at most 31 days" in long.value.message


def test_items_held_are_counted_per_layer_for_one_tenant() -> None:
    store = FlakyStore()

    def row(collection: str, tenant: str, session: str, kind: str, n: int, text: str = "x") -> None:
        store.upsert(collection, [Record(pk=f"{tenant}/{kind}/{session}/{i}", tenant=tenant, session=session,
                                         kind=kind, ts_ms=0, text=text, payload={"n": i}) for i in range(n)])

    row("ep", "acme", "s1", "turn", 3)
    row("ep", "acme", "s2", "turn", 2)
    row("ep", "acme", "s1", "summary", 1)
    row("ep", "acme", "s1", "passage", 2, text="日志")  # a long turn's passages: bytes, not items
    row("ep", "other", "s1", "turn", 7)
    row("sem", "acme", "d1", "doc", 1)
    row("sem", "acme", "d1", "parent", 2)
    row("sem", "acme", "d1", "child", 4)
    row("proc", "acme", "k1", "skill", 2)
    row("proc", "acme", "k1", "skill_version", 5)
    row("state", "acme", "s1", "working", 6)
    row("state", "acme", "s1", "idempotency", 9)
    row_bytes = len("x") + len('{"n": 0}')  # text and payload, as UTF-8 (one digit of n)
    assert held_items(store, NAMES, "acme") == {
        "working": {"items": 6, "bytes": 6 * row_bytes},
        "episodic": {"turns": 5, "summaries": 1, "sessions": 2, "bytes": 6 * row_bytes + 2 * (6 + 8)},
        "semantic": {"documents": 1, "passages": 4, "bytes": 7 * row_bytes},
        "procedural": {"skills": 2, "bytes": 7 * row_bytes},
    }


# -- the middleware ------------------------------------------------------------------------


def counted_app(store: FlakyStore) -> tuple[FastAPI, KeyStore, UsageBook]:
    keys = KeyStore(store, "keys")
    settings = StrataSettings(auth=AuthSettings(admin_key="sk-configured-admin"), serve=ServeSettings(usage_flush_s=60))
    gate = KeyGate(settings, keys=keys)
    book = UsageBook(settings, backend=(store, NAMES))
    app = FastAPI()
    install_handlers(app)
    app.add_middleware(CountCalls, book=lambda: book)
    app.add_middleware(Authenticate, gate=lambda: gate)

    @app.get("/v1/documents")
    async def list_documents(authorization: str | None = Header(default=None)) -> dict[str, str]:
        return {"tenant": (await gate.caller(authorization, "list_documents")).tenant}

    @app.get("/v1/admin/keys")
    async def admin_list_keys(authorization: str | None = Header(default=None)) -> dict[str, str]:
        await gate.admin(authorization)
        return {}

    return app, keys, book


async def test_the_middleware_counts_tenant_routes_by_the_keys_tenant_and_a_read_flushes_first() -> None:
    store = FlakyStore()
    app, keys, book = counted_app(store)
    acme, other = keys.create("acme"), keys.create("other")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for key, n in ((acme, 3), (other, 1)):
            for _ in range(n):
                answer = await client.get("/v1/documents", headers={"Authorization": f"Bearer {key}"})
                assert answer.status_code == 200
        # an admin route (refused to a tenant key, answered to the admin) is not a tenant's call
        assert (await client.get("/v1/admin/keys", headers={"Authorization": f"Bearer {acme}"})).status_code == 403
        admin = {"Authorization": "Bearer sk-configured-admin"}
        assert (await client.get("/v1/admin/keys", headers=admin)).status_code == 200
        assert (await client.get("/v1/documents")).status_code == 401  # no key: not counted
        assert (await client.get("/v1/nowhere", headers={"Authorization": f"Bearer {acme}"})).status_code == 404
    assert usage_rows(store) == []  # nothing written on the request's path
    calls, _ = await book.counts(ALL, None)
    totals = {t: {r: n for h in hours.values() for r, n in h.items()} for t, hours in calls.items()}
    assert totals == {"acme": {"list_documents": 3}, "other": {"list_documents": 1}}
    assert len(usage_rows(store)) == 2
    await book.aclose()


# -- tokens: counted per tenant where the work says whose it is ------------------------------


def test_tokens_are_rows_of_their_own_group_summed_over_processes() -> None:
    store, clock = FlakyStore(), Clock()
    api, shard = UsageCounter(replica="api", clock=clock), UsageCounter(replica="shard", clock=clock)
    api.count("acme", "record_turns")
    count_tokens("embedding", 40, tenant="acme", counter=api)
    count_tokens("embedding", 12, tenant="acme", counter=shard)
    count_tokens("llm_in", 300, tenant="acme", counter=shard)
    count_tokens("llm_out", 0, tenant="acme", counter=shard)  # nothing: no count
    count_tokens("embedding", 5, counter=shard)  # on behalf of nobody: not counted
    assert api.flush(store, "state") == 1 and shard.flush(store, "state") == 1
    hour = int(T0) // HOUR_S * HOUR_S
    rows = usage_rows(store)
    assert counts_from_rows(rows, ALL, group="tokens") == {"acme": {hour: {"embedding": 52, "llm_in": 300}}}
    assert counts_from_rows(rows, ALL) == {"acme": {hour: {"record_turns": 1}}}  # the shard's row has no calls
    count_tokens("embedding", 8, tenant="acme", counter=shard)  # the row is rewritten with the running total
    shard.flush(store, "state")
    assert counts_from_rows(usage_rows(store), ALL, group="tokens")["acme"][hour]["embedding"] == 60


def test_a_row_written_before_tokens_were_counted_still_reads() -> None:
    store = FlakyStore()
    hour = int(T0) // HOUR_S * HOUR_S
    store.upsert("state", [Record(pk=f"old/{hour}", tenant=SYSTEM_TENANT, session="acme", kind=USAGE_KIND, ts_ms=0,
                                  text="", payload={"tenant": "acme", "hour": hour, "replica": "r",
                                                    "calls": {"search": 2}})])
    assert counts_from_rows(usage_rows(store), ALL) == {"acme": {hour: {"search": 2}}}
    assert counts_from_rows(usage_rows(store), ALL, group="tokens") == {}


async def test_work_on_behalf_of_a_tenant_counts_in_its_threads_and_tasks_not_after() -> None:
    counter = UsageCounter(replica="p", clock=Clock())

    def in_a_thread() -> None:
        count_tokens("llm_out", 3, counter=counter)

    with on_behalf_of("acme"):
        assert working_for() == "acme"
        await asyncio.to_thread(in_a_thread)
        task = asyncio.ensure_future(asyncio.to_thread(in_a_thread))
    await task  # started inside: still acme's
    await asyncio.to_thread(in_a_thread)  # outside: nobody's
    assert working_for() is None
    (row,) = counter.pending()
    assert (row.session, row.payload["tokens"]) == ("acme", {"llm_out": 6})


def test_counting_from_many_threads_loses_nothing() -> None:
    counter = UsageCounter(replica="p", clock=Clock())

    def many() -> None:
        for _ in range(5_000):
            count_tokens("embedding", 1, tenant="acme", counter=counter)

    threads = [threading.Thread(target=many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (row,) = counter.pending()
    assert row.payload["tokens"] == {"embedding": 20_000}


def test_the_minilm_embedder_counts_the_word_pieces_it_read_after_the_cut() -> None:
    embedder = make_embedder(EmbeddingSettings())
    assert isinstance(embedder, OnnxMiniLMEmbedder)
    tokenizer = embedder._tokenizer
    short, long = "where do I live now?", "word " * 1000
    vectors, tokens = embed_counted(embedder, [short, long, ""])
    whole = len(tokenizer.encode(short).ids)
    assert tokens == [whole, 256, 2]  # [CLS] and [SEP] included; the long text cut to max_tokens; "" is both
    np.testing.assert_allclose(vectors, embedder.embed([short, long, ""]), atol=1e-5)
    _, query_tokens = embed_counted(embedder, [short, long], query=True)
    assert query_tokens == [whole, 128]  # a query is cut to query_max_tokens


def test_an_embedder_without_counts_counts_none() -> None:
    class Plain:
        dim = 2

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return np.ones((len(texts), 2), dtype=np.float32)

        def embed_query(self, texts: Sequence[str]) -> np.ndarray:
            return self.embed(texts)

    vectors, tokens = embed_counted(Plain(), ["a", "b"], query=True)
    assert vectors.shape == (2, 2) and tokens == [0, 0]


class _Shard(LayerShard[list[str]]):
    """A layer shard without a layer: its embeddings, its LLM work and its usage writes."""

    def __init__(self) -> None:
        super().__init__(StrataSettings(serve=ServeSettings(usage_flush_s=0.05)).to_dict(), 0)
        self.store = FlakyStore()

    async def _backend(self) -> Any:
        return self.store, NAMES, None


async def test_a_layer_shard_counts_its_embeddings_and_llm_work_and_writes_them_itself() -> None:
    shard, tenant = _Shard(), "acme-shard"
    texts = ["where do I live now?", "word " * 1000]
    vectors = await shard.embed(texts, tenant=tenant)  # stored texts: cut to 256 pieces
    _, pieces = embed_counted(shard.embedder(), texts)
    assert vectors.shape == (2, 384) and pieces[1] == 256
    await shard.embed_query(["where?"], tenant=tenant)
    _, query_pieces = embed_counted(shard.embedder(), ["where?"], query=True)
    async with shard.on_behalf_of(tenant):  # as the summaries, entities and skill drafts call the LLM
        await asyncio.to_thread(count_tokens, "llm_in", 120)
        await asyncio.to_thread(count_tokens, "llm_out", 30)
    expected = {"embedding": sum(pieces) + sum(query_pieces), "llm_in": 120, "llm_out": 30}

    def written() -> dict[str, int]:
        tokens = counts_from_rows(usage_rows(shard.store), ALL, group="tokens").get(tenant, {})
        return {k: v for hour in tokens.values() for k, v in hour.items()}

    for _ in range(200):  # the shard's own task writes within serve.usage_flush_s
        if written() == expected:
            break
        await asyncio.sleep(0.01)
    assert written() == expected
    assert shard._usage_writer is not None
    shard._usage_writer.cancel()
