"""The normalised view of a text that PII rules run on, and the way back to the original's offsets.

Look-alikes are folded so that one rule sees one spelling: compatibility forms (full-width ``１``
and ``＠``, ``ﬁ``, superscripts) by NFKD, accents and other combining marks dropped (``é`` -> ``e``),
zero-width and other format characters (category ``Cf``: ``U+200B``, soft hyphen, bidi marks) dropped,
every Unicode decimal digit mapped to ASCII (Arabic-Indic ``٣`` -> ``3``), every space separator to
``" "`` and every dash to ``"-"``, and Cyrillic and Greek letters that look Latin to the Latin letter.
The redaction is applied to the original text: :meth:`NormalView.span` maps a span of the view back.

The view costs one pass: ASCII and CJK ideographs (which no step changes) are skipped by one regex, and
each other character is folded once per process (a cache).
"""  # noqa: RUF002  the full-width examples are what is folded

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["NormalView", "fold_char", "normal_view"]

#: Characters no step changes: skipped without a look-up.
_UNCHANGED = re.compile(r"[\x00-\x7f\u4e00-\u9fff]+")
#: Cyrillic and Greek letters drawn like Latin ones (the common confusables, not the whole table).
_LATIN_LOOKALIKES = str.maketrans(
    "аеорсухіјѕһԁԛԝАВЕКМНОРСТХІЈЅαοιρνκτΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxijshdqwABEKMHOPCTXIJSaoipvktABEZHIKMNOPTYX",
)
_DOTS = {"\u3002": ".", "\uff61": "."}


@lru_cache(maxsize=8192)
def fold_char(ch: str) -> str:
    """What one character becomes in the view: usually one character, ``""`` when dropped, a few for ligatures."""
    category = unicodedata.category(ch)
    if category == "Cf":
        return ""
    if category == "Nd":
        return str(unicodedata.decimal(ch))
    if category == "Zs":
        return " "
    if category == "Pd" or ch == "\u2212":
        return "-"
    if ch in _DOTS:
        return _DOTS[ch]
    decomposed = unicodedata.normalize("NFKD", ch)
    out = "".join(c for c in decomposed if not unicodedata.combining(c))
    return out.translate(_LATIN_LOOKALIKES)


@dataclass(frozen=True)
class NormalView:
    """``text`` folded, and for each of its characters the index of the original one it came from.

    ``origin`` is ``None`` when the view is the original (the usual case: nothing to fold).
    """

    text: str
    origin: list[int] | None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the view's ``text[start:end]`` (``end > start``): whole original characters."""
        if self.origin is None:
            return start, end
        return self.origin[start], self.origin[end - 1] + 1


def normal_view(text: str) -> NormalView:
    """The folded view of ``text`` (see the module docstring), in time linear in its length."""
    pieces: list[str] = []
    origin: list[int] = []
    changed = False
    last = 0
    for m in _UNCHANGED.finditer(text):
        changed |= _fold_run(text, last, m.start(), pieces, origin)
        pieces.append(m.group())
        origin.extend(range(m.start(), m.end()))
        last = m.end()
    changed |= _fold_run(text, last, len(text), pieces, origin)
    return NormalView("".join(pieces), origin) if changed else NormalView(text, None)


def _fold_run(text: str, start: int, end: int, pieces: list[str], origin: list[int]) -> bool:
    changed = False
    for i in range(start, end):
        folded = fold_char(text[i])
        changed |= folded != text[i]
        pieces.append(folded)
        origin.extend([i] * len(folded))
    return changed
