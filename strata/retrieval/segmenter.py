"""jieba, Strata's Chinese word segmenter: loaded once per process, its cache kept private, its
part-of-speech tagger's work bounded per call.

jieba parses its dictionary into a cache file and, in every later process, loads that file
with ``marshal`` if it exists, whoever wrote it. Left to itself it keeps the file in the shared
temporary directory (``/tmp/jieba.cache``): any account of the machine could put a file there
first, and every Strata process that reads Chinese would load it (a dictionary that segments
text as its author likes, or data built to break ``marshal``, which is not safe against it).
The cache is kept in ``<tmp>/strata-<uid>/jieba`` instead (:func:`strata.private_dirs.user_temp_dir`);
where that cannot be made this user's, in a new private directory of this process's.

:func:`tagged_words` is ``jieba.posseg.cut`` with a budget on its tagger (see there).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from itertools import pairwise
from typing import Any

from strata.private_dirs import user_temp_dir

__all__ = ["TAGGER_STEPS_BASE", "TAGGER_STEPS_PER_CHAR", "jieba", "jieba_posseg", "tagged_words"]

_log = logging.getLogger(__name__)

#: The part-of-speech tagger's steps one call of :func:`tagged_words` may take: this many, plus
#: :data:`TAGGER_STEPS_PER_CHAR` for each character of the text. A step weighs one state of a
#: character against one of the character before it, about 0.6 us. The most any MemSim turn
#: took is 6,063, so no short text is cut short.
TAGGER_STEPS_BASE = 20_000
#: All of MemSim's Chinese (71,016 characters) as one text needs 43 steps a character, so the
#: last runs of so long a text go untagged; its entities (the 32 one text may give) are the same
#: with the budget as without it, at 2,000, 16,000 and 71,016 characters. Whatever they are,
#: 16,000 characters take at most 532,000 steps, about 0.3 s.
TAGGER_STEPS_PER_CHAR = 32


@lru_cache(maxsize=1)
def jieba() -> Any:
    """The ``jieba`` module, its dictionary cache in a directory only this user can write."""
    import jieba as module

    module.setLogLevel(logging.WARNING)  # it announces its dictionary load on stderr
    try:
        module.dt.tmp_dir = str(user_temp_dir("jieba"))
    except PermissionError as exc:
        module.dt.tmp_dir = tempfile.mkdtemp(prefix="strata-jieba-")
        _log.warning("jieba's dictionary cache kept in %s for this process only: %s", module.dt.tmp_dir, exc)
    return module


@lru_cache(maxsize=1)
def jieba_posseg() -> Any:
    """``jieba.posseg`` (part-of-speech tags), over the tokenizer of :func:`jieba`."""
    jieba()
    from jieba import posseg

    return posseg


class _Steps:
    """The tagger's steps left in one call, and those taken."""

    __slots__ = ("left", "taken")

    def __init__(self, left: int) -> None:
        self.left = left
        self.taken = 0

    def take(self, steps: int) -> bool:
        """Take ``steps``; when fewer are left, take none and leave none for later."""
        if steps > self.left:
            self.left = 0
            return False
        self.left -= steps
        self.taken += steps
        return True


def tagged_words(text: str, *, steps_max: int | None = None) -> Iterator[tuple[str, str]]:
    """``text`` cut into words with their part-of-speech tags, as ``jieba.posseg.cut(text)``
    yields them, with the tagger's work bounded per call.

    jieba cuts a text into the words of its dictionary, and gives each run of characters that
    makes no word to a Viterbi over 256 states (begin, middle, end or single, times a tag), which
    finds the words its dictionary lacks, such as names. A character costs its possible states
    times its predecessor's: about 40 steps in real Chinese, but 65,536 for one the model has never
    seen, which may be any state. A 1,000-character turn of random ideographs took 3.4 s.

    Here the Viterbi takes at most ``steps_max`` steps in the call (by default
    :data:`TAGGER_STEPS_BASE` plus :data:`TAGGER_STEPS_PER_CHAR` a character). A run whose
    steps would exceed what is left is cut as jieba cuts without the Viterbi (each character
    alone, with its dictionary tag) and the runs after it may still use the rest; within the
    budget, the words and tags are jieba's own.
    """
    posseg = jieba_posseg()
    tokenizer = posseg.dt
    tokenizer.makesure_userdict_loaded()
    steps = _Steps(TAGGER_STEPS_BASE + TAGGER_STEPS_PER_CHAR * len(text) if steps_max is None else steps_max)
    for block in posseg.re_han_internal.split(text):
        if posseg.re_han_internal.match(block):
            yield from _dictionary_words(tokenizer, block, steps)
            continue
        for piece in posseg.re_skip_internal.split(block):
            if posseg.re_skip_internal.match(piece):
                yield piece, "x"
                continue
            for char in piece:
                if posseg.re_num.match(char):
                    yield char, "m"
                elif posseg.re_eng.match(piece):  # sic: jieba tests the piece, not the character
                    yield char, "eng"
                else:
                    yield char, "x"


