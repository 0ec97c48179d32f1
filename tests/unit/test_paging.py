"""SortedIds: pages of ids in id order after any id, as ids come and go."""

from __future__ import annotations

import random

from strata.paging import SortedIds


def test_pages_after_any_id_match_a_sort_of_what_is_held() -> None:
    rng = random.Random(5)
    ids, held = SortedIds(), set()
    for step in range(2000):
        item = f"id{rng.randrange(300):03d}"
        if rng.random() < 0.7:
            ids.add(item)
            held.add(item)
        else:
            ids.discard(item)  # absent ones too
            held.discard(item)
        if step % 50 == 0:
            ordered = sorted(held)
            assert len(ids) == len(held)
            for after in (None, item, "id", "id999", *rng.sample(ordered, min(3, len(ordered)))):
                limit = rng.randrange(1, 40)
                following = [i for i in ordered if after is None or i > after]
                assert ids.page(after=after, limit=limit) == (following[:limit], len(following) > limit)


def test_paging_through_every_id_returns_each_once() -> None:
    ids = SortedIds()
    for n in reversed(range(25)):
        ids.add(f"s{n:02d}")
        ids.add(f"s{n:02d}")  # twice: held once
    seen: list[str] = []
    after = None
    while True:
        page, more = ids.page(after=after, limit=4)
        seen += page
        if not more:
            break
        after = page[-1]
    assert seen == [f"s{n:02d}" for n in range(25)]
