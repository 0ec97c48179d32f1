"""How a text is cut into spans: the machinery every chunking strategy shares.

A :class:`Cutter` holds one document and its token counts, and offers the cuts
the strategies in :mod:`strata.semantic.chunking` combine: recursive splitting
on Markdown, paragraph, sentence and clause boundaries, token windows, sentences,
packing whole units, and the overlap added afterwards. Spans are ``(start, end)``
character offsets into the document.

The recursive splitting is langchain-text-splitters' ``RecursiveCharacterTextSplitter``
(its separator choice, merge and overlap policy).  Its ``add_start_index`` is not
used: it looks each chunk up with ``str.find`` from ``chunk_overlap`` *characters*
before the previous chunk's end, which with a token length function starts past
the real position and finds a later copy or nothing.  :class:`_SpanSplitter`
instead carries every piece's offset through the recursion.  langchain's
overlap is also rare on real text (see :meth:`Cutter.overlap`); a chunk left
without one gets the tail of the chunk before it, within both limits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Self

import numpy as np
import numpy.typing as npt
import tiktoken
from langchain_text_splitters import RecursiveCharacterTextSplitter
from typing_extensions import override

from strata.providers.tokens import TiktokenCounter, TokenCounter

__all__ = ["Cutter", "Span"]

#: ``(start, end)``: character offsets into the document, end exclusive.
Span = tuple[int, int]


# Separators are matched on a copy of the text in which fenced code blocks are
# marked (see _mark_code): same length and offsets, so pieces and their token
# counts come from the real text.
_OPEN, _CLOSE, _CODE_HASH, _NEUTRAL = "\x02", "\x03", "\x01", "\x04"

# Most structural first.  Regexes only (no capturing groups); each boundary falls
# at a match's end, so a separator stays at the end of the piece before it
# (sentences keep their stop).  Only that end counts, so an English stop is
# matched from the last character of its run of ``.!?``: from the first, every
# character of a long run not followed by a space would be a start that scans
# to the run's end and fails.
_SEPARATORS: tuple[str, ...] = (
    # Markdown headings, one level at a time: "\n" before "# ", then "## ", ...
    *(rf"\n(?=#{{{level}}}[ \t])" for level in range(1, 7)),
    # Fenced code blocks: before the opening fence line, after the closing one.
    rf"\n(?=[ ]{{0,3}}{_OPEN})|(?<={_CLOSE})[^\n]*\n",
    r"\n(?:[ \t]*\n)+",  # blank lines: paragraphs
    r"\n",
    r"[.!?](?![.!?])[\"'”’)\]]*+[ \t]+|[。！？；]+[”’」』）]*",  # sentence ends, English and Chinese
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
# before whitespace, a Chinese one anywhere, or a line break (only the end of a
# match counts; matched from a run's last ``.!?``, as in _SEPARATORS).
_SENTENCE_END = re.compile(r"[.!?](?![.!?])[\"'”’)\]]*+(?=\s)|[。！？；]+[”’」』）]*|\n")

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

    def spans(self, text: str, start: int, end: int) -> list[Span]:
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


def _strip(text: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _keep(spans: list[Span], start: int, end: int) -> None:
    """Append a stripped span unless blank or inside the last; drop those inside it.

    After stripping, a chunk whose own part is only whitespace (langchain
    merges whitespace pieces too; a window may add only spaces) lands inside
    its neighbour, or its neighbour inside it; so can a re-cut window.
    """
    while spans and spans[-1][0] >= start and spans[-1][1] <= end:
        spans.pop()
    if start < end and not (spans and end <= spans[-1][1]):
        spans.append((start, end))


def _stripped(text: str, spans: Sequence[Span]) -> list[Span]:
    kept: list[Span] = []
    for span in spans:
        _keep(kept, *_strip(text, *span))
    return kept


def _token_windows(counter: TokenCounter, text: str, start: int, end: int, size: int, overlap: int) -> list[Span]:
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
        try:  # noqa: SIM105  a bare try costs nothing per token; suppress() is a call in and out of each
            lengths[token] = len(encoding.decode_single_token_bytes(token))
        except KeyError:  # ids with no token (gaps before the special tokens)
            pass
    return lengths


def _tiktoken_windows(
    counter: TiktokenCounter, text: str, start: int, end: int, size: int, overlap: int
) -> list[Span]:
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
    spans: list[Span] = []
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


def _truncate_windows(counter: TokenCounter, text: str, start: int, end: int, size: int, overlap: int) -> list[Span]:
    # Any TokenCounter: truncate() finds each window's end, and the start of
    # its last ``overlap`` tokens, on a probe a few times the window's length.
    spans: list[Span] = []
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


class Cutter:
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

    def recursive(self, start: int, end: int, size: int, overlap: int) -> list[Span]:
        """Cut ``text[start:end]`` with the splitter; see :meth:`overlap` for the overlap."""
        splitter = _SpanSplitter(chunk_tokens=size, overlap_tokens=overlap, count=self.count, marked=self.marked)
        return self.fit(_stripped(self.text, splitter.spans(self.text, start, end)), size)

    def overlap(
        self, spans: Sequence[Span], size: int, overlap: int, floors: Sequence[int] | None = None
    ) -> list[Span]:
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

    def windows(self, start: int, end: int, size: int, overlap: int) -> list[Span]:
        return _token_windows(self.counter, self.text, start, end, size, overlap)

    def fit(self, spans: Sequence[Span], size: int) -> list[Span]:
        """Measure each span exactly; re-cut the rare one over ``size``.

        The splitter bounds the *sum* of its pieces' counts, which can differ
        from the count of their concatenation.
        """
        fitted: list[Span] = []
        for s, e in spans:
            for span in [(s, e)] if self.count(self.text[s:e]) <= size else self.windows(s, e, size, 0):
                _keep(fitted, *span)
        return fitted

    def sentences(self, size: int) -> list[Span]:
        """Sentences (lines count as ending one); one over ``size`` is cut recursively."""
        units: list[Span] = []
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
        self, units: Sequence[Span], size: int, overlap: int, breaks: frozenset[int] = frozenset()
    ) -> list[Span]:
        """Whole units into chunks of at most ``size`` tokens.

        A chunk never spans a break (a unit index that must start a chunk);
        consecutive chunks share the trailing units worth at most ``overlap``
        tokens.  Units are at most ``size`` tokens each.
        """
        text = self.text
        # A unit's cost with the gap before it: the sum approximates the
        # chunk's count, which is then checked exactly.
        cost = [self.count(text[units[k - 1][1] if k else units[0][0] : e]) for k, (_, e) in enumerate(units)]
        chunks: list[Span] = []
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