def _dictionary_words(tokenizer: Any, block: str, steps: _Steps) -> Iterator[tuple[str, str]]:
    """A block of ideographs, letters and digits, cut by the dictionary (jieba's ``__cut_DAG``)."""
    dag = tokenizer.tokenizer.get_DAG(block)
    route: dict[int, tuple[float, int]] = {}
    tokenizer.tokenizer.calc(block, dag, route)
    tags = tokenizer.word_tag_tab
    start, run = 0, ""
    while start < len(block):
        end = route[start][1] + 1
        word = block[start:end]
        if end - start == 1:
            run += word
        else:
            if run:
                yield from _run_words(tokenizer, run, steps)
                run = ""
            yield word, tags.get(word, "x")
        start = end
    if run:
        yield from _run_words(tokenizer, run, steps)


def _run_words(tokenizer: Any, run: str, steps: _Steps) -> Iterator[tuple[str, str]]:
    """Characters the dictionary made no word of (jieba's ``__cut_detail``)."""
    tags = tokenizer.word_tag_tab
    if len(run) == 1 or tokenizer.tokenizer.FREQ.get(run):
        yield from ((char, tags.get(char, "x")) for char in run)
        return
    posseg = jieba_posseg()
    for piece in posseg.re_han_detail.split(run):
        if posseg.re_han_detail.match(piece):
            yield from _tagged_run(piece, steps, tags)
            continue
        for part in posseg.re_skip_detail.split(piece):
            if not part:
                continue
            if posseg.re_num.match(part):
                yield part, "m"
            elif posseg.re_eng.match(part):
                yield part, "eng"
            else:
                yield part, "x"


def _tagged_run(run: str, steps: _Steps, tags: dict[str, str]) -> Iterator[tuple[str, str]]:
    """A run of ideographs cut by the Viterbi (jieba's ``__cut``), or, past the budget, one by one."""
    route = _viterbi(run, steps) if _estimate(run) <= steps.left else None
    if route is None:
        yield from ((char, tags.get(char, "x")) for char in run)
        return
    begin = after = 0
    for i, (position, tag) in enumerate(route):
        if position == "B":
            begin = i
        elif position == "E":
            yield run[begin : i + 1], tag
            after = i + 1
        elif position == "S":
            yield run[i], tag
            after = i + 1
    if after < len(run):
        yield run[after:], route[after][1]


_MIN_FLOAT = -3.14e100
_MIN_INF = float("-inf")


def _estimate(run: str) -> int:
    """The steps :func:`_viterbi` takes on ``run`` as a rule: each character's possible states
    times its predecessor's (all of them for a character the model has not seen)."""
    posseg = jieba_posseg()
    every = len(posseg.trans_P)
    counts = [len(posseg.char_state_tab_P.get(char, ())) or every for char in run]
    return counts[0] + sum(a * b for a, b in pairwise(counts))


def _viterbi(obs: str, steps: _Steps) -> list[tuple[str, str]] | None:
    """jieba.posseg's Viterbi (its ``viterbi.viterbi``: the same arithmetic, the same ties), its
    steps taken from ``steps``; None, and no steps left, when it would take more than remain."""
    posseg = jieba_posseg()
    states, start_p, trans_p, emit_p = posseg.char_state_tab_P, posseg.start_P, posseg.trans_P, posseg.emit_P
    all_states = trans_p.keys()
    first = states.get(obs[0], all_states)
    if not steps.take(len(first)):
        return None
    scores: list[dict[Any, float]] = [{y: start_p[y] + emit_p[y].get(obs[0], _MIN_FLOAT) for y in first}]
    back: list[dict[Any, Any]] = [dict.fromkeys(first, "")]
    for t in range(1, len(obs)):
        prev_states = [x for x in back[t - 1] if trans_p[x]]
        expect_next = {y for x in prev_states for y in trans_p[x]}
        obs_states = set(states.get(obs[t], all_states)) & expect_next
        if not obs_states:
            obs_states = expect_next if expect_next else set(all_states)
        if not steps.take(len(obs_states) * len(prev_states)):
            return None
        last, char = scores[t - 1], obs[t]
        here: dict[Any, float] = {}
        came: dict[Any, Any] = {}
        for y in obs_states:
            emit = emit_p[y].get(char, _MIN_FLOAT)
            here[y], came[y] = max((last[y0] + trans_p[y0].get(y, _MIN_INF) + emit, y0) for y0 in prev_states)
        scores.append(here)
        back.append(came)
    _, state = max((scores[-1][y], y) for y in back[-1])
    route: list[Any] = [None] * len(obs)
    for i in range(len(obs) - 1, -1, -1):
        route[i] = state
        state = back[i][state]
    return route
