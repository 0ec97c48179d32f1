"""Resolve English and Chinese time expressions in a query to a concrete time range.

Episodic retrieval uses the range to narrow semantic search, so a wrong range
hides the right memories. When an expression is unclear we return ``None``
rather than guess, and the caller falls back to an unfiltered search.

Semantics chosen for ambiguous cases:

* Days run from midnight to midnight in the reference's timezone. A naive
  reference (and a naive ``t`` given to :meth:`TimeRange.contains`) counts as UTC.
* Weeks are ISO weeks, Monday to Monday. "last Friday" / "上周五" is the Friday of
  the previous ISO week, "this Friday" / "这周五" the Friday of the current week
  (it may still be ahead), and "next Friday" / "下周五" the Friday of the next week.
* A weekday on its own ("Friday", "on Friday", "周五") is the most recent such day
  strictly before today. Memories lie in the past, and today has its own word, so
  on a Friday "Friday" means a week ago.
* "N days/weeks/months/years ago" / "N天前" is the one calendar unit N units back
  ("2 weeks ago" is a whole ISO week). "last/past N days" / "最近N天" runs from the
  start of the day N days ago up to the end of today, so today is included.
* A date without a year ("May 8", "5月8日") is the most recent such date on or
  before today: a question asks about the past. A message tells of the future as well
  ("the concert on May 8", said on May 1), so :func:`mentioned_time` takes the date
  of that day and month nearest its reference instead.
* "May" counts as a month only next to a day number or a year, so "you may go" has
  no date. Some false positives remain: "Friday Night Lights" is read as a
  Friday, and "8 may help" as 8 May.
* When expressions overlap, the one that starts first wins, and of those the
  longest. An invalid date ("February 30") gives no range, and shorter readings
  inside it are skipped. An expression later in the query can still match, unless
  :data:`MAX_UNREADABLE` readings have failed before it.
* In a message that both tells and asks (sentences ending in "?" or "？" and sentences
  that do not), :func:`question_time` reads the asking sentences only: "Yesterday was
  awful. Where did I leave my keys?" asks about no day.
* Only the first :data:`SCAN_CHARS` characters of a query are read (to the end of
  the word there): a question says when early, and the query's embedding reads
  no further either. The work is linear in that prefix, whatever it holds.
"""

import calendar
import heapq
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo

__all__ = [
    "MAX_UNREADABLE", "SCAN_CHARS", "TimeRange", "asking", "mentioned_time", "question_time", "resolve_time_range",
    "strip_time_expression",
]

#: How much of a query is read for a time expression, in characters (see the module's notes).
SCAN_CHARS = 1_000
#: Readings that fail (invalid dates) before a query is taken to have no time expression:
#: "31 Nov 31 Nov …" should not cost a reading per repetition.
MAX_UNREADABLE = 16


@dataclass(frozen=True)
class TimeRange:
    """A half-open interval ``[start, end)`` of aware datetimes named by ``expression``."""

    start: datetime
    end: datetime
    expression: str

    def contains(self, t: datetime) -> bool:
        """Return whether ``t`` is in ``[start, end)``. A naive ``t`` counts as UTC."""
        if t.utcoffset() is None:
            t = t.replace(tzinfo=UTC)
        return self.start <= t < self.end


_Span = tuple[date, date]  # [first day, day after the last day)
_Resolver = Callable[[re.Match[str], date], _Span]
_RULES: list[tuple[re.Pattern[str], _Resolver]] = []
_ONE_DAY = timedelta(days=1)


def _rule(*patterns: str) -> Callable[[_Resolver], _Resolver]:
    # re.ASCII keeps \b working next to CJK text ("我yesterday") and keeps \d from
    # matching non-ASCII digits.
    def register(fn: _Resolver) -> _Resolver:
        _RULES.extend((re.compile(pattern, re.IGNORECASE | re.ASCII), fn) for pattern in patterns)
        return fn

    return register


# ---------------------------------------------------------------- numbers

_EN_NUMBERS = {
    word: value
    for value, word in enumerate(
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
    )
} | {"a": 1, "an": 1}
_CN_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}

_EN_NUM = r"(?P<n>[0-9]{1,4}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_CN_NUM = r"(?P<n>(?<![0-9])[0-9]{1,4}|[一二两三四五六七八九十]{1,3})"
_CN_MD = r"[0-9]{1,2}|[一二三四五六七八九十]{1,3}"
_CN_YEAR = r"[0-9]{4}|[〇零一二三四五六七八九]{4}"


