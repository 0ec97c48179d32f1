"""The newest fact first: turns among a search's hits that state the same thing at different times.

A conversation that runs for months restates what changed: "the dashboard API answers in 900 ms",
then weeks later "the dashboard API now answers in 250 ms". Both match a question about the
dashboard's latency, and the older often matches better (it was said at more length). Without an
LLM, two turn hits are taken to state the same thing when

* their own embeddings are close (cosine at least ``supersede_cosine``),
* most of their content terms are shared (Jaccard at least ``supersede_overlap``, and at least
  :data:`SHARED_TERMS_MIN` of them), and
* the later one says that something changed: it holds a word of change (:data:`CHANGE_WORDS`:
  "now", "moved", "instead", "no longer", "现在", "改成", ...).

The later one then *supersedes* the earlier. Among the hits a search returns (none is added or
dropped, so recall at the search's depth does not move; at a smaller depth it may), a superseding
turn ranked below the turn it supersedes is moved just above it, and the earlier is marked: its
hit names the later (``superseded_by``) and the context shows it as earlier.

Each condition is there for a failure seen without it. Without a word of change, chit-chat that
mentions one thing twice (a support group, then the support group again) was an update: on
LoCoMo, whose questions as often ask about the first mention, R@1 fell from 0.400 to 0.378 and
R@10 (of 20 asked) from 0.800 to 0.795. Other numbers alone are no change either: MemSim's
histories hold two bosses' birthdays ("12月10号", "11月13号") and phone numbers, and its R@10 fell
from 0.551 to 0.517. The cosine alone tells nothing in a language the embedder does not know
(MiniLM puts any two Chinese sentences above 0.75), and the shorter text's share of shared terms
took "my boss's name is X" for "my boss works in Y"; the Jaccard of both does not. Checked over
the first 400 turns of three conversations of each shared set: 0 pairs in LoCoMo, 2 in MemSim
(both updates: "我舅舅是做销售的" and later "...现在是销售经理").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np

from strata.episodic.turns import TURN, EpisodicHit

__all__ = ["CHANGE_WORDS", "SHARED_TERMS_MIN", "newest_first", "says_changed"]

#: Two turns share at least this many content terms to state the same thing: "yes, me too" and
#: "me too!" share almost everything and state nothing in common.
SHARED_TERMS_MIN = 3

#: Words by which a turn says a value changed, in the languages whose text Strata segments.
CHANGE_WORDS = (
    "now", "no longer", "not anymore", "anymore", "instead", "changed", "switched", "moved", "updated",
    "replaced", "renamed", "postponed", "rescheduled", "from now on", "actually", "correction",
    "jetzt", "nicht mehr", "stattdessen", "ahora", "ya no", "maintenant", "désormais",
    "现在", "改成", "改为", "换成", "不再", "已经改", "更新", "推迟", "改到",
)
_CHANGE = re.compile(
    "|".join(rf"(?<![^\W\d_]){re.escape(w)}(?![^\W\d_])" if w.isascii() else re.escape(w) for w in CHANGE_WORDS),
    re.IGNORECASE,
)


def says_changed(later: str) -> bool:
    """Whether ``later`` says that something changed: a word of change (:data:`CHANGE_WORDS`)."""
    return _CHANGE.search(later) is not None


def newest_first(
    hits: Sequence[EpisodicHit],
    vector: Callable[[EpisodicHit], np.ndarray | None],
    terms: Callable[[str], frozenset[str]],
    *,
    cosine: float,
    overlap: float,
) -> list[EpisodicHit]:
    """``hits`` (best first) with each superseded turn marked and its superseder moved above it.

    ``vector(hit)``: the turn's own embedding (None: not compared); ``terms(text)``: its content
    terms. A turn superseded by several is marked with the latest of them. Costs a comparison
    per pair of turn hits: a search returns a few dozen at most.
    """
    turns = [i for i, h in enumerate(hits) if h.kind == TURN]
    if len(turns) < 2 or cosine <= 0 or overlap <= 0:
        return list(hits)
    vectors: dict[int, np.ndarray] = {}
    for i in turns:
        v = vector(hits[i])
        if v is not None:
            vectors[i] = v
    words = {i: terms(hits[i].text) for i in vectors}
    later: dict[int, int] = {}  # hit position -> the position of the latest hit superseding it
    for a in vectors:
        for b in vectors:
            if hits[b].timestamp <= hits[a].timestamp or a == b:
                continue
            if not _same_thing(vectors[a], vectors[b], words[a], words[b], cosine, overlap):
                continue
            if not says_changed(hits[b].text):
                continue
            if a not in later or hits[b].timestamp > hits[later[a]].timestamp:
                later[a] = b
    if not later:
        return list(hits)
    out = [replace(h, superseded_by=hits[later[i]].id) if i in later else h for i, h in enumerate(hits)]
    order = list(range(len(hits)))
    # Each superseder goes just above the highest-ranked turn it supersedes, oldest pair first,
    # so a chain (900 ms, then 400, then 250) ends with the newest on top.
    for older, newer in sorted(later.items(), key=lambda pair: _when(hits, pair[0])):
        at_old, at_new = order.index(older), order.index(newer)
        if at_new > at_old:
            order.pop(at_new)
            order.insert(at_old, newer)
    scores = sorted((h.score for h in hits), reverse=True)  # the scores stay in order with the ranks
    return [replace(out[i], score=scores[rank]) for rank, i in enumerate(order)]


def _when(hits: Sequence[EpisodicHit], i: int) -> datetime:
    return hits[i].timestamp


def _same_thing(
    a: np.ndarray, b: np.ndarray, terms_a: frozenset[str], terms_b: frozenset[str], cosine: float, overlap: float
) -> bool:
    if float(a @ b) < cosine:
        return False
    shared = len(terms_a & terms_b)
    return shared >= SHARED_TERMS_MIN and shared >= overlap * len(terms_a | terms_b)

