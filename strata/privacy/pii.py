"""PII detection, run on text before any layer writes it.

A :class:`Detector` finds spans (:class:`Finding`); :class:`~strata.privacy.redaction.Redactor` applies the
tenant's policy to each. Placeholders are never detected again: redacting twice changes nothing.

:class:`RuleDetector` (the default, no dependencies) pairs each shape with a check, because memory text is
full of numbers: Luhn and an issuer prefix for cards, MOD 11-2 and a real birth date for Chinese ids, mod-97
and the country's length for IBANs, separators and the words just before (``Order #``, ``订单号``,
``version``) for phones and IPs, the words before for SSNs without dashes and for passports. Every rule runs
on a normalised view of the text (:mod:`~strata.privacy.normalize`: full-width, Arabic-Indic, zero-width and
look-alike characters folded) and the finding is mapped back to the original. Not detected: names and addresses
(only with Presidio), ``user@localhost`` (no dotted domain), phones without separators other than Chinese
mobiles, 7-digit local numbers, 15-digit ids, passports not after the word, credentials inside URLs, and
secrets not after a known key word (``password``, ``api_key``, ``token``, ``密码``, ...) unless they have a
known token shape (``sk-``, ``AKIA``, a JWT, ...).

Every pattern runs in time linear in the text (tests/unit/test_pii_linear.py times each adversarial family
at n and 4n characters). One module, a little over 500 lines, on purpose: each rule's pattern sits beside
the check that accepts its matches and the specificity that settles overlaps, and a reader auditing one
type of PII needs all three together.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
import re
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol

from strata.config import PII_TYPES, PIISettings
from strata.privacy.normalize import fold_char, normal_view

__all__ = [
    "IBAN_LENGTHS", "Detector", "Finding", "MergedDetector", "PresidioDetector", "RuleDetector",
    "cn_id_check_char", "iban_valid", "luhn_valid", "make_detector", "resolve", "spelled_email",
]  # fmt: skip

log = logging.getLogger(__name__)

#: Of two overlapping findings of the same length, the earlier type here wins.
_SPECIFICITY = ("secret", "cn_id", "card", "iban", "ssn", "passport", "email", "ip", "phone", "person", "address")
_PLACEHOLDER = re.compile(r"\[(?:" + "|".join(t.upper() for t in PII_TYPES) + r")(?::[0-9a-f]{8})?\]")


@dataclass(frozen=True)
class Finding:
    """One detected value: ``text[start:end]``, of ``type`` (one of ``PII_TYPES``)."""

    type: str
    start: int
    end: int


class Detector(Protocol):
    """Finds PII in a text. Findings are non-overlapping and sorted by ``start``."""

    def find(self, text: str) -> list[Finding]: ...


def resolve(candidates: Iterable[Finding], text: str) -> list[Finding]:
    """Non-overlapping findings: the longest wins, then the more specific type; none inside a placeholder."""
    # One byte per character marks what is taken: each candidate is checked and claimed in time of its own
    # length (a C scan), not against every finding kept so far.
    taken = bytearray(len(text))
    for m in _PLACEHOLDER.finditer(text):
        taken[m.start() : m.end()] = b"\x01" * (m.end() - m.start())
    rank = {t: i for i, t in enumerate(_SPECIFICITY)}
    kept: list[Finding] = []
    for f in sorted(set(candidates), key=lambda f: (f.start - f.end, rank.get(f.type, 99), f.start)):
        if 0 <= f.start < f.end <= len(text) and taken.find(1, f.start, f.end) == -1:
            kept.append(f)
            taken[f.start : f.end] = b"\x01" * (f.end - f.start)
    return sorted(kept, key=lambda f: f.start)


# --- checksums ------------------------------------------------------------------


def luhn_valid(digits: str) -> bool:
    """The Luhn check of card numbers (``digits`` only)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return bool(digits) and total % 10 == 0


def cn_id_check_char(first17: str) -> str:
    """The ISO 7064 MOD 11-2 check character of an 18-character Chinese resident id."""
    total = sum(int(d) * (2 ** (17 - i) % 11) for i, d in enumerate(first17))
    return "10X98765432"[total % 11]