def _cn_digit(c: str) -> int:
    if c not in _CN_DIGITS:
        raise ValueError(f"not a Chinese digit: {c!r}")
    return _CN_DIGITS[c]


def _cn_int(s: str) -> int:
    """Parse a number below 100 written in Arabic digits or Chinese numerals."""
    if s.isdigit():
        return int(s)
    head, ten, tail = s.partition("十")
    if not ten:
        if len(s) != 1:
            # "三四天前" means "three or four days ago", not 34 days.
            raise ValueError(f"vague Chinese number: {s!r}")
        return _cn_digit(s)
    if len(head) > 1 or len(tail) > 1:
        raise ValueError(f"unsupported Chinese number: {s!r}")
    return (_cn_digit(head) if head else 1) * 10 + (_cn_digit(tail) if tail else 0)


def _cn_year(s: str) -> int:
    # Chinese years are written one digit at a time: 二〇二三 is 2023.
    return int(s) if s.isdigit() else int("".join(str(_cn_digit(c)) for c in s))


def _count(s: str) -> int:
    return _EN_NUMBERS[s.lower()] if s.lower() in _EN_NUMBERS else _cn_int(s)


# ---------------------------------------------------------------- calendar arithmetic

_UNIT_BY_INITIAL = {
    "d": "day", "w": "week", "m": "month", "y": "year",
    "天": "day", "日": "day", "周": "week", "星": "week", "礼": "week", "月": "month", "年": "year",
}
_REL = {
    "this": 0, "last": -1, "previous": -1, "next": 1,
    "这": 0, "本": 0, "今": 0, "上": -1, "去": -1, "上上": -2, "前": -2, "下": 1, "下下": 2, "明": 1,
}
_EN_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_CN_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_MONTHS = {
    name: i
    for i in range(1, 13)
    for name in (calendar.month_name[i].lower(), calendar.month_abbr[i].lower())
} | {"sept": 9}
# Full names come first so the regex does not stop at "jun" inside "june".
_MON = "|".join(sorted(_MONTHS, key=len, reverse=True))


def _unit(s: str) -> str:
    return _UNIT_BY_INITIAL[s.lower().lstrip("个")[0]]


def _rel(s: str) -> int:
    return _REL[s.lower().rstrip("个")]


def _shift_month(year: int, month: int, n: int) -> tuple[int, int]:
    y, m0 = divmod(year * 12 + month - 1 + n, 12)
    return y, m0 + 1


def _month_span(year: int, month: int) -> _Span:
    return date(year, month, 1), date(*_shift_month(year, month, 1), 1)


def _day_span(d: date) -> _Span:
    return d, d + _ONE_DAY


def _monday(today: date, weeks: int) -> date:
    return today - timedelta(days=today.weekday()) + timedelta(weeks=weeks)


def _period(unit: str, today: date, n: int) -> _Span:
    """The whole calendar day/week/month/year that is ``n`` units from today."""
    if unit == "day":
        return _day_span(today + timedelta(days=n))
    if unit == "week":
        monday = _monday(today, n)
        return monday, monday + timedelta(weeks=1)
    if unit == "month":
        return _month_span(*_shift_month(today.year, today.month, n))
    return date(today.year + n, 1, 1), date(today.year + n + 1, 1, 1)


def _units_back(today: date, unit: str, n: int) -> date:
    """The same day ``n`` units earlier. Month ends are clamped, so Mar 31 - 1 month = Feb 28."""
    if unit in ("day", "week"):
        return today - timedelta(days=n * (7 if unit == "week" else 1))
    y, m = _shift_month(today.year, today.month, -n * (1 if unit == "month" else 12))
    return date(y, m, min(today.day, calendar.monthrange(y, m)[1]))


def _weekday_span(today: date, weekday: int, rel: int | None) -> _Span:
    if rel is None:
        # The most recent such weekday strictly before today.
        return _day_span(today - timedelta(days=(today.weekday() - weekday - 1) % 7 + 1))
    return _day_span(_monday(today, rel) + timedelta(days=weekday))


def _weekend_span(today: date, rel: int) -> _Span:
    saturday = _monday(today, rel) + timedelta(days=5)
    return saturday, saturday + timedelta(days=2)


def _most_recent(today: date, month: int, day: int) -> date:
    date(2000, month, day)  # a leap year, so only dates that never exist fail here
    for year in range(today.year, today.year - 9, -1):  # Feb 29 can be 8 years back
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if candidate <= today:
            return candidate
    raise ValueError(f"no recent {month}/{day}")


