"""Long turns as passages: how a message longer than the embedder reads is cut, kept and searched.

The embedder reads the first 256 word pieces of a text (about 1,000 English characters, 250
Chinese ones); a turn's own vector is made from its opening, and BM25 over a whole 100,000-character
turn scores every word it holds. So a side of a turn (``user`` or ``agent``) longer than one
passage is cut by :func:`cut` into contiguous passages, each about what the embedder reads,
at a paragraph, line, sentence or word break when one is near. Each passage is

* **kept**: its row (kind :data:`PASSAGE`) holds its text, so a side is stored whole as the
  concatenation of its passages (:func:`joined`), however long, and the turn's own row keeps
  the other side and the opening (``RECORD_TEXT_BYTES_MAX`` bounds a row, not a message);
* **searched**: :class:`PassageIndex` holds each passage's vector and BM25 terms; a search
  gives each turn the best of its own score and its passages' (dense: cosine; lexical: BM25),
  and names the passage that matched, so the context quotes that span and not the opening.

Cutting is linear in the text: each cut looks back over one window only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from strata.retrieval.lexical import LexicalIndex
from strata.retrieval.vectors import VectorIndex

__all__ = [
    "PASSAGE", "SIDES", "Passage", "PassageIndex", "cjk_chars", "cut", "joined", "passage_key", "quote", "texts_of",
]

#: The ``kind`` of a passage's row.
PASSAGE = "passage"
#: The sides of a turn a passage belongs to, in the order a turn's text shows them.
SIDES = ("user", "agent")

#: Breaks a cut prefers, best first: a paragraph, a line, a sentence's end, a clause, a word.
_BREAKS = ("\n\n", "\n", ". ", "。", "! ", "? ", "！", "？", "; ", "；", "，", ", ", " ")
#: A cut looks for a break in the last part of its window, from this share of it on.
_BREAK_FROM = 0.6
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")


@dataclass(frozen=True)
class Passage:
    """Characters ``[start, end)`` of one side of a turn, the ``n``-th passage of that side."""

    side: str
    n: int
    start: int
    end: int


def passage_key(turn_key: str, side: str, n: int) -> str:
    """A passage's id in the index: its turn's key (``session/turn_id``), side and number."""
    return f"{turn_key}#{side}{n}"


def texts_of(user: str | None, agent: str | None, parts: Iterable[Passage]) -> list[str]:
    """The text of each of ``parts`` of a turn whose sides say ``user`` and ``agent``."""
    sides = {"user": user or "", "agent": agent or ""}
    return [sides[p.side][p.start : p.end] for p in parts]


def cjk_chars(text: str) -> int:
    """How many of ``text``'s characters are CJK (one word piece each for the embedder)."""
    return len(text) - len(_CJK.sub("", text))


def _window(text: str, start: int, chars: int) -> int:
    """How many characters from ``start`` make one passage: ``chars`` of alphabetic text, a
    quarter of that of CJK text (one word piece per character, against about four)."""
    sample = text[start : start + chars]
    wide = len(_CJK.findall(sample))
    share = wide / max(len(sample), 1)
    return max(int(chars / (1 + 3 * share)), 16)


def cut(text: str, chars: int) -> list[tuple[int, int]]:
    """Contiguous spans covering ``text``, each at most about ``chars`` characters of
    alphabetic text (fewer of CJK); one span for a text that fits in one.

    ``"".join(text[s:e] for s, e in cut(text, chars)) == text`` always.
    """
    spans: list[tuple[int, int]] = []
    start, length = 0, len(text)
    while start < length:
        size = _window(text, start, chars)
        end = start + size
        if end >= length:
            spans.append((start, length))
            break
        lo = start + int(size * _BREAK_FROM)
        for mark in _BREAKS:
            found = text.rfind(mark, lo, end)
            if found >= 0:
                end = found + len(mark)
                break
        spans.append((start, end))
        start = end
    return spans


def joined(parts: Iterable[tuple[int, str]]) -> str:
    """A side's text from its passages, given as (number, text) in any order."""
    return "".join(text for _, text in sorted(parts))


def quote(label: str, text: str, start: int, end: int) -> str:
    """The span ``[start, end)`` of a side's ``text`` as a hit shows it: labelled, with an
    ellipsis where the side goes on before or after it."""
    before = "… " if start > 0 else ""
    after = " …" if end < len(text) else ""
    return f"{label}: {before}{text[start:end].strip()}{after}"


