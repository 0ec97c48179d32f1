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

The recursive splitting is langchain-text-splitters' ``RecursiveCharacterTextSplitter``
(its separator choice, merge and overlap policy).  Its ``add_start_index`` is not
used: it looks each chunk up with ``str.find`` from ``chunk_overlap`` *characters*
before the previous chunk's end, which with a token length function starts past
the real position and finds a later copy or nothing.  :class:`_SpanSplitter`
instead carries every piece's offset through the recursion.  langchain's
overlap is also rare on real text (see :meth:`_Cutter.overlap`); a chunk left
without one gets the tail of the chunk before it, within both limits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, Self

import numpy as np
import numpy.typing as npt
import tiktoken
from langchain_text_splitters import RecursiveCharacterTextSplitter
from typing_extensions import override

from strata.config import ChunkingSettings
from strata.providers.tokens import TiktokenCounter, TokenCounter

__all__ = ["STRATEGIES", "Chunk", "ChunkTree", "Chunker", "make_chunker"]

STRATEGIES: tuple[str, ...] = ("fixed", "recursive", "sentence", "semantic", "parent_child")

#: ``semantic`` embeds this many sentences per ``embed`` call.
EMBED_BATCH = 256

_Span = tuple[int, int]
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


# Separators are matched on a copy of the text in which fenced code blocks are
# marked (see _mark_code): same length and offsets, so pieces and their token
# counts come from the real text.
_OPEN, _CLOSE, _CODE_HASH, _NEUTRAL = "\x02", "\x03", "\x01", "\x04"

# Most structural first.  Regexes only (no capturing groups); each boundary falls
# at a match's end, so a separator stays at the end of the piece before it
# (sentences keep their stop).
_SEPARATORS: tuple[str, ...] = (
    # Markdown headings, one level at a time: "\n" before "# ", then "## ", ...
    *(rf"\n(?=#{{{level}}}[ \t])" for level in range(1, 7)),
    # Fenced code blocks: before the opening fence line, after the closing one.
    rf"\n(?=[ ]{{0,3}}{_OPEN})|(?<={_CLOSE})[^\n]*\n",
    r"\n(?:[ \t]*\n)+",  # blank lines: paragraphs
    r"\n",
    r"[.!?]+[\"'”’)\]]*[ \t]+|[。！？；]+[”’」』）]*",  # sentence ends, English and Chinese
    r"[,;:][ \t]+|[，、：]",  # clauses
    r"[ \t]+",
    "",  # characters
)

_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})([^\n]*)$", re.MULTILINE)
_LINE_HASH = re.compile(r"(?<=\n)#")


def _mark_code(text: str) -> str:
    """``text`` with fenced code blocks marked for the separators, same length.

    The first character of an opening fence becomes ``_OPEN``, of its closing
    fence ``_CLOSE``, and a ``#`` starting a line inside the block ``_CODE_HASH``
    (a comment, not a heading).  A fence never closed is left alone.
    """
    if _OPEN in text or _CLOSE in text or _CODE_HASH in text:
        text = text.translate({ord(_OPEN): _NEUTRAL, ord(_CLOSE): _NEUTRAL, ord(_CODE_HASH): _NEUTRAL})
    marks: list[tuple[int, str]] = []
    opening: re.Match[str] | None = None
    for fence in _FENCE.finditer(text):
        run, info = fence.group(1), fence.group(2)
        if opening is None:
            if not (run[0] == "`" and "`" in info):  # CommonMark: no backtick in a ``` info string
                opening = fence
        elif run[0] == opening.group(1)[0] and len(run) >= len(opening.group(1)) and not info.strip():
            marks.append((opening.start(1), _OPEN))
            marks += [(m.start(), _CODE_HASH) for m in _LINE_HASH.finditer(text, opening.end(), fence.start())]
            marks.append((fence.start(1), _CLOSE))
            opening = None
    if not marks:
        return text
    parts, prev = [], 0
    for pos, mark in marks:
        parts += [text[prev:pos], mark]
        prev = pos + 1
    parts.append(text[prev:])
    return "".join(parts)


# Sentence ends for the sentence and semantic strategies: an English stop
# before whitespace, a Chinese one anywhere, or a line break.
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s)|[。！？；]+[”’」』）]*|\n")

# Where an added overlap may begin: a word after a space or a stop, or any CJK
# character (Chinese has no spaces between words).
_OVERLAP_START = re.compile(r"(?<=[\s.!?,;:。！？；，、：])\S|[\u3400-\u9fff\uf900-\ufaff]")

# An added overlap is looked for within this many characters per token of it.
_OVERLAP_CHARS_PER_TOKEN = 12


class _Piece(str):
    """A ``str`` that remembers its offset in the source text."""

    start: int

    def __new__(cls, text: str, start: int) -> Self:
        piece = super().__new__(cls, text)
        piece.start = start
        return piece