def _nearest(today: date, month: int, day: int) -> date:
    """The date of ``month`` and ``day`` nearest ``today``: last year's, this year's or next year's."""
    date(2000, month, day)  # a leap year, so only dates that never exist fail here
    candidates = []
    for year in (today.year - 1, today.year, today.year + 1):
        try:
            candidates.append(date(year, month, day))
        except ValueError:
            continue
    if not candidates:  # Feb 29 with no leap year near: the most recent one
        return _most_recent(today, month, day)
    return min(candidates, key=lambda d: (abs((d - today).days), d))


#: True while :func:`mentioned_time` reads: a yearless date is the nearest, not the last.
_YEARLESS_NEAREST: ContextVar[bool] = ContextVar("yearless_nearest", default=False)


def _date_from(m: re.Match[str], today: date) -> _Span:
    """A day, or a whole month when there is no day. A missing year means the most recent one."""
    groups = m.groupdict()
    month = _MONTHS[groups["mon"].lower()] if groups.get("mon") else _cn_int(groups["m"])
    if not groups.get("d"):
        return _month_span(_cn_year(groups["y"]), month)
    day = _cn_int(groups["d"])
    if groups.get("y"):
        return _day_span(date(_cn_year(groups["y"]), month, day))
    if _YEARLESS_NEAREST.get():
        return _day_span(_nearest(today, month, day))
    return _day_span(_most_recent(today, month, day))


# ---------------------------------------------------------------- rules

def _fixed_day(offset: int) -> _Resolver:
    return lambda m, today: _period("day", today, offset)


for _pattern, _offset in [
    (r"\b(?:the\s+)?day\s+before\s+yesterday\b", -2),
    (r"\b(?:the\s+)?day\s+after\s+tomorrow\b", 2),
    (r"\byesterday\b|\blast\s+night\b", -1),
    (r"\btoday\b|\btonight\b", 0),
    (r"\btomorrow\b", 1),
    ("大前天", -3),
    ("前天", -2),
    ("昨天|昨日|昨晚", -1),
    ("今天|今日|今晚", 0),
    ("明天|明日", 1),
    ("后天", 2),
    ("大后天", 3),
]:
    _rule(_pattern)(_fixed_day(_offset))

_PREP = r"(?:\b(?:on|in|during)\s+)?"  # part of the expression, so stripping takes it too


@_rule(r"\b(?P<rel>this|last|previous|next)\s+(?P<unit>week|month|year)\b")
def _relative_period(m: re.Match[str], today: date) -> _Span:
    return _period(_unit(m["unit"]), today, _rel(m["rel"]))


@_rule(r"\b(?P<rel>this|last|previous|next)\s+weekend\b")
def _relative_weekend(m: re.Match[str], today: date) -> _Span:
    return _weekend_span(today, _rel(m["rel"]))


@_rule(rf"(?:\bon\s+)?(?:\b(?P<rel>this|last|previous|next)\s+)?\b(?P<wd>{'|'.join(_EN_WEEKDAYS)})\b")
def _en_weekday(m: re.Match[str], today: date) -> _Span:
    rel = _rel(m["rel"]) if m["rel"] else None
    return _weekday_span(today, _EN_WEEKDAYS.index(m["wd"].lower()), rel)


@_rule(
    # Not after 一, so "看一下周五" is not "next Friday". The weekday 一 is not
    # followed by 起: "上周一起吃饭" means "last week we ate together".
    # The lookahead rules out 周围, 周期, 周年 and similar words.
    r"(?P<rel>上上|下下|这个?|本|上个?|(?<!一)下个?)(?:周|星期|礼拜)(?![围边到全期刊年长转])"
    r"(?P<wd>一(?!起)|[二三四五六日天末])?"
)
def _cn_relative_week(m: re.Match[str], today: date) -> _Span:
    rel, wd = _rel(m["rel"]), m["wd"]
    if wd is None:
        return _period("week", today, rel)
    if wd == "末":
        return _weekend_span(today, rel)
    return _weekday_span(today, _CN_WEEKDAYS[wd], rel)


# A number before it ("一周一次") or 每 ("every Monday") makes it not a single day.
@_rule(r"(?<![0-9零一二两三四五六七八九十个每])(?:周|星期|礼拜)(?P<wd>一(?!起)|[二三四五六日天])")
def _cn_weekday(m: re.Match[str], today: date) -> _Span:
    return _weekday_span(today, _CN_WEEKDAYS[m["wd"]], None)


