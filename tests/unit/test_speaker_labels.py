"""The speaker labels an ingress keeps per tenant (``FlowBase._speakers``): learned from episodic
answers, used to make a query's speakerless twin, and dropped once no search has confirmed them
for ``SPEAKERS_IDLE_S``, so a tenant forgotten through another ingress leaves no name here."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from strata.config import StrataSettings
from strata_actors.orchestration.base import SPEAKERS_IDLE_S, FlowBase


async def _no_embed(texts: object) -> np.ndarray:
    raise AssertionError("not embedded here")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(time, "monotonic", clock)  # the clock the flow's speaker cache reads
    return clock


def _answer(token: int, names: list[str] | None) -> dict[str, Any]:
    return {"hits": [], "speakers": {"token": token, "names": names}}


async def test_labels_not_confirmed_for_the_idle_time_are_dropped(clock: _Clock) -> None:
    flow = FlowBase(StrataSettings(), embed=_no_embed, embed_query=_no_embed, llm=None)
    question = "What did Jon adopt?"
    assert await flow._query_texts("acme", question) == ([question], -1)  # nothing known yet
    flow._learn_speakers("acme", _answer(7, ["Jon", "Gina"]))  # type: ignore[arg-type]
    assert await flow._query_texts("acme", question) == ([question, "What did adopt?"], 7)

    clock.now += SPEAKERS_IDLE_S - 1
    flow._learn_speakers("acme", _answer(7, None))  # type: ignore[arg-type]  # the same token: confirmed
    flow._learn_speakers("other", _answer(3, ["Ann"]))  # type: ignore[arg-type]
    clock.now += SPEAKERS_IDLE_S - 1
    assert await flow._query_texts("acme", question) == ([question, "What did adopt?"], 7)  # still confirmed

    clock.now += 2  # acme's labels now unconfirmed for longer than the idle time: not used...
    assert await flow._query_texts("acme", question) == ([question], -1)
    flow._learn_speakers("other", _answer(3, None))  # type: ignore[arg-type]
    assert list(flow._speakers) == ["other"]  # ...and gone at the next search of any tenant
