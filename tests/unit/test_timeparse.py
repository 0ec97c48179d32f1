"""Unit tests for strata.retrieval.timeparse."""

import random
from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from strata.retrieval.timeparse import (
    _SENTENCE,
    MAX_UNREADABLE,
    SCAN_CHARS,
    TimeRange,
    asking,
    mentioned_time,
    question_time,
    resolve_time_range,
    strip_time_expression,
)

# Wednesday. The ISO week runs from Mon 2023-05-08 to Mon 2023-05-15.
REF = datetime(2023, 5, 10, 15, 30, tzinfo=UTC)


def days(query: str, reference: datetime = REF) -> tuple[date, date]:
    """Resolve `query` and return (first day, day after the last day) of the range."""
    tr = resolve_time_range(query, reference)
    assert tr is not None, query
    assert tr.start < tr.end
    assert tr.start.hour == tr.start.minute == tr.end.hour == tr.end.minute == 0
    return tr.start.date(), tr.end.date()


def d(month: int, day: int, year: int = 2023) -> date:
    return date(year, month, day)


ENGLISH = [
    ("what did I do today?", d(5, 10), d(5, 11)),
    ("Yesterday I met Bob", d(5, 9), d(5, 10)),
    ("the day before yesterday", d(5, 8), d(5, 9)),
    ("Day Before Yesterday", d(5, 8), d(5, 9)),
    ("tomorrow", d(5, 11), d(5, 12)),
    ("the day after tomorrow", d(5, 12), d(5, 13)),
    ("this week", d(5, 8), d(5, 15)),
    ("LAST WEEK", d(5, 1), d(5, 8)),
    ("next week", d(5, 15), d(5, 22)),
    ("this month", d(5, 1), d(6, 1)),
    ("last month", d(4, 1), d(5, 1)),
    ("next month", d(6, 1), d(7, 1)),
    ("this year", d(1, 1), d(1, 1, 2024)),
    ("last year", d(1, 1, 2022), d(1, 1)),
    ("3 days ago", d(5, 7), d(5, 8)),
    ("three days ago", d(5, 7), d(5, 8)),
    ("a day ago", d(5, 9), d(5, 10)),
    ("a week ago", d(5, 1), d(5, 8)),
    ("2 weeks ago", d(4, 24), d(5, 1)),
    ("two months ago", d(3, 1), d(4, 1)),
    ("ten days ago", d(4, 30), d(5, 1)),
    ("a year ago", d(1, 1, 2022), d(1, 1)),
    ("in the last 7 days", d(5, 3), d(5, 11)),
    ("past 3 days", d(5, 7), d(5, 11)),
    ("last 3 days", d(5, 7), d(5, 11)),
    ("over the past two weeks", d(4, 26), d(5, 11)),
    ("in the past week", d(5, 3), d(5, 11)),
    ("last Friday", d(5, 5), d(5, 6)),
    ("this Friday", d(5, 12), d(5, 13)),
    ("next Friday", d(5, 19), d(5, 20)),
    ("on Friday", d(5, 5), d(5, 6)),
    ("Friday", d(5, 5), d(5, 6)),
    ("tuesday", d(5, 9), d(5, 10)),
    ("on Wednesday", d(5, 3), d(5, 4)),  # today is Wednesday: strictly before today
    ("last Monday", d(5, 1), d(5, 2)),
    ("this Monday", d(5, 8), d(5, 9)),
    ("last Sunday", d(5, 7), d(5, 8)),
    ("next Sunday", d(5, 21), d(5, 22)),
    ("last weekend", d(5, 6), d(5, 8)),
    ("2023-05-08", d(5, 8), d(5, 9)),
    ("on 2022/12/31", d(12, 31, 2022), d(1, 1)),
    ("8 May 2023", d(5, 8), d(5, 9)),
    ("May 8, 2023", d(5, 8), d(5, 9)),
    ("may 8th", d(5, 8), d(5, 9)),
    ("8 May", d(5, 8), d(5, 9)),
    ("the 8th of May", d(5, 8), d(5, 9)),
    ("May 10", d(5, 10), d(5, 11)),  # today counts as "on or before"
    ("May 11", d(5, 11, 2022), d(5, 12, 2022)),  # not yet this year
    ("Sept. 3rd, 2021", d(9, 3, 2021), d(9, 4, 2021)),
    ("jan 5", d(1, 5), d(1, 6)),
    ("May 2023", d(5, 1), d(6, 1)),
    ("in December 2022", d(12, 1, 2022), d(1, 1)),
    ("2023-02", d(2, 1), d(3, 1)),
    ("in 2022", d(1, 1, 2022), d(1, 1)),
]

