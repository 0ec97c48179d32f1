"""Cutting documents into chunks, by one of several strategies behind one interface.

A :class:`Chunker` turns a text into a :class:`ChunkTree`: parents and the
children matched in their place.  Single-level strategies return the same
chunks as both (``parent_of[i] == i``); ``parent_child`` cuts large parents and
small children inside them.

Every strategy guarantees, for the spans it returns:

* ``chunk.text == text[chunk.start:chunk.end]``, in document order;
* no chunk is empty or whitespace-only, and together they cover every
  non-whitespace character;
* each chunk's token count (by the :class:`~strata.providers.tokens.TokenCounter`) is at
  most its limit: every span is measured once more after cutting, and the rare
  one over the limit is re-cut on token boundaries.

The cutting itself (recursive splitting with offsets, token windows, sentence
packing, the added overlap) is in :mod:`strata.semantic.cutting`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, get_args

import numpy as np

from strata.config import ChunkingSettings, ChunkingStrategy
from strata.providers.tokens import TokenCounter
from strata.semantic.cutting import Cutter, Span

__all__ = ["EMBED_BATCH", "STRATEGIES", "Chunk", "ChunkTree", "Chunker", "make_chunker"]

#: The strategies' names, as the settings spell them.
STRATEGIES: tuple[str, ...] = get_args(ChunkingStrategy)

#: ``semantic`` embeds this many sentences per ``embed`` call.
EMBED_BATCH = 256

_Embed = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Chunk:
    """A passage of a source text: ``text == source[start:end]``."""

    text: str
    start: int  # character offset in the source, inclusive
    end: int  # exclusive


@dataclass(frozen=True)
class ChunkTree:
    """Parents and children of one text, both in document order.

    ``children[i]`` lies inside ``parents[parent_of[i]]``.  Single-level
    strategies return ``parents == children`` and ``parent_of[i] == i``.
    """

    parents: tuple[Chunk, ...]
    children: tuple[Chunk, ...]
    parent_of: tuple[int, ...]


_EMPTY = ChunkTree(parents=(), children=(), parent_of=())


class Chunker(Protocol):
    """Cuts one text into a :class:`ChunkTree`; ``name`` is the strategy."""

    name: str

    def chunk(self, text: str) -> ChunkTree:
        """Cut ``text``; empty or whitespace-only text gives an empty tree."""
        ...



def _single_level(text: str, spans: Sequence[Span]) -> ChunkTree:
    chunks = tuple(Chunk(text[s:e], s, e) for s, e in spans)
    return ChunkTree(parents=chunks, children=chunks, parent_of=tuple(range(len(chunks))))


class _Strategy:
    """Base of the single-level strategies: ``_spans`` is the strategy."""

    def __init__(self, name: str, settings: ChunkingSettings, counter: TokenCounter) -> None:
        self.name = name
        self._settings = settings
        self._counter = counter

    def chunk(self, text: str) -> ChunkTree:
        if not text or text.isspace():
            return _EMPTY
        return _single_level(text, self._spans(Cutter(text, self._counter)))

    def _spans(self, cut: Cutter) -> list[Span]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class _Fixed(_Strategy):
    def _spans(self, cut: Cutter) -> list[Span]:
        s = self._settings
        return cut.windows(0, len(cut.text), s.child_tokens, s.child_overlap)


class _Recursive(_Strategy):
    def _spans(self, cut: Cutter) -> list[Span]:
        s = self._settings
        spans = cut.recursive(0, len(cut.text), s.child_tokens, s.child_overlap)
        return cut.overlap(spans, s.child_tokens, s.child_overlap)


class _Sentence(_Strategy):
    def _spans(self, cut: Cutter) -> list[Span]:
        s = self._settings
        return cut.pack(cut.sentences(s.child_tokens), s.child_tokens, s.child_overlap)


class _Semantic(_Strategy):
    def __init__(self, name: str, settings: ChunkingSettings, counter: TokenCounter, embed: _Embed) -> None:
        super().__init__(name, settings, counter)
        self._embed = embed

    def _spans(self, cut: Cutter) -> list[Span]:
        size = self._settings.child_tokens
        units = cut.sentences(size)
        if len(units) < 2:
            return cut.pack(units, size, 0)
        vectors = self._vectors([cut.text[s:e] for s, e in units])
        distances = 1.0 - np.einsum("ij,ij->i", vectors[:-1], vectors[1:])
        threshold = np.percentile(distances, self._settings.semantic_breakpoint_percentile)
        breaks = frozenset(int(k) + 1 for k in np.flatnonzero(distances > threshold))
        return cut.pack(units, size, 0, breaks)

    def _vectors(self, texts: list[str]) -> np.ndarray:
        batches = []
        for i in range(0, len(texts), EMBED_BATCH):
            batch = texts[i : i + EMBED_BATCH]
            vectors = np.asarray(self._embed(batch), dtype=np.float64)
            if vectors.ndim != 2 or vectors.shape[0] != len(batch):
                raise ValueError(f"embed returned an array of shape {vectors.shape} for {len(batch)} texts")
            batches.append(vectors)
        stacked = np.vstack(batches)
        # Unit norm is the contract; normalising again is cheap insurance.
        unit: np.ndarray = stacked / np.maximum(np.linalg.norm(stacked, axis=1, keepdims=True), 1e-12)
        return unit


class _ParentChild:
    """Parents by the recursive splitter; children by it again inside each parent.

    Parents overlap; a child is cut once, in the first parent that holds its
    text, so children neither repeat nor go out of order: each parent's
    children are cut from where the previous parent's ended (then given their
    overlap, inside their own parent).
    """

    name = "parent_child"

    def __init__(self, settings: ChunkingSettings, counter: TokenCounter) -> None:
        self._settings = settings
        self._counter = counter

    def chunk(self, text: str) -> ChunkTree:
        if not text or text.isspace():
            return _EMPTY
        s = self._settings
        cut = Cutter(text, self._counter)
        parents = cut.recursive(0, len(text), s.parent_tokens, s.parent_overlap)
        parents = cut.overlap(parents, s.parent_tokens, s.parent_overlap)
        children: list[Span] = []
        parent_of: list[int] = []
        for n, (p_start, p_end) in enumerate(parents):
            begin = max(p_start, children[-1][1] if children else p_start)
            if begin >= p_end:
                continue
            mine = cut.recursive(begin, p_end, s.child_tokens, s.child_overlap)
            children += mine
            parent_of += [n] * len(mine)
        children = cut.overlap(children, s.child_tokens, s.child_overlap, [parents[n][0] for n in parent_of])
        return ChunkTree(
            parents=tuple(Chunk(text[a:b], a, b) for a, b in parents),
            children=tuple(Chunk(text[a:b], a, b) for a, b in children),
            parent_of=tuple(parent_of),
        )

    def __repr__(self) -> str:
        return "_ParentChild(name='parent_child')"


def make_chunker(settings: ChunkingSettings, counter: TokenCounter, *, embed: _Embed | None = None) -> Chunker:
    """Build the chunker ``settings.strategy`` names.

    Sizes are tokens by ``counter``: ``child_tokens`` / ``child_overlap`` for the
    single-level strategies and the children, ``parent_tokens`` /
    ``parent_overlap`` for ``parent_child``'s parents.

    Args:
        settings: Strategy and sizes.
        counter: Measures (and, for ``fixed``, cuts) text in tokens.
        embed: For ``semantic`` only: maps a list of texts to unit-norm row
            vectors, one per text.  Called with at most :data:`EMBED_BATCH` texts.

    Raises:
        ValueError: If the strategy is unknown, or is ``semantic`` without ``embed``.
    """
    strategy = settings.strategy
    if strategy == "fixed":
        return _Fixed(strategy, settings, counter)
    if strategy == "recursive":
        return _Recursive(strategy, settings, counter)
    if strategy == "sentence":
        return _Sentence(strategy, settings, counter)
    if strategy == "semantic":
        if embed is None:
            raise ValueError(
                "chunking strategy 'semantic' needs an embed function (texts -> unit-norm vectors); "
                "pass embed=... or choose another strategy"
            )
        return _Semantic(strategy, settings, counter, embed)
    if strategy == "parent_child":
        return _ParentChild(settings, counter)
    raise ValueError(f"unknown chunking strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