def iban_valid(iban: str) -> bool:
    """mod-97 of an IBAN written without spaces (country letters, check digits, account)."""
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


# --- rules ----------------------------------------------------------------------

#: Top-level domains of other scripts, as the normalised view spells them
#: (``рф`` has a look-alike ``р``).  # noqa: RUF003  the Cyrillic letters are the point
_IDN_TLDS = "|".join(
    "".join(map(fold_char, tld))
    for tld in (
        "中国", "中國", "公司", "网络", "網絡", "香港", "台湾", "台灣", "新加坡",
        "рф", "рус", "укр", "бел", "срб", "қаз", "онлайн", "сайт",  # noqa: RUF001  Cyrillic top-level domains
    )
)
# Domain labels may be of any script (``例子.中国``), but Chinese ones are all Chinese: Chinese text runs on from an
# address (``a@b.cn和c@d.cn``). An ASCII top-level domain ends at the first non-ASCII letter (``a@b.com请回复``),
# another script's is one of the short list above.
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]*[A-Za-z0-9_%+-])?"
    rf"@(?:(?:[^\W_\u4e00-\u9fff](?:[^\W\u4e00-\u9fff]|-){{0,62}}|[\u4e00-\u9fff]{{1,63}})\.)+"
    rf"(?:[A-Za-z]{{2,24}}|{_IDN_TLDS})(?![A-Za-z0-9-])"
)
#: ``tom [at] example [dot] org``, ``tom(at)example.org``, ``lucy at gmail dot com``: a bracketed ``at`` is
#: enough; a bare `` at `` needs a known top-level domain and a name that is not a common word (``look at``).
_SPELLED_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])(?P<local>[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,63}[A-Za-z0-9_%+-])?)"
    r"(?:\s{0,3}[\[({<]\s{0,3}at\s{0,3}[\])}>]\s{0,3}|(?P<bare> at ))"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:(?:\s{0,3}[\[({<]\s{0,3}dot\s{0,3}[\])}>]\s{0,3}| dot |\.)"
    r"(?P<label>[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)){1,4}"
    r"(?![A-Za-z0-9-])",
    re.IGNORECASE,
)
_SPELLED_AT = re.compile(r"\s*(?:[\[({<]\s*at\s*[\])}>]| at )\s*", re.IGNORECASE)
_SPELLED_DOT = re.compile(r"\s*(?:[\[({<]\s*dot\s*[\])}>]| dot )\s*", re.IGNORECASE)
_COMMON_TLDS = frozenset(
    (
        "com", "org", "net", "edu", "gov", "io", "co", "cn", "uk", "de", "fr", "jp", "ru", "es", "it", "nl",
        "info", "biz", "me", "us", "ca", "au", "in", "br", "ch", "se",
    )
)
_NOT_A_NAME = frozenset(
    (
        "look", "looked", "looking", "stay", "stayed", "meet", "met", "arrive", "arrived", "work", "works",
        "worked", "working", "me", "us", "him", "her", "them", "it", "is", "are", "was", "were", "be",
        "here", "there", "this", "that", "what", "who", "found", "buy", "bought", "sold", "listed", "posted",
        "shop", "visit", "go", "went", "check", "sit", "sat",
    )
)
_PHONES = (
    # +CC and groups: +44 20 7946 0958, +1 (415) 555-0132, +44 (0)20 7946 0958, +8613800138000
    re.compile(r"(?:\(\+\d{1,3}\)|\+\d{1,3})(?:[ .\-]?\(\d{1,4}\)|[ .\-]?\d{1,5}){1,6}"),
    # North America: (415) 555-0132, 415-555-0132, 1-800-555-0199
    re.compile(r"(?:1([ .\-]))?(?:\([2-9]\d\d\) ?\d{3}[ .\-]\d{4}|[2-9]\d\d([ .\-])\d{3}\2\d{4})"),
    # a trunk 0 and one kind of separator: 020 7946 0958, 06 12 34 56 78, 089/1234567, 010-62345678
    re.compile(r"\(0[1-9]\d{0,3}\) ?\d{3,4}[ \-]?\d{3,4}|0[1-9]\d{0,3}([ /.\-])\d{2,8}(?:\1\d{2,8}){0,3}"),
    # Chinese mobiles: 13800138000, 138 0013 8000, 138 001 38000, +86 139-1234-5678, 8613712345678
    re.compile(r"(?:(?:\+|00)?86[ \-]?)?1[3-9]\d(?:(?:[ \-]?\d{4}){2}|[ \-]\d{3}[ \-]\d{5})"),
)
# Groups of 4 (Amex 4-6-5) with any of the separators, even mixed, or one digit at a time (never starting
# inside such a run): a card inside a longer run of groups is ruled out by _in_digit_run.
_CARD_SEP = r"[ .\-/]"
_CARD = re.compile(
    rf"(?<!\d)(?:\d{{4}}{_CARD_SEP}\d{{4}}{_CARD_SEP}\d{{4}}{_CARD_SEP}\d{{1,4}}(?:{_CARD_SEP}\d{{1,3}})?"
    rf"|\d{{4}}{_CARD_SEP}\d{{6}}{_CARD_SEP}\d{{4,5}}|\d{{13,19}}|(?<!\d )\d(?: \d){{12,18}}(?! \d))(?!\d)"
)
#: Visa; Mastercard 51-55, 2221-2720; Amex; Diners; Discover, UnionPay, JCB: prefix and lengths.
_ISSUERS: tuple[tuple[re.Pattern[str], Collection[int]], ...] = tuple(
    (re.compile(prefix), lengths)
    for prefix, lengths in (
        ("4", (13, 16, 19)), ("5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720", (16,)), ("3[47]", (15,)),
        ("3(?:0[0-5]|[68])", (14,)), ("6011|6[25]|64[4-9]|35", range(16, 20)),
    )
)  # fmt: skip
# 6-8-4 or 6-4-4-4, separators mixed or none: the checksum and the birth date keep it precise.
_CN_ID = re.compile(r"(?<!\d)\d{6}[ .\-]?(?:\d{8}|\d{4}[ .\-]?\d{4})[ .\-]?\d{3}[\dXx](?![0-9A-Za-z])")
_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?:(?:[ \-][A-Za-z0-9]{4}){2,7}(?:[ \-][A-Za-z0-9]{1,4})?|[A-Za-z0-9]{11,30})"
)
#: US social security numbers: dashed, or else after the words; never area 000, 666 or 9xx, group 00, serial 0000.
_SSN = re.compile(r"(?<![\d\-])(?!000|666|9)\d{3}([ \-]?)(?!00)\d{2}\1(?!0000)\d{4}(?![\d\-])")
_SSN_CONTEXT = re.compile(r"(?<![A-Za-z])(?:ssn|social security)(?![A-Za-z])", re.IGNORECASE)
#: A passport number only after the word: 6-9 letters and digits, at least two digits.
_PASSPORT = re.compile(
    r"(?:passport|passeport|pasaporte|reisepass|护照|護照)"
    r"(?:\s*+(?:no\.?|number|num\.?|nr\.?|is|was|号码|號碼|号|號|是|为|為|[:.,#]))*+\s*+"
    r"(?<![A-Za-z0-9])(?P<value>[A-Za-z0-9]{6,9})(?![A-Za-z0-9])",
    re.IGNORECASE,
)
#: An AWS key id typed in lower or mixed case (its alphabet is base32; a digit tells it from ``AsiaPacific...``).
_AWS_ANY_CASE = re.compile(r"(?<![A-Za-z0-9_\-])(?:akia|asia)[a-z2-7]{16}(?![A-Za-z0-9_\-])", re.IGNORECASE)
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\dA-Za-z])(?<!\d\.){_OCTET}(?:\.{_OCTET}){{3}}(?!\d|\.\d)")
_IPV6 = re.compile(r"(?<![0-9A-Za-z_:.])[0-9A-Fa-f]*:[0-9A-Fa-f:.]*")
# Every pattern here runs on every write and query, so none may backtrack more than a bounded distance from
# where it starts, nor start at every character of a long run only to fail at its end: a token's start is
# pinned by a lookbehind, possessive quantifiers (``*+``) give nothing back, and what a regex would have to
# search ahead for (a key block's end line) is found once per text.
_SECRETS = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-(?:proj-|strata-)?[A-Za-z0-9_\-]{20,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|gh[opsur]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255}"
    r"|xox[baprs]-[A-Za-z0-9\-]{10,}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|[sr]k_(?:live|test)_[0-9A-Za-z]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
    r")(?![A-Za-z0-9_\-])"
    r"|(?P<begin>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----)"
)
#: A PEM private key runs from its BEGIN line to the first END line after it, or else over the base64 lines
#: that follow the BEGIN line (a key pasted without its end).
_KEY_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_KEY_END_AT = re.compile(rf"(?={_KEY_END.pattern})")
_KEY_LINES = re.compile(r"(?:\s+[A-Za-z0-9+/=]{16,})+")
#: A key word and what follows it. The word may end a dotted or dashed name (``db.password``,
#: ``OPENAI_API_KEY``): the lookbehind admits it after any separator without matching the name before it.
_ASSIGN_EN = re.compile(
    r"(?<![A-Za-z0-9])"
    r"(?P<key>password|passwd|passphrase|secret|client[_\-]?secret|secret[_\-]?key|api[_\-]?key|apikey"
    r"|access[_\-]?key|private[_\-]?key|token|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token)"
    r"[\"']?(?:\s*+[:=：]\s*+|\s++is\s++)"
    # a quoted value, or printable ASCII up to a quote, comma, semicolon or space
    r"(?:\"(?P<dq>[^\"\n]{1,200})\"|'(?P<sq>[^'\n]{1,200})'|(?P<bare>[\x21\x23-\x26\x28-\x2b\x2d-\x3a\x3c-\x7e]+))",
    re.IGNORECASE,
)
_ASSIGN_ZH = re.compile(r"(?P<key>密码|口令|密钥|秘钥|令牌)\s*(?:是|为|[:：=])\s*(?P<bare>[!-~]+)")
#: Values after a key word that are not secrets: templates, masks, literals, and code (``self._token``,
#: ``settings.api_key``, ``re.compile(``, ``OPENAI_API_KEY``).
_NOT_A_VALUE = re.compile(
    r"^(?:\$|\{\{|<|%\(|\*+$|x{3,}$|\.\.\.|(?:null|none|true|false)$"
    r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\(|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$|(?=[a-z]*+_)[a-z_]*+$)",
    re.IGNORECASE,
)
#: Words just before a number that make it an id, not a phone or a card.
_ID_CONTEXT = re.compile(
    r"(?<![A-Za-z])(?:order|invoice|tracking|isbn|sku|ref|serial|ticket|case|id|qq|version|ver|build|release"
    r"|订单|单号|编号|运单|快递|工单|序号|流水|版本|批次|发票)\s*(?:号|no\.?|number|#|id)?\s*[.:：#=]?\s*$",
    re.IGNORECASE,
)
_VERSION_CONTEXT = re.compile(
    r"(?<![A-Za-z])(?:version|ver|release|build|版本)\s*(?:号)?\s*[.:：#=]?\s*$", re.IGNORECASE
)
_CN_PROVINCES = frozenset(str(n) for a, b in ((11, 15), (21, 23), (31, 37), (41, 46), (50, 54), (61, 65), (71, 71),
                                                (81, 83)) for n in range(a, b + 1))
