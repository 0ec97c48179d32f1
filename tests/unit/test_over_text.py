"""Where a query's redaction and time expressions run (actors/orchestration/base.py ``over_text``):
on the event loop for a usual question, in a worker thread for a long one."""

from __future__ import annotations

import threading

from strata_actors.orchestration.base import INLINE_CHARS, over_text


async def test_a_short_text_is_read_on_the_loop_and_a_long_one_in_a_worker_thread() -> None:
    def where(_: str) -> str:
        return threading.current_thread().name

    loop_thread = threading.current_thread().name
    assert await over_text(where, "x" * INLINE_CHARS) == loop_thread
    assert await over_text(where, "x" * (INLINE_CHARS + 1)) != loop_thread
