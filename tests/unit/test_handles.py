"""The typed handles: each call reaches the shard method of its name with the caller's arguments,
comes back typed, and a Ray failure comes back as Strata's error (no Ray: a fake actor handle)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from ray.exceptions import RayActorError, RayTaskError

from strata.errors import NotFound, StoreUnavailable
from strata.layers import LAYERS
from strata.schema import SkillDeleted
from strata_actors.handles import EpisodicHandle, ProceduralHandle, SessionLayerHandle, WorkingHandle
from strata_actors.orchestration import SESSION_LAYERS
from strata_actors.router import _HANDLES, LAYER_CLASSES


class _Method:
    def __init__(self, actor: _Actor, name: str) -> None:
        self.actor, self.name = actor, name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        self.actor.calls.append((self.name, args, kwargs))

        async def answer() -> Any:
            if isinstance(self.actor.answer, BaseException):
                raise self.actor.answer
            return self.actor.answer

        return answer()


class _Actor:
    """Answers every method with ``answer`` (raised if it is an exception), noting the calls."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)


async def test_a_call_reaches_the_shard_method_with_its_arguments() -> None:
    actor = _Actor({"skill_id": "sk-1", "removed": 3, "version": 7})
    deleted = await ProceduralHandle(actor).delete_skill("acme", "sk-1", expected_version=6)
    assert deleted == SkillDeleted(skill_id="sk-1", removed=3, version=7)
    assert actor.calls == [("delete_skill", ("acme", "sk-1"), {"expected_version": 6})]


async def test_results_keep_the_shape_the_shard_sends() -> None:
    hit = {"layer": "episodic", "kind": "turn", "id": "t1", "text": "hi", "score": 0.5,
           "timestamp": datetime.now(UTC), "session_id": "s1", "turn_ids": [], "ranks": {"dense": 1}}
    found = await EpisodicHandle(_Actor({"hits": [hit], "version": 4})).search("acme", query="hi", vector=np.ones(2),
                                                                              top_k=3)
    assert found == {"hits": [hit], "version": 4}
    assert await WorkingHandle(_Actor({"removed": 2})).forget_tenant("acme") == 2


@pytest.mark.parametrize(("raised", "expected"), [
    (RayTaskError("forget_session", "traceback", NotFound("no such session")), NotFound),  # type: ignore[no-untyped-call]  # Ray leaves it unannotated
    (RayActorError(), StoreUnavailable),
    (TimeoutError(), StoreUnavailable),
])
async def test_a_ray_failure_comes_back_as_strata_error(raised: BaseException, expected: type[Exception]) -> None:
    with pytest.raises(expected):
        await WorkingHandle(_Actor(raised)).forget_session("acme", "s1")


def test_every_layer_has_a_shard_class_and_a_handle() -> None:
    assert tuple(LAYER_CLASSES) == LAYERS
    assert {layer: handle.layer for layer, handle in _HANDLES.items()} == {layer: layer for layer in LAYERS}
    assert [layer for layer in LAYERS if issubclass(_HANDLES[layer], SessionLayerHandle)] == list(SESSION_LAYERS)