class _CachedCount:
    """``counter.count`` memoised for one document.

    The splitter measures each piece two or three times (when choosing whether
    to recurse, when merging, when dropping the overlap); this makes it once.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._count = counter.count
        self._memo: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self._memo.get(text)
        if n is None:
            n = self._memo[text] = self._count(text)
        return n


class _SpanSplitter(RecursiveCharacterTextSplitter):
    """``RecursiveCharacterTextSplitter`` whose chunks carry their offsets.

    ``_split_text`` mirrors langchain's (take the first separator present, split,
    merge the short pieces, recurse into the long ones) on :class:`_Piece`
    objects, finding separators in the marked text; ``_join_docs`` turns a merged
    run back into a piece.  The merge and overlap policy, ``_merge_splits``, is
    langchain's own.  Both overrides are of private methods, written against the
    pinned 1.1.3.
    """

    def __init__(self, *, chunk_tokens: int, overlap_tokens: int, count: Callable[[str], int], marked: str) -> None:
        """``marked`` is the whole source text through :func:`_mark_code`."""
        super().__init__(
            separators=list(_SEPARATORS),
            keep_separator="end",
            is_separator_regex=True,
            chunk_size=chunk_tokens,
            chunk_overlap=overlap_tokens,
            length_function=count,
            strip_whitespace=False,  # spans are stripped afterwards, exactly
        )
        self._patterns = {sep: re.compile(sep) for sep in _SEPARATORS if sep}
        self._marked = marked

    def spans(self, text: str, start: int, end: int) -> list[_Span]:
        """Cut ``text[start:end]``; the spans overlap or touch and cover it all."""
        pieces = self._split_text(_Piece(text[start:end], start), self._separators)
        return [(p.start, p.start + len(p)) for p in pieces if isinstance(p, _Piece)]

    @override
    def _split_text(self, text: str, separators: list[str]) -> list[str]:
        base = text.start if isinstance(text, _Piece) else 0
        separator, rest = "", []
        for i, sep in enumerate(separators):
            if not sep or self._patterns[sep].search(self._marked, base, base + len(text)):
                separator, rest = sep, separators[i + 1 :]
                break
        chunks: list[str] = []
        short: list[str] = []
        for piece in self._cut(text, base, separator):
            if self._length_function(piece) < self._chunk_size:
                short.append(piece)
                continue
            if short:
                chunks.extend(self._merge_splits(short, ""))
                short = []
            chunks.extend(self._split_text(piece, rest) if rest else [piece])
        if short:
            chunks.extend(self._merge_splits(short, ""))
        return chunks

    @override
    def _join_docs(self, docs: list[str], separator: str) -> str | None:
        first = docs[0] if docs else None
        if not isinstance(first, _Piece):
            return None
        return _Piece(separator.join(docs), first.start)

    def _cut(self, text: str, base: int, separator: str) -> list[_Piece]:
        if not separator:
            return [_Piece(ch, base + i) for i, ch in enumerate(text)]
        found = self._patterns[separator].finditer(self._marked, base, base + len(text))
        bounds = [m.end() - base for m in found]
        pieces = []
        prev = 0
        for end in [*bounds, len(text)]:
            if end > prev:
                pieces.append(_Piece(text[prev:end], base + prev))
                prev = end
        return pieces


def _strip(text: str, start: int, end: int) -> _Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _keep(spans: list[_Span], start: int, end: int) -> None:
    """Append a stripped span unless blank or inside the last; drop those inside it.

    After stripping, a chunk whose own part is only whitespace (langchain
    merges whitespace pieces too; a window may add only spaces) lands inside
    its neighbour, or its neighbour inside it; so can a re-cut window.
    """
    while spans and spans[-1][0] >= start and spans[-1][1] <= end:
        spans.pop()
    if start < end and not (spans and end <= spans[-1][1]):
        spans.append((start, end))


def _stripped(text: str, spans: Sequence[_Span]) -> list[_Span]:
    kept: list[_Span] = []
    for span in spans:
        _keep(kept, *_strip(text, *span))
    return kept


def _token_windows(counter: TokenCounter, text: str, start: int, end: int, size: int, overlap: int) -> list[_Span]:
    """Windows of at most ``size`` tokens over ``text[start:end]``, ``overlap`` shared.

    Cut on token boundaries regardless of structure, then stripped.
    """
    if isinstance(counter, TiktokenCounter):
        return _tiktoken_windows(counter, text, start, end, size, overlap)
    return _truncate_windows(counter, text, start, end, size, overlap)


@lru_cache(maxsize=4)
def _token_byte_lengths(encoding: tiktoken.Encoding) -> npt.NDArray[np.int64]:
    # The UTF-8 length of every token id, once per encoding (~0.1 s), instead
    # of a Python call per token of every document.
    lengths = np.zeros(encoding.n_vocab, dtype=np.int64)
    for token in range(encoding.n_vocab):
        try:
            lengths[token] = len(encoding.decode_single_token_bytes(token))
        except KeyError:  # ids with no token (gaps before the special tokens)
            pass
    return lengths


def _tiktoken_windows(
    counter: TiktokenCounter, text: str, start: int, end: int, size: int, overlap: int
) -> list[_Span]:
    # Encode once; map each token boundary (a byte offset) to a character
    # offset.  A boundary inside a multi-byte character (rare CJK, emoji) is
    # rounded up, so the character goes to the window its first bytes are in.
    encoding = counter.encoding
    sub = text[start:end]
    tokens = encoding.encode_ordinary(sub)
    if not tokens:
        return []
    lead = (np.frombuffer(sub.encode("utf-8"), dtype=np.uint8) & 0xC0) != 0x80
    chars_before = np.concatenate(([0], np.cumsum(lead)))
    token_bytes = _token_byte_lengths(encoding)[np.asarray(tokens, dtype=np.int64)]
    bounds: list[int] = (chars_before[np.concatenate(([0], np.cumsum(token_bytes)))] + start).tolist()
    spans: list[_Span] = []
    n, i = len(tokens), 0
    while True:
        j = min(i + size, n)
        # The window's text re-encoded alone can, rarely, take more tokens
        # (a rounded-up character, a different merge at its edges): shrink it.
        s, e = _strip(text, bounds[i], bounds[j])
        while j > i + 1 and s < e and counter.count(text[s:e]) > size:
            j -= 1
            s, e = _strip(text, bounds[i], bounds[j])
        _keep(spans, s, e)
        if j >= n:
            return spans
        i = max(i + 1, min(i + size - overlap, j))


def _truncate_windows(counter: TokenCounter, text: str, start: int, end: int, size: int, overlap: int) -> list[_Span]:
    # Any TokenCounter: truncate() finds each window's end, and the start of
    # its last ``overlap`` tokens, on a probe a few times the window's length.
    spans: list[_Span] = []
    pos = start
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return spans
        probe = size * 8
        while True:
            piece = text[pos : min(end, pos + probe)]
            head = counter.truncate(piece, size)
            if len(head) < len(piece) or pos + probe >= end:
                break
            probe *= 2
        cut = pos + max(len(head), 1)
        e = _strip(text, pos, cut)[1]
        while e > pos + 1 and counter.count(text[pos:e]) > size:  # dropping the edge space re-merged tokens
            e = cut = _strip(text, pos, e - 1)[1]
        _keep(spans, pos, e)
        if cut >= end:
            return spans
        keep = len(counter.truncate(head, size - overlap)) if overlap else len(head)
        pos = max(pos + 1, min(pos + keep, cut))


class _Cutter:
    """The shared machinery of one document: counts, splitters, limits."""

    def __init__(self, text: str, counter: TokenCounter) -> None:
        self.text = text
        self.counter = counter
        self.count = _CachedCount(counter)
        self._marked: str | None = None

    @property
    def marked(self) -> str:
        if self._marked is None:
            self._marked = _mark_code(self.text)
        return self._marked

    def recursive(self, start: int, end: int, size: int, overlap: int) -> list[_Span]:
        """Cut ``text[start:end]`` with the splitter; see :meth:`overlap` for the overlap."""
        splitter = _SpanSplitter(chunk_tokens=size, overlap_tokens=overlap, count=self.count, marked=self.marked)
        return self.fit(_stripped(self.text, splitter.spans(self.text, start, end)), size)

    def overlap(
        self, spans: Sequence[_Span], size: int, overlap: int, floors: Sequence[int] | None = None
    ) -> list[_Span]:
        """Give a chunk that does not overlap the one before it up to ``overlap`` tokens of its tail.

        langchain overlaps only inside a run of merged pieces, with whole pieces
        of at most ``chunk_overlap``: a paragraph or line longer than the overlap,
        or a long piece split on its own, leaves the next chunk without any.  Such
        a chunk is extended backwards to the earliest word start whose tail fits
        ``overlap`` while the chunk still fits ``size``, and never before
        ``floors[k]`` (a parent's start, so children stay inside).
        """
        text, out = self.text, list(spans[:1])
        for k in range(1, len(spans)):
            start, end = spans[k]
            prev_start, prev_end = out[-1]
            lo = max(prev_start + 1, floors[k] if floors else 0, prev_end - overlap * _OVERLAP_CHARS_PER_TOKEN)
            budget = min(overlap, size - self.count(text[start:end]))
            if start < prev_end or budget <= 0 or lo >= prev_end:
                out.append((start, end))
                continue
            starts = [m.start() for m in _OVERLAP_START.finditer(text, lo, prev_end)]
            # The tail's count falls as its start moves right: bisect for the
            # earliest start within budget, then step right until the whole fits.
            left, right = 0, len(starts)
            while left < right:
                mid = (left + right) // 2
                if self.counter.count(text[starts[mid] : prev_end]) <= budget:
                    right = mid
                else:
                    left = mid + 1
            while left < len(starts) and self.counter.count(text[starts[left] : end]) > size:
                left += 1
            out.append((starts[left], end) if left < len(starts) else (start, end))
        return out

    def windows(self, start: int, end: int, size: int, overlap: int) -> list[_Span]:
        return _token_windows(self.counter, self.text, start, end, size, overlap)

    def fit(self, spans: Sequence[_Span], size: int) -> list[_Span]:
        """Measure each span exactly; re-cut the rare one over ``size``.

        The splitter bounds the *sum* of its pieces' counts, which can differ
        from the count of their concatenation.
        """
        fitted: list[_Span] = []
        for s, e in spans:
            for span in [(s, e)] if self.count(self.text[s:e]) <= size else self.windows(s, e, size, 0):
                _keep(fitted, *span)
        return fitted

    def sentences(self, size: int) -> list[_Span]:
        """Sentences (lines count as ending one); one over ``size`` is cut recursively."""
        units: list[_Span] = []
        prev = 0
        for end in [*(m.end() for m in _SENTENCE_END.finditer(self.text)), len(self.text)]:
            s, e = _strip(self.text, prev, end)
            prev = max(prev, end)
            if s >= e:
                continue
            if self.count(self.text[s:e]) <= size:
                units.append((s, e))
            else:
                units.extend(self.recursive(s, e, size, 0))
        return units

    def pack(
        self, units: Sequence[_Span], size: int, overlap: int, breaks: frozenset[int] = frozenset()
    ) -> list[_Span]:
        """Whole units into chunks of at most ``size`` tokens.

        A chunk never spans a break (a unit index that must start a chunk);
        consecutive chunks share the trailing units worth at most ``overlap``
        tokens.  Units are at most ``size`` tokens each.
        """
        text = self.text
        # A unit's cost with the gap before it: the sum approximates the
        # chunk's count, which is then checked exactly.
        cost = [self.count(text[units[k - 1][1] if k else units[0][0] : e]) for k, (_, e) in enumerate(units)]
        chunks: list[_Span] = []
        first, reach = 0, 0  # ``reach``: the chunk must go past the previous one's last unit
        while first < len(units):
            last, total = first, self.count(text[units[first][0] : units[first][1]])
            while last + 1 < len(units) and last + 1 not in breaks and total + cost[last + 1] <= size:
                last += 1
                total += cost[last]
            while last > first and self.counter.count(text[units[first][0] : units[last][1]]) > size:
                last -= 1
            if last < reach:  # the overlap left no room for a new unit: drop it
                first = reach
                continue
            chunks.append((units[first][0], units[last][1]))
            nxt, shared = last + 1, 0
            if nxt < len(units) and nxt not in breaks:
                while (
                    nxt - 1 > first
                    and shared + cost[nxt - 1] <= overlap
                    and shared + cost[nxt - 1] + cost[last + 1] <= size
                ):
                    nxt -= 1
                    shared += cost[nxt]
            first, reach = nxt, last + 1
        return chunks


def _single_level(text: str, spans: Sequence[_Span]) -> ChunkTree:
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
        return _single_level(text, self._spans(_Cutter(text, self._counter)))

    def _spans(self, cut: _Cutter) -> list[_Span]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class _Fixed(_Strategy):
    def _spans(self, cut: _Cutter) -> list[_Span]:
        s = self._settings
        return cut.windows(0, len(cut.text), s.child_tokens, s.child_overlap)


class _Recursive(_Strategy):
    def _spans(self, cut: _Cutter) -> list[_Span]:
        s = self._settings
        spans = cut.recursive(0, len(cut.text), s.child_tokens, s.child_overlap)
        return cut.overlap(spans, s.child_tokens, s.child_overlap)


class _Sentence(_Strategy):
    def _spans(self, cut: _Cutter) -> list[_Span]:
        s = self._settings
        return cut.pack(cut.sentences(s.child_tokens), s.child_tokens, s.child_overlap)


class _Semantic(_Strategy):
    def __init__(self, name: str, settings: ChunkingSettings, counter: TokenCounter, embed: _Embed) -> None:
        super().__init__(name, settings, counter)
        self._embed = embed

    def _spans(self, cut: _Cutter) -> list[_Span]:
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
        cut = _Cutter(text, self._counter)
        parents = cut.recursive(0, len(text), s.parent_tokens, s.parent_overlap)
        parents = cut.overlap(parents, s.parent_tokens, s.parent_overlap)
        children: list[_Span] = []
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