@_rule(r"(?P<rel>这个?|本|上个?|(?<!一)下个?)月", r"(?P<rel>今|本|去|(?<![0-9一二两三四五六七八九十之以])前|明)年")
def _cn_relative_period(m: re.Match[str], today: date) -> _Span:
    return _period("month" if m[0].endswith("月") else "year", today, _rel(m["rel"]))


@_rule(
    rf"\b{_EN_NUM}\s+(?P<unit>day|week|month|year)s?\s+ago\b",
    # 个 is required before 月: "三月前" could also mean "before March".
    rf"{_CN_NUM}(?P<unit>天|日|周|个?星期|个?礼拜|个月|年)(?:之|以)?前",
)
def _ago(m: re.Match[str], today: date) -> _Span:
    return _period(_unit(m["unit"]), today, -_count(m["n"]))


@_rule(
    rf"\b(?:(?:in|over|during|within|for)\s+)?(?:the\s+)?(?:last|past|previous)\s+{_EN_NUM}\s+"
    r"(?P<unit>day|week|month|year)s?\b",
    r"\b(?:(?:in|over|during|within|for)\s+)?(?:the\s+)?past\s+(?P<unit>day|week|month|year)\b",
    rf"(?:最近|过去|(?<![附将接靠])近)的?{_CN_NUM}(?P<unit>天|日|周|个?星期|个?礼拜|个月|年)(?:之内|以来|内|里)?",
)
def _rolling(m: re.Match[str], today: date) -> _Span:
    n = _count(m.groupdict().get("n") or "1")
    return _units_back(today, _unit(m["unit"]), n), today + _ONE_DAY


@_rule(
    _PREP + r"(?<![0-9])(?P<y>[0-9]{4})(?P<sep>[-/.])(?P<m>[0-9]{1,2})(?P=sep)(?P<d>[0-9]{1,2})(?![0-9])",
    _PREP + r"(?<![0-9])(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})(?![0-9]|-[0-9])",
    # The ":" lookahead keeps "May 8:30" from reading as a date.
    _PREP + rf"\b(?P<mon>{_MON})\b\.?\s+(?:the\s+)?(?P<d>[0-9]{{1,2}})(?:st|nd|rd|th)?\b(?!:[0-9])"
    r"(?:,?\s*(?P<y>[0-9]{4})\b)?",
    _PREP + rf"\b(?:the\s+)?(?<![:.])(?P<d>[0-9]{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mon>{_MON})\b\.?"
    r"(?:,?\s+(?P<y>[0-9]{4})\b)?",
    _PREP + rf"\b(?P<mon>{_MON})\b\.?,?\s+(?:of\s+)?(?P<y>[0-9]{{4}})\b",
    rf"(?<![0-9])(?P<y>{_CN_YEAR})年(?P<m>{_CN_MD})月(?:(?P<d>{_CN_MD})[日号])?",
    # Not after 年: a year we could not read ("23年5月8日") should not quietly
    # become the most recent 5月8日.
    rf"(?<![0-9零〇一二三四五六七八九十年])(?P<m>{_CN_MD})月(?P<d>{_CN_MD})[日号]",
)
def _explicit_date(m: re.Match[str], today: date) -> _Span:
    return _date_from(m, today)


@_rule(
    r"\b(?:in|during|throughout)\s+(?P<y>[12][0-9]{3})\b"
    r"(?![-/.][0-9]|\s+(?:days?|weeks?|months?|years?|hours?|minutes?|seconds?|times?|items?)\b)",
    # 年前/年后/年代 and similar are relative times or decades, not this calendar year.
    rf"(?<![0-9])(?P<cy>{_CN_YEAR})年(?![前后以之内里代])",
)
def _year(m: re.Match[str], today: date) -> _Span:
    year = _cn_year(m.groupdict().get("y") or m["cy"])
    return date(year, 1, 1), date(year + 1, 1, 1)


# ---------------------------------------------------------------- public API

def _midnight(d: date, tz: tzinfo) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=tz)


def resolve_time_range(query: str, reference: datetime) -> TimeRange | None:
    """Find the first time expression in `query` and resolve it against `reference`.

    A naive ``reference`` counts as UTC. Day boundaries are midnights in the
    reference's timezone, and the result is in that timezone. Returns None when
    the query has no expression we can read (never raises for any str input).
    """
    tz: tzinfo = UTC
    if reference.tzinfo is not None and reference.utcoffset() is not None:
        tz = reference.tzinfo
    today = reference.date()  # the wall-clock date, in the reference's own timezone
    found = _first_expression(_scanned(query), today)
    if found is None:
        return None
    (first, after), expression = found
    return TimeRange(_midnight(first, tz), _midnight(after, tz), expression)