CHINESE = [
    ("今天", d(5, 10), d(5, 11)),
    ("昨天我吃了什么", d(5, 9), d(5, 10)),
    ("前天", d(5, 8), d(5, 9)),
    ("大前天", d(5, 7), d(5, 8)),
    ("明天", d(5, 11), d(5, 12)),
    ("后天", d(5, 12), d(5, 13)),
    ("这周", d(5, 8), d(5, 15)),
    ("本周", d(5, 8), d(5, 15)),
    ("这个星期", d(5, 8), d(5, 15)),
    ("本星期", d(5, 8), d(5, 15)),
    ("上周", d(5, 1), d(5, 8)),
    ("上个星期", d(5, 1), d(5, 8)),
    ("上星期", d(5, 1), d(5, 8)),
    ("下周", d(5, 15), d(5, 22)),
    ("下个星期", d(5, 15), d(5, 22)),
    ("上上周", d(4, 24), d(5, 1)),
    ("这个月", d(5, 1), d(6, 1)),
    ("本月", d(5, 1), d(6, 1)),
    ("上个月", d(4, 1), d(5, 1)),
    ("上月", d(4, 1), d(5, 1)),
    ("下个月", d(6, 1), d(7, 1)),
    ("今年", d(1, 1), d(1, 1, 2024)),
    ("去年", d(1, 1, 2022), d(1, 1)),
    ("三天前", d(5, 7), d(5, 8)),
    ("3天前", d(5, 7), d(5, 8)),
    ("两天前", d(5, 8), d(5, 9)),
    ("十天以前", d(4, 30), d(5, 1)),
    ("两周前", d(4, 24), d(5, 1)),
    ("三个星期前", d(4, 17), d(4, 24)),
    ("两个月前", d(3, 1), d(4, 1)),
    ("最近7天", d(5, 3), d(5, 11)),
    ("过去七天里", d(5, 3), d(5, 11)),
    ("最近两周", d(4, 26), d(5, 11)),
    ("上周五", d(5, 5), d(5, 6)),
    ("上星期五", d(5, 5), d(5, 6)),
    ("上个礼拜五", d(5, 5), d(5, 6)),
    ("上周一", d(5, 1), d(5, 2)),
    ("上周日", d(5, 7), d(5, 8)),
    ("这周五", d(5, 12), d(5, 13)),
    ("本周五", d(5, 12), d(5, 13)),
    ("下周五", d(5, 19), d(5, 20)),
    ("下星期天", d(5, 21), d(5, 22)),
    ("这周末", d(5, 13), d(5, 15)),
    ("周五", d(5, 5), d(5, 6)),
    ("星期天", d(5, 7), d(5, 8)),
    ("星期日", d(5, 7), d(5, 8)),
    ("礼拜三", d(5, 3), d(5, 4)),
    ("周二", d(5, 9), d(5, 10)),
    ("2023年5月8日", d(5, 8), d(5, 9)),
    ("5月8日", d(5, 8), d(5, 9)),
    ("5月8号", d(5, 8), d(5, 9)),
    ("十二月三十一日", d(12, 31, 2022), d(1, 1)),
    ("二〇二二年五月八日", d(5, 8, 2022), d(5, 9, 2022)),
    ("2023年5月", d(5, 1), d(6, 1)),
    ("2022年", d(1, 1, 2022), d(1, 1)),
    ("2023-05-08", d(5, 8), d(5, 9)),
]


@pytest.mark.parametrize(("query", "start", "end"), ENGLISH)
def test_english(query: str, start: date, end: date) -> None:
    assert days(query) == (start, end)


@pytest.mark.parametrize(("query", "start", "end"), CHINESE)
def test_chinese(query: str, start: date, end: date) -> None:
    assert days(query) == (start, end)


