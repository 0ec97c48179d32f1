"""A development set of events told before they happen and asked about after, in the neutral format.

``python -m strata_bench.evaluation.devset_events --out events.json`` writes it; then
``strata eval retrieval --dataset events.json --format strata``. A user tells an assistant, day
by day over four months, what they will do ("下周三我要和表姐去国家图书馆听讲座", "Next Friday I'm
seeing a concert at the Riverside Hall with Tom"), among everyday messages; days after the event a
question asks about it by when it was ("上周三我去听的讲座是在哪里？", "Where was the concert I went
to last Friday?"). The message that holds the answer was written days before the time the
question names, and the same kind of event comes back at other times and places, so a memory
that reads the question's time against when a message was *written* is drawn to the wrong days;
one that also reads the time a message *mentions* is not.

Written by hand: the kinds of event, places, companions and everyday messages, and the sentence
forms (:data:`LANGUAGES`). Drawn from one seeded :class:`random.Random` per conversation: which
event happens when, where and with whom, when it is told and asked about, and the filler. Every
time expression used is checked to resolve to the event's day by Strata's own parser
(:func:`~strata.retrieval.timeparse.mentioned_time` for a message, :func:`~strata.retrieval.timeparse.question_time`
for a question) before it is written, so the set tests
how the expression is matched, not whether it is read. Two conversations per language, Chinese
and English; one question per event. Categories: ``where`` (the place), ``who`` (the companion),
``what`` (the kind of event, the place given).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from strata.retrieval.timeparse import mentioned_time, question_time

__all__ = ["CATEGORIES", "LANGUAGES", "Language", "build", "build_conversation", "main"]

CATEGORIES = ("where", "who", "what")
DAYS = 120
EVENTS_PER_CONVERSATION = 80


@dataclass(frozen=True)
class Language:
    kinds: tuple[str, ...]
    places: tuple[str, ...]
    companions: tuple[str, ...]
    filler: tuple[str, ...]
    #: The words for the day ``event`` in a message of the day ``said`` (before it or after it).
    relative: Callable[[date, date], str]
    tell: tuple[str, ...]  # {when} {kind} {place} {who}
    after: tuple[str, ...]  # a later word about the event: {kind}
    ask: dict[str, tuple[str, ...]]  # category -> forms: {when} {kind} {place}


def _zh_relative(said: date, event: date) -> str:
    gap = (event - said).days
    near = {1: "明天", 2: "后天", -1: "昨天", -2: "前天"}
    if gap in near:
        return near[gap]
    day = "一二三四五六日"[event.weekday()]
    week = event.isocalendar()[1] - said.isocalendar()[1]
    if week == 0:
        return f"这周{day}"
    if abs(week) == 1:
        return f"{'下' if week > 0 else '上'}周{day}"
    return f"{event.month}月{event.day}日"


_EN_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_EN_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
              "October", "November", "December")


def _en_relative(said: date, event: date) -> str:
    gap = (event - said).days
    if abs(gap) == 1:
        return "tomorrow" if gap > 0 else "yesterday"
    week = event.isocalendar()[1] - said.isocalendar()[1]
    if abs(week) == 1:
        return f"{'next' if week > 0 else 'last'} {_EN_DAYS[event.weekday()]}"
    return f"on {_EN_MONTHS[event.month - 1]} {event.day}"


LANGUAGES: dict[str, Language] = {
    "zh": Language(
        kinds=("讲座", "音乐会", "同学聚会", "篮球比赛", "画展", "读书会", "婚礼", "话剧", "招聘会", "马拉松"),
        places=("国家图书馆", "人民大会堂", "奥体中心", "798艺术区", "西湖边的茶馆", "市民中心", "会展中心",
                "老城区的剧院", "滨江公园", "大学体育馆", "科技馆", "湖畔酒店", "世纪公园", "美术馆"),
        companions=("表姐", "小李", "同事王强", "大学室友", "我妈", "邻居张阿姨", "男朋友", "老同学陈明",
                    "部门经理", "我弟弟"),
        filler=(
            "今天早上地铁特别挤，差点迟到。", "中午吃了一碗牛肉面，味道还不错。", "最近总是睡不好，晚上老醒。",
            "下班回家路上下起了大雨，衣服都湿透了。", "今天开了一整天的会，好累啊。", "周报终于写完了。",
            "刚给家里的绿萝浇了水。", "晚上做了红烧肉，第一次做居然成功了。", "今天天气不错，阳光很好。",
            "手机屏幕摔裂了，得找时间去修。", "这几天在追一部新剧，挺好看的。", "又胖了两斤，得开始锻炼了。",
            "楼下新开了一家咖啡店。", "今天加班到九点才走。", "快递终于到了，等了一个星期。",
            "早上跑了五公里，感觉挺舒服。", "今天忘带伞了，只好等雨停。", "孩子今天在学校得了一朵小红花。",
        ),
        relative=_zh_relative,
        tell=("{when}我要和{who}去{place}参加{kind}。", "{when}我打算跟{who}一起去{place}看{kind}。",
              "跟你说一下，{when}{who}约我去{place}，有个{kind}。", "{when}在{place}有个{kind}，我和{who}一起去。"),
        after=("那个{kind}比我想的有意思。", "{kind}结束得挺晚的，回家都十点多了。", "上次的{kind}人特别多。"),
        ask={
            "where": ("{when}我去的那个{kind}是在哪里？", "{when}我参加的{kind}在什么地方举行的？"),
            "who": ("{when}我和谁一起去的{kind}？", "{when}陪我去{kind}的是谁来着？"),
            "what": ("{when}我在{place}参加了什么活动？", "{when}我去{place}是做什么的？"),
        },
    ),
    "en": Language(
        kinds=("lecture", "concert", "class reunion", "basketball game", "art exhibition", "book club", "wedding",
               "play", "job fair", "half marathon"),
        places=("the City Library", "the Riverside Hall", "the Olympic Stadium", "the Harbor Gallery",
                "the tea house by the lake", "the Civic Center", "the Expo Center", "the Old Town Theater",
                "Eastside Park", "the university gym", "the Science Museum", "the Lakeview Hotel",
                "Central Park", "the Modern Art Museum"),
        companions=("my cousin Anna", "Tom", "my colleague Priya", "my old roommate", "my mom", "our neighbour Ruth",
                    "my boyfriend", "my friend Carlos", "my manager", "my little brother"),
        filler=(
            "The train was packed this morning, I almost missed my stop.", "Had ramen for lunch, pretty good.",
            "I keep waking up at night lately.", "Got caught in the rain on the way home, totally soaked.",
            "Back-to-back meetings all day, I'm exhausted.", "Finally finished the weekly report.",
            "Just watered the plants.", "Made a stew tonight, first try and it worked!",
            "Lovely sunny day today.", "Cracked my phone screen, need to get it fixed.",
            "I've been binge-watching a new series.", "Gained two pounds, time to work out again.",
            "A new coffee shop opened downstairs.", "Worked late until nine today.",
            "The package finally arrived after a week.", "Ran five kilometres this morning, felt great.",
        ),
        relative=_en_relative,
        tell=("{When} I'm going to a {kind} at {place} with {who}.",
              "{When} {who} and I are off to {place} for a {kind}.",
              "Heads up: {when} there's a {kind} at {place}, and I'm going with {who}.",
              "I'll be at {place} {when} for a {kind}, {who} is coming too."),
        after=("The {kind} was better than I expected.", "The {kind} ran late, I got home after ten.",
               "So many people at the {kind} last time."),
        ask={
            "where": ("Where was the {kind} I went to {when}?", "{When}, where did the {kind} take place?"),
            "who": ("Who did I go to the {kind} with {when}?", "Who came with me to the {kind} {when}?"),
            "what": ("What did I go to at {place} {when}?", "{When}, what event did I attend at {place}?"),
        },
    ),
}


def _reads_as(expression: str, said: date, event: date, *, asked: bool) -> bool:
    """Whether Strata's parser reads ``expression`` said on ``said`` as the day ``event``: as a
    question reads it (``asked``) or as a message that tells of it."""
    read = question_time if asked else mentioned_time
    found = read(expression, datetime(said.year, said.month, said.day, 12, tzinfo=UTC))
    return found is not None and found.start.date() <= event < found.end.date()


def _fill(form: str, **values: str) -> str:
    when = values.get("when", "")
    text = form.format(When=when[:1].upper() + when[1:], **values)
    return text[:1].upper() + text[1:]


def build_conversation(lang: str, n: int) -> dict[str, Any]:
    """One conversation of ``lang``, the ``n``-th: the same on every call."""
    words = LANGUAGES[lang]
    rng = random.Random(f"events-{lang}-{n}")  # noqa: S311  seeded choices, not a secret
    start = date(2024, 3, 4) + timedelta(days=7 * n)  # a Monday
    days: dict[int, list[tuple[str, str | None]]] = {d: [] for d in range(DAYS)}  # day -> (text, key)
    asks: list[dict[str, Any]] = []
    for e in range(EVENTS_PER_CONVERSATION):
        kind = words.kinds[e % len(words.kinds)]  # each kind eight times, at other times and places
        place, who = rng.choice(words.places), rng.choice(words.companions)
        event = rng.randrange(10, DAYS - 12)
        told = event - rng.randint(1, 9)
        asked = event + rng.randint(1, 12)
        d_told, d_event, d_asked = (start + timedelta(days=x) for x in (told, event, asked))
        ahead, behind = words.relative(d_told, d_event), words.relative(d_asked, d_event)
        if not (_reads_as(ahead, d_told, d_event, asked=False) and _reads_as(behind, d_asked, d_event, asked=True)):
            continue
        key = f"e{e}"
        days[told].append((_fill(rng.choice(words.tell), when=ahead, kind=kind, place=place, who=who), key))
        if rng.random() < 0.5 and event + 1 < DAYS:
            days[event + 1].append((_fill(rng.choice(words.after), kind=kind), None))
        category = CATEGORIES[e % len(CATEGORIES)]
        question = _fill(rng.choice(words.ask[category]), when=behind, kind=kind, place=place)
        answer = {"where": place, "who": who, "what": kind}[category]
        asks.append({"key": key, "question": question, "answer": answer, "category": category,
                     "date": datetime(d_asked.year, d_asked.month, d_asked.day, 20, 30).isoformat()})
    cid = f"events-{lang}-{n}"
    sessions: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    for d in range(DAYS):
        said: list[tuple[str, str | None]] = [(text, None) for text in rng.sample(words.filler, rng.randint(1, 3))]
        said += days[d]
        rng.shuffle(said)
        day = start + timedelta(days=d)
        turns = []
        for k, (text, tagged) in enumerate(said):
            tid = f"D{d}:{k}"
            turns.append({"id": tid, "speaker": "user", "text": text})
            if tagged:
                ids[tagged] = tid
        sessions.append({"id": f"D{d}", "date": datetime(day.year, day.month, day.day, 19, 0).isoformat(),
                         "turns": turns})
    questions = [
        {"id": f"{cid}-q{i}", "question": a["question"], "answer": a["answer"], "evidence": [ids[a["key"]]],
         "category": a["category"], "date": a["date"]}
        for i, a in enumerate(asks)
    ]
    return {"id": cid, "sessions": sessions, "questions": questions}


def build(conversations: int = 2) -> dict[str, Any]:
    """The whole set: ``conversations`` per language, Chinese first."""
    return {"conversations": [build_conversation(lang, n) for lang in LANGUAGES for n in range(conversations)]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_bench.evaluation.devset_events",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", required=True, type=Path, help="where to write the JSON")
    args = parser.parse_args(argv)
    data = build()
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    turns = sum(len(s["turns"]) for c in data["conversations"] for s in c["sessions"])
    questions = sum(len(c["questions"]) for c in data["conversations"])
    print(json.dumps({"out": str(args.out), "conversations": len(data["conversations"]), "turns": turns,
                      "questions": questions}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
