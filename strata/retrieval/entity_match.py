"""Finding a graph's known entities in a query's text, by the surface forms of their keys.

A key is indexed under its Latin *form* (its word tokens joined by spaces) and, when it holds
CJK, as itself. :meth:`EntityMatcher.match` then reads a query as word n-grams (Latin) and
substrings (CJK), longest first. Which node a key belongs to is the graph's to say (aliases
resolve at read time), so the matcher is given the graph's resolution as ``canon``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from strata.retrieval.entities.extraction import CJK_CHAR, fold_text
from strata.retrieval.terms import ENGLISH_STOP_WORDS

__all__ = ["LATIN_TOKEN", "EntityMatcher", "latin_form", "singulars"]

#: The longest Latin n-gram a query is read in.
_MAX_NGRAM = 6

#: One Latin word token of folded text (dotted, hyphenated and slashed words stay one token).
LATIN_TOKEN = re.compile(
    r"[0-9a-z_\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]+"
    r"(?:[.'\-/][0-9a-z_\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]+)*[+#]*"
)


def latin_form(key: str) -> str:
    """The word tokens of a key joined by spaces: what query n-grams are compared with."""
    return " ".join(LATIN_TOKEN.findall(key))


def singulars(word: str) -> list[str]:
    """The singular forms ``word`` may be a plural or possessive of (none for most words)."""
    out = []
    if word.endswith("'"):
        out.append(word[:-1])
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        out.append(word[:-1])
        if word.endswith("ies"):
            out.append(word[:-3] + "y")
        elif word.endswith("es"):
            out.append(word[:-2])
    return out


class EntityMatcher:
    """The lookup forms of the live entity keys of one graph (not thread-safe, as the graph)."""

    def __init__(self) -> None:
        self._forms: dict[str, set[str]] = {}  # Latin token form -> live keys
        # The first words of the forms of two words or more, and how many forms have each word
        # count: a query's n-grams longer than one word are tried only where a form starts,
        # and no longer than the longest form (a 16,000-character query tried six per word).
        self._form_starts: Counter[str] = Counter()
        self._form_lengths: Counter[int] = Counter()
        self._cjk: dict[str, set[str]] = {}  # key with CJK -> live keys (itself)
        self._cjk_lengths: Counter[int] = Counter()

    def add(self, key: str) -> None:
        """Index a key that has become live (mentioned, or an alias)."""
        if CJK_CHAR.search(key):
            self._cjk.setdefault(key, set()).add(key)
            self._cjk_lengths[len(key)] += 1
        form = latin_form(key)
        if form:
            if form not in self._forms:
                self._count_form(form, 1)
            self._forms.setdefault(form, set()).add(key)

    def discard(self, key: str) -> None:
        """Forget a key that no source mentions or gives as an alias any more."""
        if key in self._cjk:
            del self._cjk[key]
            self._cjk_lengths[len(key)] -= 1
            if not self._cjk_lengths[len(key)]:
                del self._cjk_lengths[len(key)]
        form = latin_form(key)
        keys = self._forms.get(form)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._forms[form]
                self._count_form(form, -1)

    def _count_form(self, form: str, step: int) -> None:
        """Count a Latin form in (``step`` 1) or out (-1) of the lengths and first words that
        bound :meth:`match`'s n-grams; a count that reaches 0 leaves no entry."""
        words = form.split(" ")
        counted: list[tuple[Counter[Any], Any]] = [(self._form_lengths, len(words))]
        if len(words) > 1:
            counted.append((self._form_starts, words[0]))
        for counts, item in counted:
            counts[item] += step
            if counts[item] <= 0:
                del counts[item]

    def match(self, query: str, canon: Callable[[str], str]) -> list[str]:
        """Nodes (``canon`` of the keys) that ``query`` mentions, in order of appearance.

        Latin text: word n-grams (up to six words), longest first, by key or
        alias, case-insensitively, with plural and possessive folding. CJK
        text: substring search over known names, longest first.
        """
        text = " ".join(fold_text(query).split())
        found: dict[str, None] = {}
        tokens = LATIN_TOKEN.findall(text)
        longest = min(_MAX_NGRAM, max(self._form_lengths, default=1))
        words: dict[str, str | None] = {}  # a word's lookup, once per query however often it recurs
        i = 0
        while i < len(tokens):
            most = min(longest, len(tokens) - i) if tokens[i] in self._form_starts else 1
            for n in range(most, 0, -1):
                if n == 1:
                    if tokens[i] not in words:
                        words[tokens[i]] = self.lookup_form(tokens[i : i + 1], canon)
                    node = words[tokens[i]]
                else:
                    node = self.lookup_form(tokens[i : i + n], canon)
                if node is not None:
                    found.setdefault(node)
                    i += n
                    break
            else:
                i += 1
        if self._cjk:
            for node in self._match_cjk(text, canon):
                found.setdefault(node)
        return list(found)

    def lookup_form(self, words: list[str], canon: Callable[[str], str]) -> str | None:
        """The node one n-gram of query words names, or None."""
        if len(words) == 1 and (words[0] in ENGLISH_STOP_WORDS or (len(words[0]) < 2 and not words[0].isdigit())):
            return None
        last = words[-1]
        variants = [last]
        if last.endswith("'s"):
            variants.append(last[:-2])
        variants += singulars(last)
        for v in variants:
            keys = self._forms.get(" ".join([*words[:-1], v]))
            if keys:
                return min(canon(k) for k in keys)
        return None

    def _match_cjk(self, text: str, canon: Callable[[str], str]) -> list[str]:
        lengths = sorted(self._cjk_lengths, reverse=True)
        out: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if not (CJK_CHAR.match(ch) or (ch.isalnum() and (i == 0 or not text[i - 1].isalnum()))):
                i += 1
                continue
            for length in lengths:
                keys = self._cjk.get(text[i : i + length])
                if keys:
                    out.append(min(canon(k) for k in keys))
                    i += length
                    break
            else:
                i += 1
        return out