#: IBAN length per country (SWIFT registry); other countries: 15-34.
IBAN_LENGTHS = {c: int(n) for c, n in re.findall(r"([A-Z]{2})(\d\d)", (
    "AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BR29 CH21 CR22 CY28 CZ24 DE22 DK18 DO28 EE20 EG29 ES24 FI18 FO18"
    " FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21 HU28 IE22 IL23 IQ23 IS26 IT27 JO30 KW30 KZ20 LB28 LC32 LI21 LT20 LU20"
    " LV21 MC27 MD24 ME22 MK19 MR27 MT31 MU30 NL18 NO15 PK24 PL28 PS29 PT25 QA29 RO24 RS22 SA24 SC31 SE24 SI19 SK24"
    " SM27 TN24 TR26 UA29 VG24 XK20"
))}  # fmt: skip


def _embedded(text: str, start: int, end: int) -> bool:
    """Whether a number is part of a longer token (``SF1234...``, ``2024-05-12``, ``v1.2``)."""
    before = text[start - 1] if start else ""
    after = text[end] if end < len(text) else ""
    if (before.isascii() and before.isalnum()) or (after.isascii() and after.isalnum()):
        return True
    prev = text[start - 2] if start >= 2 else ""
    if before and before in ".-/:_" and (prev.isdigit() or (before in "-_" and prev.isascii() and prev.isalnum())):
        return True  # "Tel:555..." is a phone, "ID-555..." and "2024-05..." are not
    nxt = text[end + 1] if end + 1 < len(text) else ""
    return bool(after) and after in ".-/:_" and (nxt.isdigit() or (after != "." and nxt.isascii() and nxt.isalnum()))