@pytest.mark.parametrize(
    ("query", "expression"),
    [
        ("notes from the day before yesterday", "the day before yesterday"),
        ("what happened last Friday at work", "last Friday"),
        ("what happened in the last 3 days", "in the last 3 days"),
        ("上周五开会", "上周五"),
        ("上周一起吃饭", "上周"),  # 一起 means "together", not Monday
        ("2023年5月8日的会议", "2023年5月8日"),
        ("May 8, 2023 meeting", "May 8, 2023"),
        ("in 2022-05-08", "in 2022-05-08"),
        ("yesterday and last week", "yesterday"),  # the first expression wins
    ],
)
def test_longest_and_first_match_wins(query: str, expression: str) -> None:
    tr = resolve_time_range(query, REF)
    assert tr is not None
    assert tr.expression == expression


@pytest.mark.parametrize(
    "query",
    [
        "",
        "hello world",
        "you may go",
        "May I ask you something?",
        "It may be 5pm",
        "an hour ago",
        "February 30",
        "February 29, 2023",
        "2023-02-30",
        "2023年2月30日",
        "13月1日",
        "一周一次",
        "看一下周围",
        "每周一开会",
        "三四天前",
        "in 2000 years",
        "May 8:30",
    ],
)
def test_no_match(query: str) -> None:
    assert resolve_time_range(query, REF) is None


def test_invalid_date_does_not_hide_later_expression() -> None:
    tr = resolve_time_range("February 30 or yesterday", REF)
    assert tr is not None and tr.expression == "yesterday"


def test_unreadable_dates_stop_the_search_after_max_unreadable() -> None:
    """Each failed reading costs a try; past MAX_UNREADABLE of them the query has no date."""
    few = "31 Nov, " * (MAX_UNREADABLE - 1) + "yesterday"
    many = "31 Nov, " * MAX_UNREADABLE + "yesterday"
    found = resolve_time_range(few, REF)
    assert found is not None and found.expression == "yesterday"
    assert resolve_time_range(many, REF) is None