class PassageIndex:
    """The passages of a tenant's long turns: vectors and BM25 terms, by passage key, and which
    turn each belongs to. A turn's scores are the best of its passages'."""

    def __init__(self) -> None:
        self._vectors = VectorIndex()
        # The second model's vectors of the passages of turns it embedded (strata.providers.routes).
        self._routed = VectorIndex()
        self._lexical = LexicalIndex()
        self._owner: dict[str, str] = {}  # passage key -> turn key
        self._of: dict[str, list[Passage]] = {}  # turn key -> its passages
        # Each vector row's turn, as rows of the turn index: rebuilt when either index changed.
        self._rows: np.ndarray | None = None
        self._routed_rows: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._owner)

    def __contains__(self, turn_key: str) -> bool:
        return turn_key in self._of

    def passages(self, turn_key: str) -> list[Passage]:
        return self._of.get(turn_key, [])

    def precount(self, turn_key: str, passages: Sequence[Passage], texts: Sequence[str]) -> None:
        """Count the passages' terms ahead of :meth:`add` (in a writer's thread)."""
        for passage, text in zip(passages, texts, strict=True):
            self._lexical.precount(passage_key(turn_key, passage.side, passage.n), text)

    def add(
        self, turn_key: str, session: str, passages: Sequence[Passage], texts: Sequence[str], vectors: np.ndarray,
        routed: Sequence[np.ndarray] = (),
    ) -> None:
        """Index a turn's passages (``texts`` their text, ``vectors`` their embeddings; a passage
        without a vector row, past ``len(vectors)``, is found by its words only; ``routed``: the
        second model's vectors of the first ``len(routed)``)."""
        self.remove([turn_key])
        for i, (passage, text) in enumerate(zip(passages, texts, strict=True)):
            key = passage_key(turn_key, passage.side, passage.n)
            self._owner[key] = turn_key
            if i < len(vectors):
                self._vectors.add(key, vectors[i], session)
            self._lexical.add(key, text)
        self._of[turn_key] = list(passages)
        self._rows = None
        self._add_routed(turn_key, session, routed)

    def add_vectors(
        self, turn_key: str, session: str, vectors: np.ndarray, routed: Sequence[np.ndarray] = (),
    ) -> None:
        """Give the first ``len(vectors)`` passages of an indexed turn their vectors (and the
        first ``len(routed)`` the second model's)."""
        for passage, vector in zip(self._of.get(turn_key, []), vectors, strict=False):
            key = passage_key(turn_key, passage.side, passage.n)
            if self._vectors.position(key) is None:
                self._vectors.add(key, vector, session)
        self._rows = None
        self._add_routed(turn_key, session, routed)

    def _add_routed(self, turn_key: str, session: str, routed: Sequence[np.ndarray]) -> None:
        for passage, vector in zip(self._of.get(turn_key, []), routed, strict=False):
            key = passage_key(turn_key, passage.side, passage.n)
            if self._routed.position(key) is None:
                self._routed.add(key, vector, session)
                self._routed_rows = None

    def remove(self, turn_keys: Iterable[str]) -> None:
        gone = [
            passage_key(turn_key, p.side, p.n) for turn_key in turn_keys for p in self._of.pop(turn_key, [])
        ]
        if gone:
            self._vectors.remove(set(gone))
            self._routed.remove(set(gone))
            self._lexical.remove(gone)
            for key in gone:
                del self._owner[key]
            self._rows = self._routed_rows = None

    def turns_moved(self) -> None:
        """The turn index was renumbered (a turn removed from it): map the rows again."""
        self._rows = self._routed_rows = None

    def dense(self, query: np.ndarray, turn_index: VectorIndex) -> np.ndarray | None:
        """For each row of ``turn_index``, the best cosine of its turn's passages to ``query``
        (-1 for a turn without passages); None when there are none."""
        if not len(self._vectors):
            return None
        if self._rows is None:  # a turn appended to the turn index moves no row; a removal does
            self._rows = self._turn_rows(self._vectors, turn_index)
        return self._best(self._vectors.scores(query), self._rows, len(turn_index))

    def routed_dense(self, query: np.ndarray, turn_index: VectorIndex) -> np.ndarray | None:
        """:meth:`dense` by the second model's vectors (``query`` by it): -1 for a turn whose
        passages it did not embed; None when it embedded none."""
        if not len(self._routed):
            return None
        if self._routed_rows is None:
            self._routed_rows = self._turn_rows(self._routed, turn_index)
        return self._best(self._routed.scores(query), self._routed_rows, len(turn_index))

    def _turn_rows(self, vectors: VectorIndex, turn_index: VectorIndex) -> np.ndarray:
        owners = (self._owner[key] for key in vectors.ids)
        return np.fromiter(
            (row if (row := turn_index.position(owner)) is not None else -1 for owner in owners), dtype=np.int64
        )

    @staticmethod
    def _best(scores: np.ndarray, rows: np.ndarray, turns: int) -> np.ndarray:
        best = np.full(turns, -1.0, dtype=np.float32)
        placed = rows >= 0
        np.maximum.at(best, rows[placed], scores[placed])
        return best

    def lexical(self, text: str, k: int, extra: Mapping[str, float] | None = None) -> dict[str, float]:
        """The best BM25 score of a passage per turn, over the ``k`` best passages."""
        out: dict[str, float] = {}
        for key, score in self._lexical.top_scored(text, k, extra=extra):
            owner = self._owner[key]
            if score > out.get(owner, 0.0):
                out[owner] = score
        return out

    def best(
        self, turn_key: str, query: np.ndarray | None, text: str | None, routed: np.ndarray | None = None,
    ) -> Passage | None:
        """The passage of ``turn_key`` that matches best: by its cosine to ``query`` (0 for one
        not embedded), plus its share of the best BM25 score among them. ``routed``: the query by
        the second model, whose cosines stand for the first's where it embedded the passages."""
        passages = self._of.get(turn_key)
        if not passages:
            return None
        keys = [passage_key(turn_key, p.side, p.n) for p in passages]
        value = np.zeros(len(keys), dtype=np.float64)
        vectors, by = self._vectors, query
        if routed is not None and self._routed.position(keys[0]) is not None:
            vectors, by = self._routed, routed
        if by is not None:
            embedded = [i for i, key in enumerate(keys) if vectors.position(key) is not None]
            if embedded:
                value[embedded] += np.maximum(vectors.vectors([keys[i] for i in embedded]) @ by, 0)
        if text:
            words = self._lexical.relevance(text, keys)
            top = max(words.values(), default=0.0)
            if top > 0:
                value += np.array([words.get(key, 0.0) / top for key in keys])
        return passages[int(np.argmax(value))]