def _in_digit_run(text: str, start: int, end: int) -> bool:
    """Whether the span's digit groups go on before or after it (``5500 0000 0000 0005``: not a phone)."""
    seps = set(text[start:end]) & set(" .-/")
    before = start >= 2 and text[start - 1] in seps and text[start - 2].isdigit()
    return before or (end + 1 < len(text) and text[end] in seps and text[end + 1].isdigit())


def _isolated_number_fails(text: str, start: int, end: int) -> bool:
    """Whether a phone- or card-shaped number is part of a longer one, or an id by the words before it."""
    context = _ID_CONTEXT.search(text[max(0, start - 24) : start]) is not None
    return context or _embedded(text, start, end) or _in_digit_run(text, start, end)


def _card_ok(digits: str) -> bool:
    issuer = any(prefix.match(digits) and len(digits) in lengths for prefix, lengths in _ISSUERS)
    return issuer and luhn_valid(digits)


def _cn_id_ok(value: str) -> bool:
    value = value.upper()
    if value[:2] not in _CN_PROVINCES or cn_id_check_char(value[:17]) != value[17]:
        return False
    try:
        born = date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return date(1900, 1, 1) <= born <= date.today()


def _iban_end(text: str, start: int, end: int) -> int | None:
    """Where the IBAN starting at ``start`` ends inside the candidate, or ``None`` if it is not one."""
    positions = [i for i in range(start, end) if text[i] not in " -"]
    known = IBAN_LENGTHS.get(text[start : start + 2].upper())
    for length in [known] if known else range(min(len(positions), 34), 14, -1):
        if length is None or length > len(positions):
            continue
        stop = positions[length - 1] + 1
        if text[stop : stop + 1].isascii() and text[stop : stop + 1].isalnum():
            continue  # would cut a group or a word in two
        if iban_valid("".join(text[i] for i in positions[:length]).upper()):
            return stop
    return None