def test_only_the_first_scan_chars_are_read() -> None:
    filler = "word " * (SCAN_CHARS // 5 + 2)
    assert resolve_time_range(filler + "yesterday", REF) is None
    found = resolve_time_range("yesterday " + filler * 20, REF)
    assert found is not None and found.expression == "yesterday"
    # The cut ends at the end of a word: "May 18" across it is not read as "May 1".
    edge = "x" * (SCAN_CHARS - 5) + " May 18 and more"
    found = resolve_time_range(edge, REF)
    assert found is not None and found.expression.endswith("May 18")


def test_documented_false_positive_friday_night_lights() -> None:
    # Accepted on purpose: a bare weekday name is always read as a day.
    assert days("Friday Night Lights") == (d(5, 5), d(5, 6))


def test_leap_years() -> None:
    assert days("Feb 2024") == (d(2, 1, 2024), d(3, 1, 2024))
    assert days("February 29, 2024") == (d(2, 29, 2024), d(3, 1, 2024))
    assert days("Feb 29") == (d(2, 29, 2020), d(3, 1, 2020))  # most recent Feb 29
    assert days("last month", datetime(2024, 3, 10)) == (d(2, 1, 2024), d(3, 1, 2024))
    # Counting one month back from Mar 31 lands on the last day of February.
    assert days("past 1 month", datetime(2023, 3, 31)) == (d(2, 28), d(4, 1))


def test_month_and_year_boundaries() -> None:
    assert days("next month", datetime(2023, 12, 15)) == (d(1, 1, 2024), d(2, 1, 2024))
    assert days("上个月", datetime(2024, 1, 15)) == (d(12, 1), d(1, 1, 2024))
    assert days("this month", datetime(2023, 12, 31, 23, 59)) == (d(12, 1), d(1, 1, 2024))
    assert days("last week", datetime(2023, 1, 3)) == (d(12, 26, 2022), d(1, 2))
    assert days("in December 2023") == (d(12, 1), d(1, 1, 2024))


def test_weeks_start_on_monday() -> None:
    sunday, monday = datetime(2023, 5, 14, 23), datetime(2023, 5, 8, 0, 0)
    assert days("this week", sunday) == (d(5, 8), d(5, 15))
    assert days("this week", monday) == (d(5, 8), d(5, 15))
    assert days("last week", monday) == (d(5, 1), d(5, 8))
    assert days("Friday", datetime(2023, 5, 12)) == (d(5, 5), d(5, 6))  # on a Friday: a week ago
    assert days("this Friday", datetime(2023, 5, 12)) == (d(5, 12), d(5, 13))


def test_start_inclusive_end_exclusive() -> None:
    tr = resolve_time_range("yesterday", REF)
    assert tr is not None
    assert tr.contains(tr.start)
    assert tr.contains(tr.end - timedelta(microseconds=1))
    assert not tr.contains(tr.end)
    assert not tr.contains(tr.start - timedelta(microseconds=1))
    assert not tr.contains(REF)


def test_naive_reference_is_utc() -> None:
    tr = resolve_time_range("today", datetime(2023, 5, 10, 15, 30))
    assert tr == TimeRange(
        datetime(2023, 5, 10, tzinfo=UTC), datetime(2023, 5, 11, tzinfo=UTC), "today"
    )
    # A naive t also counts as UTC.
    assert tr.contains(datetime(2023, 5, 10, 12))


def test_aware_reference_uses_its_own_timezone() -> None:
    shanghai = timezone(timedelta(hours=8))
    # 20:00 UTC on May 9 is already May 10 in Shanghai.
    reference = datetime(2023, 5, 9, 20, 0, tzinfo=UTC).astimezone(shanghai)
    tr = resolve_time_range("今天", reference)
    assert tr is not None
    assert tr.start == datetime(2023, 5, 10, tzinfo=shanghai)
    assert tr.end == datetime(2023, 5, 11, tzinfo=shanghai)
    assert tr.start.utcoffset() == timedelta(hours=8)
    assert tr.contains(datetime(2023, 5, 9, 16, 0, tzinfo=UTC))
    assert not tr.contains(datetime(2023, 5, 9, 15, 59, tzinfo=UTC))


def test_dst_day_is_wall_clock_midnight_to_midnight() -> None:
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        new_york = zoneinfo.ZoneInfo("America/New_York")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no tz database")
    tr = resolve_time_range("today", datetime(2023, 3, 12, 12, tzinfo=new_york))
    assert tr is not None
    # Subtracting datetimes that share a tzinfo ignores the offsets, so convert to UTC first.
    length = tr.end.astimezone(UTC) - tr.start.astimezone(UTC)
    assert length == timedelta(hours=23)  # the clocks went forward that night


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did I do last week?", "What did I do?"),
        ("Yesterday, I met Bob", "I met Bob"),
        ("notes from the day before yesterday about Bob", "notes from about Bob"),
        ("what happened   in the last 3 days   at work", "what happened at work"),
        ("上周五我做了什么", "我做了什么"),
        ("我 昨天 吃了 什么", "我吃了 什么"),
    ],
)
def test_strip_time_expression(query: str, expected: str) -> None:
    tr = resolve_time_range(query, REF)
    assert tr is not None
    assert strip_time_expression(query, tr) == expected


def test_strip_with_foreign_range_only_collapses_whitespace() -> None:
    tr = resolve_time_range("today", REF)
    assert tr is not None
    assert strip_time_expression("  nothing   here ", tr) == "nothing here"


@pytest.mark.parametrize(
    "reference",
    [datetime(1, 1, 1), datetime.max, datetime(9999, 12, 31, tzinfo=timezone(timedelta(hours=-12)))],
)
def test_extreme_references_never_raise(reference: datetime) -> None:
    for query in ["yesterday", "tomorrow", "next year", "last year", "9999 months ago", "May 8", "下周五"]:
        tr = resolve_time_range(query, reference)
        assert tr is None or tr.start < tr.end


