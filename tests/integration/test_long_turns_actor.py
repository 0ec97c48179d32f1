"""Long turns in the episodic shard on a real local Ray and milvus-lite: the write answers
before the passages are embedded, the shard embeds them in the background and writes their
vectors, and a shard that restarts with passages still waiting embeds them once the tenant loads."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
import ray

from strata.episodic.memory import EpisodicMemory
from strata.episodic.passages import PASSAGE
from strata.episodic.turns import MENTIONS, ROUTED, TurnInput
from strata.errors import StoreUnavailable
from strata.providers.embedder import E5_MODEL, OnnxMiniLMEmbedder
from strata.store.layout import open_store
from strata_actors.client import InClusterClient
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.integration.layers import until_up

pytestmark = pytest.mark.usefixtures("ray_local")

REPLY = "\n".join(f"line {i}: the worker retried the upload of shard {i % 17} and moved on." for i in range(120))


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    return settings_for(milvus, actors={"working_shards": 1, "episodic_shards": 1})


def _passage_rows(settings: Any, tenant: str) -> list[Any]:
    store, names = open_store(settings)
    return [r for r in store.scan(names.episodic, tenant=tenant) if r.kind == PASSAGE]


async def test_passages_are_embedded_after_the_write(settings: Any) -> None:
    client = InClusterClient("long-a", settings)
    await client.record_turns("s1", [{"user": "the run log:", "agent": REPLY, "turn_id": "log"}])
    assert await client.wait_for_passages() == 0
    rows = _passage_rows(settings, "long-a")
    assert len(rows) > 3 and all(r.payload["embedded"] for r in rows)
    assert all(r.vector is not None and float(abs(r.vector).sum()) > 0 for r in rows)
    assert "".join(r.text for r in sorted(rows, key=lambda r: r.payload["n"])) == REPLY


async def test_the_passages_of_a_long_turn_in_another_script_get_the_second_models_vectors(settings: Any) -> None:
    # A turn mostly in Chinese is embedded by e5 too (embedding.script_route): its passages as well.
    diary = "\n\n".join(
        f"第{i}段：今天处理了编号为{i}的工单，客户反馈系统在高峰时段响应很慢，"
        "我们增加了缓存并重新部署了服务。" for i in range(30)
    )
    client = InClusterClient("long-zh", settings)
    await client.record_turns("s1", [{"user": diary, "turn_id": "diary"}])
    assert await client.wait_for_passages() == 0
    rows = _passage_rows(settings, "long-zh")
    assert len(rows) > 3 and all(r.payload["embedded"] for r in rows)
    assert all(r.payload[ROUTED]["model"] == E5_MODEL and r.payload[ROUTED]["vector"] for r in rows)


async def test_a_restarted_shard_embeds_the_passages_left_waiting(settings: Any) -> None:
    """Rows as a shard that stopped between the write and the vectors left them."""
    store, names = open_store(settings)
    memory = EpisodicMemory("long-b", store=store, collection=names.episodic, settings=settings.episodic)
    turns = memory.prepare("s1", [TurnInput(agent=REPLY, turn_id="log")], now=datetime.now(UTC))
    memory.write(turns, OnnxMiniLMEmbedder().embed([t.text for t in turns]))
    assert not any(r.payload["embedded"] for r in _passage_rows(settings, "long-b"))

    actor = LayerRouter(settings).handle("episodic", "long-b")
    ray.kill(actor, no_restart=False)  # the tenant loads afresh from its rows
    await until_up(actor)
    client = InClusterClient("long-b", settings)
    for _ in range(120):  # the router may still see the old actor restarting for a moment
        try:
            waiting = await client.wait_for_passages()
            break
        except StoreUnavailable:
            await asyncio.sleep(0.5)
    assert waiting == 0
    assert all(r.payload["embedded"] for r in _passage_rows(settings, "long-b"))
    found = await client.search("which shard did the worker retry the upload of", layers=["episodic"])
    assert found.hits[0].id == "log" and found.hits[0].span is not None


async def test_rows_an_earlier_version_wrote_are_brought_up_to_date_when_the_tenant_loads(settings: Any) -> None:
    """Turn rows without the time they speak of or the route (as before 3b240d2 and 733ad0e)."""
    store, names = open_store(settings)
    old = EpisodicMemory("old-rows", store=store, collection=names.episodic, settings=settings.episodic)
    said = ["晚饭吃的是牛肉面，很好吃", "最近在学弹吉他，手指很疼", "The staging cluster moved to the new region."]
    turns = old.prepare("s1", [TurnInput(user=text, turn_id=f"t{n}") for n, text in enumerate(said)],
                        now=datetime.now(UTC))
    old.write(turns, OnnxMiniLMEmbedder().embed([t.text for t in turns]))
    rows = store.scan(names.episodic, tenant="old-rows")
    store.upsert(names.episodic, [dataclasses.replace(r, payload={k: v for k, v in r.payload.items()
                                                                  if k not in (MENTIONS, ROUTED)}) for r in rows])

    actor = LayerRouter(settings).handle("episodic", "old-rows")
    ray.kill(actor, no_restart=False)  # the tenant loads afresh from its rows
    await until_up(actor)
    client = InClusterClient("old-rows", settings)
    payloads: dict[str, Any] = {}
    for _ in range(240):  # the load (a search) starts the update in the background
        with contextlib.suppress(StoreUnavailable):
            await client.search("乐器", layers=["episodic"])
        payloads = {r.payload["turn_id"]: r.payload for r in store.scan(names.episodic, tenant="old-rows")}
        if all(MENTIONS in p and ROUTED in p for p in payloads.values()):
            break
        await asyncio.sleep(0.25)
    assert payloads["t1"][ROUTED]["vector"] and payloads["t2"][ROUTED] == {}
    assert all(MENTIONS in p for p in payloads.values())
    found = await client.search("Which musical instrument am I learning?", layers=["episodic"])
    assert found.hits[0].id == "t1", [h.text for h in found.hits]