def _ipv6_ok(value: str) -> bool:
    # "ab::cd" or "::1" in code and prose are rarely addresses; a digit and two groups (``fe80::1``) are.
    # Checked before parsing, which costs more than the rest of a finding: text full of "a:" stays cheap.
    groups = [g for g in value.split(":") if g]
    if "." not in value and not (len(groups) >= 2 and any(ch.isdigit() for ch in value) and max(map(len, groups)) >= 3):
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


def _secret_value_ok(key: str, value: str) -> bool:
    if len(value) < 4 or _NOT_A_VALUE.search(value):
        return False
    # a token, also as the last word of a name (``access_token``), is held to a token's length
    if re.split(r"[_\-]", key)[-1].lower() == "token" and (len(value) < 8 or value.isdigit()):
        return False
    # English keys in prose are followed by words ("password: click the link"); secrets have digits or symbols
    plain = value.isalpha() and (value.islower() or value.isupper() or value.istitle())
    return not plain or len(value) >= 12


class RuleDetector:
    """The default detector: regular expressions with checksums and context, no dependencies.

    Detects ``email``, ``phone``, ``card``, ``cn_id``, ``iban``, ``ip`` and ``secret``
    (what it leaves out is listed in the module docstring).
    """

    def find(self, text: str) -> list[Finding]:
        """The PII in ``text``, sorted and non-overlapping.

        Args:
            text: any text, English, Chinese or mixed.
        """
        view = normal_view(text)
        found = resolve(self._candidates(view.text), view.text)
        if view.origin is None:
            return found
        out: list[Finding] = []
        for f in found:  # two findings in one folded character (a ligature) would overlap in the original
            start, end = view.span(f.start, f.end)
            if not out or out[-1].end <= start:
                out.append(Finding(f.type, start, end))
        return out

    def _candidates(self, text: str) -> Iterator[Finding]:
        for m in _EMAIL.finditer(text):
            yield Finding("email", m.start(), m.end())
        for m in _SPELLED_EMAIL.finditer(text):
            if not m.group("bare") or (
                m.group("label").lower() in _COMMON_TLDS and m.group("local").lower() not in _NOT_A_NAME
            ):
                yield Finding("email", m.start(), m.end())
        yield from self._phones(text)
        for m in _CARD.finditer(text):
            if _card_ok(re.sub(r"\D", "", m.group())) and not _isolated_number_fails(text, *m.span()):
                yield Finding("card", m.start(), m.end())
        for m in _CN_ID.finditer(text):
            if _cn_id_ok(re.sub(r"[ .\-]", "", m.group())) and not _embedded(text, *m.span()):
                yield Finding("cn_id", m.start(), m.end())
        for m in _IBAN.finditer(text):
            stop = _iban_end(text, m.start(), m.end())
            if stop is not None:
                yield Finding("iban", m.start(), stop)
        for m in _SSN.finditer(text):
            context = _SSN_CONTEXT.search(text[max(0, m.start() - 32) : m.start()]) is not None
            if (context or (m.group(1) == "-" and not _isolated_number_fails(text, *m.span()))) and not _embedded(
                text, *m.span()
            ):
                yield Finding("ssn", m.start(), m.end())
        for m in _PASSPORT.finditer(text):
            if sum(ch.isdigit() for ch in m.group("value")) >= 2:
                yield Finding("passport", *m.span("value"))
        for m in _IPV4.finditer(text):
            if not _VERSION_CONTEXT.search(text[max(0, m.start() - 16) : m.start()]):
                yield Finding("ip", m.start(), m.end())
        for m in _IPV6.finditer(text):
            value = m.group().rstrip(".")
            value = value[:-1] if value.endswith(":") and not value.endswith("::") else value
            after = text[m.start() + len(value) : m.start() + len(value) + 1]
            if not (after.isascii() and (after.isalnum() or after == "_")) and _ipv6_ok(value):
                yield Finding("ip", m.start(), m.start() + len(value))
        yield from self._secrets(text)

    def _phones(self, text: str) -> Iterator[Finding]:
        for pattern in _PHONES:
            for m in pattern.finditer(text):
                start, end = m.span()
                digits = re.sub(r"\D", "", m.group())
                if not 8 <= len(digits) <= 15 or (m.group()[0] == "0" and len(digits) < 9):
                    continue  # E.164 has 8-15 digits; 8 with a trunk 0 are mostly dates (05.12.2024)
                if not _isolated_number_fails(text, start, end):
                    yield Finding("phone", start, end)

    def _secrets(self, text: str) -> Iterator[Finding]:
        key_ends: list[int] | None = None  # where an END line starts, found once and only if a BEGIN line is there
        pos = 0
        while m := _SECRETS.search(text, pos):
            start, end = m.span()
            if m.group("begin"):
                if key_ends is None:
                    key_ends = [e.start() for e in _KEY_END_AT.finditer(text)]
                i = bisect_left(key_ends, end)
                block = _KEY_END.match(text, key_ends[i]) if i < len(key_ends) else _KEY_LINES.match(text, end)
                if block is None:  # a BEGIN line alone: go on from its next character, as finditer would
                    pos = start + 1
                    continue
                end = block.end()
            if not m.group().startswith("sk-") or any(ch.isdigit() for ch in m.group()):
                yield Finding("secret", start, end)
            pos = end
        for m in _AWS_ANY_CASE.finditer(text):
            if any(ch.isdigit() for ch in m.group()):
                yield Finding("secret", m.start(), m.end())
        for pattern in (_ASSIGN_EN, _ASSIGN_ZH):
            for m in pattern.finditer(text):
                group = next(g for g in ("dq", "sq", "bare") if m.groupdict().get(g) is not None)
                start, end = m.span(group)
                value = m.group(group)
                if group == "bare":  # not the rest of a query string, nor the sentence's full stop
                    value = re.split(r"&(?=[A-Za-z_][\w.\-]*=)", value, maxsplit=1)[0].rstrip(".,;:)]}>")
                    end = start + len(value)
                if _secret_value_ok(m.group("key"), value):
                    yield Finding("secret", start, end)