def test_random_strings_never_raise() -> None:
    rng = random.Random(20230510)
    tokens = [
        "last", "next", "this", "week", "month", "year", "ago", "days", "May", "Feb", "Friday", "the",
        "day", "before", "in", "on", "past", "a", "an", "3", "30", "2023", "2023-02-30", "-", "/", ".",
        ":", ",", " ", "th", "上", "下", "这", "本", "周", "星期", "礼拜", "个", "月", "年", "日", "号",
        "天", "前", "最近", "过去", "一", "两", "十", "〇", "五", "末", "起", "\u0663", "\U0001f600", "\x00",
    ]
    for _ in range(400):
        query = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.3:
            query = "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 20)))
        tr = resolve_time_range(query, REF)
        if tr is not None:
            assert tr.start < tr.end
            assert tr.expression in query
            strip_time_expression(query, tr)


# --- the time a message speaks of, and the time a question asks about -------------------------


def test_a_message_s_yearless_date_is_the_nearest_one_a_question_s_the_last_one() -> None:
    said = datetime(2024, 4, 1, 9, tzinfo=UTC)
    told = mentioned_time("4月12日晚上有场音乐会", said)
    assert told is not None and told.start.date() == date(2024, 4, 12)  # ahead: the concert to come
    asked = resolve_time_range("4月12日晚上有场音乐会", said)
    assert asked is not None and asked.start.date() == date(2023, 4, 12)  # a question asks of the past
    back = mentioned_time("my birthday was on March 20", said)
    assert back is not None and back.start.date() == date(2024, 3, 20)
    # In December, a date of January is next month's, one of November last month's.
    december = datetime(2024, 12, 20, tzinfo=UTC)
    jan = mentioned_time("the trip on January 5", december)
    nov = mentioned_time("the trip on November 5", december)
    assert jan is not None and jan.start.date() == date(2025, 1, 5)
    assert nov is not None and nov.start.date() == date(2024, 11, 5)
    # Relative expressions read as ever, against when the message was said.
    nxt = mentioned_time("下周三我要去听讲座", said)
    assert nxt is not None and nxt.start.date() == date(2024, 4, 10)
    leap = mentioned_time("on February 29", datetime(2026, 3, 1, tzinfo=UTC))
    assert leap is not None and leap.start.date() == date(2024, 2, 29)  # no leap year near: the last one
    # "Today" says nothing a timestamp does not: the next expression is the time spoken of.
    booked = mentioned_time("Today I booked the flight for next Friday.", said)
    assert booked is not None and booked.start.date() == date(2024, 4, 12)
    only_today = mentioned_time("今天好冷。", said)
    assert only_today is not None and only_today.start.date() == date(2024, 4, 1)
    # The question's reading is untouched after a mention was read (the mode is per call).
    again = resolve_time_range("4月12日", said)
    assert again is not None and again.start.date() == date(2023, 4, 12)


@pytest.mark.parametrize(
    ("message", "asks"),
    [
        ("Yesterday was awful. Where did I leave my keys?", "Where did I leave my keys?"),
        ("哎呀，昨天还热得穿短袖。我想问的是，那个人的生日是什么？", "我想问的是，那个人的生日是什么？"),
        ("Where did I go yesterday?", "Where did I go yesterday?"),  # all of it asks
        ("I went out yesterday.", "I went out yesterday."),  # nothing asks
        ("Is it 3.5 GB? I think so.", "Is it 3.5 GB?"),  # a full stop inside a number ends nothing
        ("", ""),
    ],
)
def test_a_question_is_read_for_time_in_the_sentences_that_ask(message: str, asks: str) -> None:
    assert asking(message) == asks


def test_a_time_told_around_a_question_is_not_the_time_it_asks_about() -> None:
    assert question_time("Yesterday was awful. Where did I leave my keys?", REF) is None
    found = question_time("I'm tired. What did I eat yesterday?", REF)
    assert found is not None and found.start.date() == d(5, 9)
    whole = question_time("What did I do yesterday", REF)  # no question mark: the whole text
    assert whole is not None and whole.start.date() == d(5, 9)


@pytest.mark.parametrize("text", ["a" * 100_000, "a. " * 33_000, "a?" * 50_000, "3.5" * 33_000, "字？。" * 33_000])
def test_finding_the_asking_sentences_is_one_pass(text: str) -> None:
    # Each sentence is one match, read once (no nested repetition to backtrack into): the
    # pieces add up to the text, in order.
    pieces = _SENTENCE.findall(text)
    assert "".join(pieces) == text
