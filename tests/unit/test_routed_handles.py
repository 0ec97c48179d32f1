"""A handle bound to a tenant follows it when the layer is scaled (issue 42): a call the shard
refused is sent to the owner under the newer view, a read whose shard was gone is sent again, and
a write whose fate is unknown is not. No Ray: fake actors and a fake route."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from strata.errors import StoreUnavailable, TenantMoved
from strata_actors.handles import EpisodicHandle, ReadBatcher


class _Call:
    def __init__(self, actor: _Actor) -> None:
        self.actor = actor

    def remote(self, epoch: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.actor.calls.append((epoch, method))

        async def answer() -> Any:
            if isinstance(self.actor.answer, BaseException):
                raise self.actor.answer
            return self.actor.answer

        return answer()


class _Actor:
    """Answers :meth:`LayerShard.call` with ``answer`` (raised if an exception), noting each call."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[int, str]] = []
        self.call = _Call(self)

    def __getattr__(self, name: str) -> Any:  # the batcher's `reads`: not used by a lone read
        raise AttributeError(name)


class _Route:
    """Owners by epoch; ``moved`` moves on to the next epoch while there is one."""

    def __init__(self, *owners: _Actor) -> None:
        self.owners, self.epoch, self.asked = list(owners), 0, 0

    async def target(self) -> tuple[Any, ReadBatcher, int]:
        actor = self.owners[self.epoch]
        return actor, ReadBatcher(actor, epoch=self.epoch), self.epoch

    async def moved(self, error: StoreUnavailable, epoch: int) -> bool:
        self.asked += 1
        if epoch + 1 < len(self.owners):
            self.epoch = epoch + 1
            return True
        return False


_TURNS = {"turns": [], "version": 3, "replayed": False}


async def test_a_refused_call_goes_to_the_new_owner_with_its_epoch() -> None:
    old, new = _Actor(TenantMoved("moved", epoch=1)), _Actor(_TURNS)
    route = _Route(old, new)
    recorded = await EpisodicHandle(route=route).record_turns("acme", "s", [{"user": "hi"}], vectors=np.ones((1, 2)))
    assert recorded["version"] == 3
    assert old.calls == [(0, "record_turns")] and new.calls == [(1, "record_turns")]


async def test_a_write_whose_fate_is_unknown_is_not_sent_again() -> None:
    route = _Route(_Actor(StoreUnavailable("Milvus timed out")), _Actor(_TURNS))
    with pytest.raises(StoreUnavailable):
        await EpisodicHandle(route=route).record_turns("acme", "s", [{"user": "hi"}], vectors=np.ones((1, 2)))
    assert route.asked == 0


async def test_a_read_is_sent_again_after_any_store_error_if_the_placement_moved_on() -> None:
    hits = {"hits": [], "version": 1}
    route = _Route(_Actor(StoreUnavailable("gone")), _Actor(hits))
    found = await EpisodicHandle(route=route).search("acme", query="q", vector=np.ones(2), top_k=1)
    assert found == hits and route.asked == 1


async def test_a_refusal_with_no_newer_placement_reaches_the_caller() -> None:
    route = _Route(_Actor(TenantMoved("moved", epoch=1)))
    with pytest.raises(TenantMoved):
        await EpisodicHandle(route=route).wait_for_summaries("acme")
    assert route.asked == 1