# --- presidio ---------------------------------------------------------------------

_PRESIDIO_TYPES = {"PERSON": "person", "LOCATION": "address", "ADDRESS": "address", "STREET_ADDRESS": "address"}


class PresidioDetector:
    """Names (``person``) and places (``address``) by Presidio's analyzer (spaCy NER).

    Args:
        analyzer: a ``presidio_analyzer.AnalyzerEngine``; by default one is built
            (which needs the spaCy model Presidio is configured with, ``en_core_web_lg``).
        language: the language passed to the analyzer.
        min_score: findings below this confidence are dropped.

    Raises:
        ImportError: ``analyzer`` is not given and presidio-analyzer is not installed.
    """

    def __init__(self, *, analyzer: Any | None = None, language: str = "en", min_score: float = 0.5) -> None:
        if analyzer is None:
            try:
                engine = importlib.import_module("presidio_analyzer").AnalyzerEngine
            except ImportError as exc:
                raise ImportError(
                    "PresidioDetector needs presidio-analyzer and its spaCy model (pip install presidio-analyzer; "
                    "python -m spacy download en_core_web_lg); without them only the rule types are detected"
                ) from exc
            analyzer = engine()
        self._analyzer = analyzer
        self._language = language
        self._min_score = min_score
        supported = set(analyzer.get_supported_entities(language))
        self._entities = sorted(e for e in _PRESIDIO_TYPES if e in supported)

    def find(self, text: str) -> list[Finding]:
        """Names and places in ``text``, sorted and non-overlapping.

        Args:
            text: the text to analyze, in the detector's ``language``.
        """
        if not self._entities or not text.strip():
            return []
        results = self._analyzer.analyze(text=text, language=self._language, entities=self._entities)
        found = (
            Finding(_PRESIDIO_TYPES[r.entity_type], int(r.start), int(r.end))
            for r in results
            if r.entity_type in _PRESIDIO_TYPES and r.score >= self._min_score
        )
        return resolve(found, text)


