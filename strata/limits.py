"""Sizes that more than one boundary enforces, each written once.

The HTTP schema (:mod:`strata.schema`), the settings' defaults
(:mod:`strata.config`) and the layers that write rows all read them from here.
"""

from __future__ import annotations

__all__ = [
    "DOCUMENT_CHARS_MAX", "MESSAGE_CHARS_MAX", "RECORD_TEXT_BYTES_MAX", "SKILL_ITEM_CHARS_MAX", "TASK_CHARS_MAX",
    "TTL_MAX_S", "TURN_CHARS_MAX",
    "TURN_CJK_CHARS_MAX",
]

#: One message, query or working item, in characters.
MESSAGE_CHARS_MAX = 16_000

#: A task's words (a working-memory task, an interaction's task), in characters.
TASK_CHARS_MAX = 2_000

#: One side of a turn (``user`` or ``agent``), in characters: kept whole, searched by passages
#: (:mod:`strata.episodic.passages`).
TURN_CHARS_MAX = 1_000_000

#: Of which CJK characters, at most: segmenting them for BM25 costs ~33 us each at worst (random
#: ideographs), ~7 s for this many, in the write (docs/benchmarks.md, "Long turns").
TURN_CJK_CHARS_MAX = 200_000

#: One document to index, in characters.
DOCUMENT_CHARS_MAX = 20_000_000

#: The text of one stored row (a turn, a passage), in UTF-8 bytes: below the
#: 65,535 of the Milvus ``text`` field.
RECORD_TEXT_BYTES_MAX = 60_000

#: One step, trigger, pitfall or criterion of a skill, in characters.
SKILL_ITEM_CHARS_MAX = 500

#: An item's ttl_s may be at most about 100 years.
TTL_MAX_S = 3.2e9