def mentioned_time(text: str, said_at: datetime) -> TimeRange | None:
    """The time ``text``, said at ``said_at``, speaks of: its first expression, read against when it
    was said ("next Wednesday" in a message of Monday 1 April is 10 April), a date without a year
    the nearest one. When that first one is only the day it was said ("Today I booked the flight
    for next Friday"), the next expression after it, if there is one."""
    token = _YEARLESS_NEAREST.set(True)
    try:
        found = resolve_time_range(text, said_at)
        if found is None or not found.contains(said_at) or found.end - found.start > timedelta(days=1):
            return found
        after = text.find(found.expression) + len(found.expression)
        return resolve_time_range(text[after:], said_at) or found
    finally:
        _YEARLESS_NEAREST.reset(token)


#: A sentence and the marks that end it; linear (one pass, no nested repetition).
#: A full stop ends one only before white space ("3.5 GB", "e.g" go on).
_SENTENCE = re.compile(r"(?:[^。！？!?；;\n.]|\.(?!\s))+[。！？!?；;\n.]*")
_ASKS = ("?", "？")


def asking(text: str) -> str:
    """The sentences of ``text`` that ask (end in a question mark), when it also has sentences
    that do not; otherwise ``text`` itself."""
    sentences = _SENTENCE.findall(text)
    asks = [s for s in sentences if s.rstrip().endswith(_ASKS)]
    if not asks or len(asks) == len(sentences):
        return text
    if all(not s.strip() for s in sentences if not s.rstrip().endswith(_ASKS)):
        return text  # the rest is blank lines and marks only
    return " ".join(s.strip() for s in asks)


def question_time(text: str, reference: datetime) -> TimeRange | None:
    """The time a question asks about: :func:`resolve_time_range` of the sentences that ask
    (:func:`asking`). A time in the sentences around them tells of what is being said, not of
    what is asked."""
    return resolve_time_range(asking(text), reference)


def _scanned(query: str) -> str:
    """The part of ``query`` that is read: :data:`SCAN_CHARS` characters, and the rest of
    the word they end in (up to 32 more), so a number or a word is not cut in two."""
    if len(query) <= SCAN_CHARS:
        return query
    end = SCAN_CHARS
    while end < min(len(query), SCAN_CHARS + 32) and query[end].isalnum():
        end += 1
    return query[:end]


def _matches(pattern: re.Pattern[str], resolver: _Resolver, text: str) -> Iterator[tuple[re.Match[str], _Resolver]]:
    for match in pattern.finditer(text):
        yield match, resolver


def _first_expression(text: str, today: date) -> tuple[_Span, str] | None:
    """The span and words of the first readable expression in ``text``.

    Matches come lazily, merged in order of where they start (the longest first), so the
    work stops at the first reading that holds; an unreadable match hides the matches that
    start inside it, which is one comparison, as those that came before started no later.
    """
    merged = heapq.merge(
        *(_matches(pattern, resolver, text) for pattern, resolver in _RULES),
        key=lambda c: (c[0].start(), -c[0].end()),
    )
    unreadable_until, failures = -1, 0
    for match, resolver in merged:
        if match.start() < unreadable_until:
            continue
        try:
            return resolver(match, today), match.group(0)
        except (ValueError, OverflowError):
            # Invalid dates, and arithmetic past year 1 or 9999.
            unreadable_until = max(unreadable_until, match.end())
            failures += 1
            if failures >= MAX_UNREADABLE:
                return None
    return None


def _word_char(c: str) -> bool:
    return c.isascii() and c.isalnum()


def strip_time_expression(query: str, tr: TimeRange) -> str:
    """Return `query` with ``tr.expression`` removed, to use as the semantic search text.

    Whitespace is collapsed. Punctuation left at either end ("Yesterday, ...")
    is trimmed. A space is kept only between two Latin words, so Chinese text
    is joined directly.
    """
    expression = tr.expression
    found = re.search(re.escape(expression), query, re.IGNORECASE) if expression else None
    if found:
        left, right = query[: found.start()].rstrip(), query[found.end():].lstrip()
        joiner = " " if left and right and _word_char(left[-1]) and _word_char(right[0]) else ""
        query = left + joiner + right
    return " ".join(query.split()).strip(" ,;:，、；：")