class MergedDetector:
    """The findings of ``primary``, plus those of ``secondary`` that overlap none of them."""

    def __init__(self, primary: Detector, secondary: Detector) -> None:
        self.primary = primary
        self.secondary = secondary

    def find(self, text: str) -> list[Finding]:
        first = self.primary.find(text)
        # Sorted and non-overlapping: only the last one starting before s.end can overlap s.
        starts = [f.start for f in first]
        extra = [
            s for s in self.secondary.find(text)
            if (i := bisect_left(starts, s.end)) == 0 or first[i - 1].end <= s.start
        ]
        return sorted(first + extra, key=lambda f: f.start)


def make_detector(settings: PIISettings) -> Detector:
    """The rule detector, merged with Presidio (rules win on overlap) when ``settings.ner`` and it is installed.

    Args:
        settings: the ``pii`` section; only ``ner`` is read.
    """
    rules = RuleDetector()
    if not settings.ner or importlib.util.find_spec("presidio_analyzer") is None:
        return rules
    try:
        return MergedDetector(rules, PresidioDetector())
    # An optional plug-in that cannot start degrades to the rules: spaCy raises OSError for a missing model,
    # and its downloader exits the process when it has no network.
    except (ImportError, OSError, SystemExit) as exc:
        log.warning("PII: Presidio is installed but cannot start (%s); names and addresses are not detected", exc)
        return rules


def spelled_email(value: str) -> str:
    """An email address spelled out (``ann at example dot com``) as the address it spells."""
    return _SPELLED_DOT.sub(".", _SPELLED_AT.sub("@", value, count=1))
