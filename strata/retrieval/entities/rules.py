"""The rule entity extractor: deterministic and fast, no model, English and Chinese.

Regular expressions for English (names, code identifiers, quoted terms, versions,
dates, a few relation verbs), jieba's part-of-speech tags for Chinese; see
:class:`RuleExtractor` for what it finds.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from strata.retrieval.entities.extraction import (
    CJK_CHAR,
    MAX_ALIASES_PER_ENTITY,
    MAX_ENTITIES_PER_TEXT,
    MAX_RELATIONS_PER_TEXT,
    Entity,
    Extraction,
    Relation,
    entity_key,
)
from strata.retrieval.segmenter import tagged_words
from strata.retrieval.terms import ENGLISH_STOP_WORDS

__all__ = ["RuleExtractor"]

_UP = "A-Z\u00c0-\u00d6\u00d8-\u00de"
_AL = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff"
_NB = r"(?<![A-Za-z0-9_\u00c0-\u024f])"  # Latin word edges; CJK counts as a boundary
_NA = r"(?![A-Za-z0-9_\u00c0-\u024f])"

_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"
)
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_DATE = re.compile(
    rf"{_NB}(?:{_MONTH}\s+{_DAY}(?:,?\s+\d{{4}})?|{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}})?"
    rf"|{_MONTH}\s+\d{{4}}|\d{{4}}-\d{{1,2}}-\d{{1,2}}|\d{{4}}/\d{{1,2}}/\d{{1,2}}){_NA}"
    r"|\d{4}\s*年\s*\d{1,2}\s*月(?:\s*\d{1,2}\s*[日号])?|\d{1,2}\s*月\s*\d{1,2}\s*[日号]"
    r"|(?:星期|礼拜|周)[一二三四五六日天]"
)
_BACKTICK = re.compile(r"`([^`\n]{1,80})`")
_QUOTED = re.compile(
    r'"([^"\n]{1,60})"|“([^”\n]{1,60})”|「([^」\n]{1,60})」|『([^』\n]{1,60})』|《([^》\n]{1,60})》'
    r"|(?<![\w'])'([^'\n]{1,60})'(?![\w'])"
)
_VERSION = re.compile(rf"{_NB}([A-Z][A-Za-z+#]*)(?:\s+|-)(v?\d+(?:\.\d+){{0,3}}[a-z]?)(?![\w]|\.\d)")
_IDENTIFIER = re.compile(
    rf"{_NB}(?:(?P<dotted>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?"
    rf"|(?P<snake>_*[a-z][a-z0-9]*(?:_[a-z0-9]+)+)"
    rf"|(?P<scream>[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"
    rf"|(?P<camel>[a-z]+[0-9]*(?:[A-Z][a-z0-9]*)+)){_NA}"
)
_ACRONYM = re.compile(rf"{_NB}([A-Z][A-Z0-9&]*[A-Z0-9])(s?){_NA}")
_CAP_TOKEN = re.compile(rf"{_NB}[{_UP}][{_AL}0-9]*(?:(?:-|['’](?![sS]{_NA}))[{_AL}]+)*{_NA}")
_CAP_JOIN = re.compile(r" +|(?: (?:of|de|van|von|der|den|da|du|del|della|di|la|le|al|bin)(?: the)?|&) ")
_SENTENCE_START = re.compile(r"(?:^|[.!?…。！？:;\n])[\"'“”‘’(\[\s]*")
# These two run on the gap after an entity, which can be a long run of spaces: their runs of spaces are
# possessive (``\s*+``), so a gap that does not match fails in one pass instead of trying every split of it.
_PAREN_AFTER = re.compile(r"\s*+[(（]\s*+([^()（）\n]{1,30}?)\s*+[)）]")
_ALIAS_MID = re.compile(
    r"\s*+,?\s*+(?:also known as|aka|a\.k\.a\.?|otherwise known as|known as|nicknamed)\s*+,?\s*+"
    r"|\s*+[,，]?\s*+(?:又称|又名|简称|也叫|也称|俗称|别名)\s*+[:：]?\s*+",
    re.IGNORECASE,
)
_LIST_MID = re.compile(r"\s*(?:,|, and|, or|and|or|&|和|与|及|以及|、|，)\s*", re.IGNORECASE)

_MONTHS = {
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
}
_WEEKDAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
_TITLES = {"mr", "mrs", "ms", "mx", "dr", "prof", "sir", "madam", "miss", "aunt", "uncle"}
# Capitalised at a sentence start or as an interjection, yet no name.
_CAP_STOP = ENGLISH_STOP_WORDS | _TITLES | set(
    """
    yesterday today tomorrow tonight sorry cool nice wow oh ah yeah yep nope sure awesome absolutely
    definitely maybe perhaps actually honestly anyway btw thanks congrats congratulations good glad happy
    lol haha hmm um uh omg right exactly true agreed totally wait look see check try go keep hope wish
    plus besides however although though since last next every many first second finally also then
    hey hi hello dear welcome bye goodbye cheers yes no not never always sometimes often usually
    wonderful amazing fantastic beautiful fun love sounds seems looks thank let lets gonna wanna
    speaking talking anyways alright well oops whoa wish hopefully luckily unfortunately recently
    lately currently already still just even sounds that'd i'd i'm i've i'll
    """.split()  # noqa: SIM905  a block of words reads and edits better than a list of quoted ones
)
# May begin a name ("New York", "North Carolina") but is no name alone.
_CAP_WEAK = {
    "new", "old", "north", "south", "east", "west", "great", "big", "little", "united", "upper", "lower",
    "central", "saint", "san", "santa", "los", "las", "el",
}
# After a sentence-initial capitalised word, these say it was a verb: "Call it ...", "Take the ...".
_VERB_OBJECT = {
    "it", "me", "him", "her", "them", "us", "the", "a", "an", "this", "that", "these", "those", "your", "my",
    "our", "his", "their", "its", "you", "some", "any", "all",
}
_ACRONYM_STOP = {"I", "A", "OK", "AM", "PM", "OMG", "LOL", "BTW", "FYI", "IMO", "IMHO", "TBH", "IDK", "ASAP", "LMAO"}
_ORG_SUFFIX = {
    "inc", "corp", "corporation", "ltd", "llc", "company", "co", "university", "college", "institute",
    "foundation", "group", "labs", "lab", "bank", "school", "academy", "association", "agency",
    "department", "ministry", "hospital", "club", "team", "society", "council",
}
_PLACE_SUFFIX = {
    "city", "town", "village", "street", "avenue", "road", "river", "lake", "mountain", "mountains",
    "park", "island", "islands", "county", "state", "province", "valley", "beach", "bay", "coast",
    "country", "kingdom", "republic", "airport", "station", "square", "district",
}
_PERSON_NEXT = {
    "said", "says", "told", "asked", "replied", "answered", "thinks", "thought", "feels", "felt",
    "loves", "loved", "likes", "liked", "wants", "wanted", "went", "goes", "herself", "himself",
}
_PERSON_PREV = {
    "friend", "sister", "brother", "mom", "mother", "dad", "father", "wife", "husband", "son",
    "daughter", "cousin", "grandma", "grandpa", "boss", "colleague", "coworker", "partner",
    "boyfriend", "girlfriend", "neighbor", "neighbour", "teacher", "mentor",
    "hey", "hi", "hello", "dear", "thanks", "congrats", "bye",
}
_PERSON_POSSESSED = {
    "wife", "husband", "mom", "dad", "mother", "father", "kids", "children", "son", "daughter",
    "friend", "friends", "partner", "boyfriend", "girlfriend", "birthday", "family", "sister", "brother",
    "dog", "cat", "pet", "parents", "house", "wedding", "husband's", "wife's",
}
_ZH_STOP_NOUNS = frozenset(
    """
    时候 东西 问题 事情 今天 明天 昨天 我们 你们 他们 她们 大家 时间 地方 情况 样子 感觉 方面 方式 事儿 一下
    有点 什么 怎么 这样 那样 现在 以后 之前 以前 最近 一点 部分 原因 结果 办法 意思 关系 机会 经验 能力
    生活 世界 朋友 人们 东东 内容 方法 过程 问题 地方 时代 中国人 别人 自己 周末 晚上 早上 下午 上午 今年
    去年 明年 一天 每天 小时 分钟 天气 心情 想法 建议 目标 计划 工作 学习 时期 阶段 数量 水平 作用 影响
    """.split()  # noqa: SIM905  a block of words reads and edits better than a list of quoted ones
)
_ZH_TYPES = {"nr": "person", "nrfg": "person", "nrt": "thing", "ns": "place", "nt": "org", "nz": "thing", "n": "thing"}

_EN_RELATIONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), relation)
    for pattern, relation in (
        (r"(?:is|are|was|were)(?: also)? (?:a |an )?part of(?: the)?", "part_of"),
        (r"(?:is|are|was|were) written in", "written_in"),
        (r"(?:is|are|was|were) (?:located|based) in(?: the)?", "located_in"),
        (r"(?:is|are|was|were)(?: also| now| still| actually)?(?: (?:a|an|the))?", "is"),
        (r"{adv}(?:uses|use|used|is using|are using|was using|using|is built on|built on|built with){det}", "uses"),
        (r"{adv}(?:depends|depend|depended|is dependent|are dependent|relies|rely|relied) on{det}", "depends_on"),
        (r"{adv}(?:runs|run|ran|is running|are running|running) on(?: top of)?{det}", "runs_on"),
        (r"{adv}(?:works|work|worked|is working|are working|was working) (?:at|for){det}", "works_at"),
        (r"{adv}(?:is employed|was employed) (?:at|by){det}", "works_at"),
        (r"{adv}(?:works|work|worked|is working|are working|was working) on{det}", "works_on"),
        (r"{adv}(?:lives|live|lived|is living|are living|was living) in{det}", "lives_in"),
    )
    for pattern in [
        pattern.format(
            adv=r"(?:(?:also|now|still|mainly|mostly|only|already|currently|actually|really|just|primarily|heavily) )*",
            det=r"(?: (?:a|an|the|my|our|their|his|her|its|your))?",
        )
    ]
)
_ZH_RELATIONS: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(mid), tail, relation)
    for mid, tail, relation in (
        (r"(?:也|就|都|还)?是", "的一部分", "part_of"),
        (r"(?:也|就|都|还)?是", "的组成部分", "part_of"),
        (r"(?:也|还|一直)?(?:在|于)", "工作", "works_at"),
        (r"(?:也|还|一直)?(?:在|于)", "上班", "works_at"),
        (r"(?:也|还|一直)?(?:在|于)", "任职", "works_at"),
        (r"(?:运行|跑|部署)在", "", "runs_on"),
        (r"(?:也|还|一直)?(?:住在|生活在|居住在|定居在|定居于)", "", "lives_in"),
        (r"(?:也|就|都|还)?是(?:一个|一种|一家|一款|个)?", "", "is"),
        (r"(?:也|都|还|主要|一直)?(?:使用|采用|在用|用|使用了|采用了|用了)", "", "uses"),
        (r"(?:也|都|还|主要)?依赖(?:于)?", "", "depends_on"),
        (r"(?:位于|坐落于|坐落在)", "", "located_in"),
        (r"(?:负责|开发|参与|在做)", "", "works_on"),
    )
)
_RELATION_TYPES = {  # relation -> (type of source, type of target), applied to untyped ends
    "lives_in": ("person", "place"),
    "works_at": ("person", "org"),
    "works_on": ("thing", "project"),
}


_Claim = Callable[[int, int, str, str, int], None]  # (start, end, name, type, rank)


class _Span:
    __slots__ = ("aliases", "end", "name", "rank", "start", "type")

    def __init__(self, start: int, end: int, name: str, type_: str, rank: int) -> None:
        self.start, self.end, self.name, self.type, self.rank = start, end, name, type_, rank
        self.aliases: list[str] = []


class RuleExtractor:
    """Entities and relations by rules: deterministic, no model, English and Chinese.

    Names (capitalised words and multi-word names), code identifiers, quoted
    and backticked terms, word + number codes (``Python 3.11``, ``HTTP 429``),
    dates; Chinese nouns by jieba's part-of-speech tags. Relations come from a
    few verb patterns between two adjacent entities in a sentence.
    """

    def __init__(self, *, max_entities: int = MAX_ENTITIES_PER_TEXT) -> None:
        self._max_entities = max_entities

    def extract(self, text: str) -> Extraction:
        if not text or not text.strip():
            return Extraction()
        spans = self._spans(text)
        spans = self._merge_aliases(text, spans)
        relations = self._relations(text, spans)
        return self._build(spans, relations)

    # -- spans

    def _spans(self, text: str) -> list[_Span]:
        mask = bytearray(len(text))  # characters already claimed by an earlier, surer rule
        spans: list[_Span] = []
        starts = {m.end() for m in _SENTENCE_START.finditer(text)}

        def claim(start: int, end: int, name: str, type_: str, rank: int) -> None:
            if end <= start or mask.find(1, start, end) != -1:
                return
            name = name.strip()
            if not entity_key(name):
                return
            mask[start:end] = b"\x01" * (end - start)
            spans.append(_Span(start, end, name, type_, rank))

        for m in _BACKTICK.finditer(text):
            claim(m.start(), m.end(), m.group(1), "code", 0)
        for m in _DATE.finditer(text):
            claim(m.start(), m.end(), m.group(0), "date", 1)
        for m in _QUOTED.finditer(text):
            inner = next(g for g in m.groups() if g is not None)
            if _quoted_term(inner):
                claim(m.start(), m.end(), inner, "concept", 2)
        for m in _VERSION.finditer(text):
            word, number = m.group(1), m.group(2)
            if word.lower() in _CAP_STOP or word.lower() in _MONTHS or word.lower() in _WEEKDAYS:
                continue
            if m.start() in starts and "." not in number and not word.isupper():
                continue  # "Give 3 examples"
            claim(m.start(), m.end(), m.group(0), "tool" if "." in number or not word.isupper() else "code", 3)
        for m in _IDENTIFIER.finditer(text):
            if m.group("dotted") and not _dotted_name(m.group("dotted")):
                continue
            claim(m.start(), m.end(), m.group(0), "code", 4)
        for m in _ACRONYM.finditer(text):
            word = m.group(1)
            if word not in _ACRONYM_STOP and word.lower() not in ENGLISH_STOP_WORDS:
                claim(m.start(), m.end(), word, "thing", 5)
        self._capitalised(text, mask, starts, claim)
        if CJK_CHAR.search(text):
            self._chinese(text, claim)
        spans.sort(key=lambda s: s.start)
        return spans

    def _capitalised(self, text: str, mask: bytearray, starts: set[int], claim: _Claim) -> None:
        tokens = [m for m in _CAP_TOKEN.finditer(text) if mask.find(1, m.start(), m.end()) == -1]
        groups: list[list[re.Match[str]]] = []
        for m in tokens:
            word = m.group(0).lower()
            if word in _CAP_STOP:
                groups.append([m])  # a stop word stands alone and is dropped below
                continue
            last = groups[-1] if groups else None
            if (
                last
                and last[-1].group(0).lower() not in _CAP_STOP
                and _CAP_JOIN.fullmatch(text, last[-1].end(), m.start())
                and len(last) < 6
            ):
                last.append(m)
            else:
                groups.append([m])
        for group in groups:
            if group[0].group(0).lower() in _CAP_STOP:
                continue
            start, end = group[0].start(), group[-1].end()
            words = [m.group(0) for m in group]
            lower = words[-1].lower()
            initial = start in starts
            if len(group) == 1 and (lower in _CAP_WEAK or (initial and _common_word(text, words[0], end))):
                continue
            type_ = "thing"
            if len(group) == 1 and (lower in _WEEKDAYS or lower.rstrip("s") in _WEEKDAYS):
                type_ = "date"
            elif len(group) == 1 and lower in _MONTHS:
                if lower == "may" and not _MAY_DATE.search(text, max(0, start - 8), start):
                    continue  # "May I ..."
                type_ = "date"
            elif lower in _ORG_SUFFIX:
                type_ = "org"
            elif lower in _PLACE_SUFFIX or words[0].lower() in {"mount", "lake", "fort", "port"}:
                type_ = "place"
            elif _looks_like_person(text, start, end, initial):
                type_ = "person"
            claim(start, end, text[start:end], type_, 6)

    def _chinese(self, text: str, claim: _Claim) -> None:
        cursor = 0
        for word, flag in tagged_words(text):
            start = text.find(word, cursor)
            if start < 0:
                continue
            cursor = start + len(word)
            type_ = _ZH_TYPES.get(flag)
            if (
                type_ is None
                or len(word) < 2
                or word in _ZH_STOP_NOUNS
                or not CJK_CHAR.search(word)
            ):
                continue
            claim(start, cursor, word, type_, 7 if flag == "n" else 6)

    # -- aliases and relations

    def _merge_aliases(self, text: str, spans: list[_Span]) -> list[_Span]:
        out: list[_Span] = []
        i = 0
        while i < len(spans):
            span = spans[i]
            nxt = spans[i + 1] if i + 1 < len(spans) else None
            paren = _PAREN_AFTER.match(text, span.end)
            alias: str | None = None
            end = span.end
            if paren and _alias_like(paren.group(1)):
                alias, end = paren.group(1), paren.end()
                while nxt is not None and nxt.start < end:  # spans inside the parentheses
                    i += 1
                    nxt = spans[i + 1] if i + 1 < len(spans) else None
            elif nxt is not None and _ALIAS_MID.fullmatch(text, span.end, nxt.start):
                alias, end = nxt.name, nxt.end
                if span.type == "thing":
                    span.type = nxt.type
                i += 1
            if alias is not None:
                name = span.name
                if len(alias) > len(name):  # the longer form names the node: "NYC (New York City)"
                    name, alias = alias, name
                merged = _Span(span.start, end, name, span.type, span.rank)
                merged.aliases = [alias, *span.aliases]
                span = merged
            out.append(span)
            i += 1
        return out

    def _relations(self, text: str, spans: list[_Span]) -> list[tuple[_Span, str, _Span]]:
        found: list[tuple[_Span, str, _Span]] = []
        for i in range(len(spans) - 1):
            a, b = spans[i], spans[i + 1]
            relation = _relation_between(text, a, b)
            if relation is None:
                continue
            found.append((a, relation, b))
            for k in range(i + 2, len(spans)):  # "X uses Y and Z"
                if not _LIST_MID.fullmatch(text, spans[k - 1].end, spans[k].start):
                    break
                found.append((a, relation, spans[k]))
        return found[:MAX_RELATIONS_PER_TEXT]

    def _build(self, spans: list[_Span], relations: list[tuple[_Span, str, _Span]]) -> Extraction:
        for a, relation, b in relations:
            if relation in _RELATION_TYPES:
                ta, tb = _RELATION_TYPES[relation]
                if a.type == "thing":
                    a.type = ta
                if b.type == "thing":
                    b.type = tb
        by_key: dict[str, tuple[str, str, list[str]]] = {}
        name_of: dict[int, str] = {}
        for span in sorted(spans, key=lambda s: (s.rank, s.start)):
            key = entity_key(span.name)
            if key not in by_key:
                if len(by_key) >= self._max_entities:
                    continue
                by_key[key] = (span.name, span.type, [])
            name, type_, aliases = by_key[key]
            if type_ == "thing" and span.type != "thing":
                by_key[key] = (name, span.type, aliases)
            for alias in span.aliases:
                if entity_key(alias) not in {entity_key(a) for a in aliases} | {key}:
                    aliases.append(alias)
            name_of[id(span)] = name
        order = {entity_key(s.name): s.start for s in reversed(spans)}
        entities = tuple(
            Entity(name, type_, tuple(aliases[:MAX_ALIASES_PER_ENTITY]))
            for key, (name, type_, aliases) in sorted(by_key.items(), key=lambda kv: order.get(kv[0], 0))
        )
        rels: dict[Relation, None] = {}
        for a, relation, b in relations:
            sa, sb = name_of.get(id(a)), name_of.get(id(b))
            if sa is not None and sb is not None and entity_key(sa) != entity_key(sb):
                rels.setdefault(Relation(sa, relation, sb))
        return Extraction(entities, tuple(rels))


_MAY_DATE = re.compile(r"(?:in|on|of|since|until|by|last|next|early|late|mid|this|from|to)\s+$", re.IGNORECASE)


def _common_word(text: str, word: str, end: int) -> bool:
    """A capitalised word at a sentence start that is probably not a name."""
    lower = word.lower()
    if lower in _CAP_STOP or len(word) < 3 or lower.endswith(("ing", "ed", "ly")):
        return True
    following = text[end : end + 12].split(maxsplit=1)
    return bool(following) and following[0].strip(",.!?") in _VERB_OBJECT


def _looks_like_person(text: str, start: int, end: int, initial: bool) -> bool:
    before = text[max(0, start - 24) : start].lower().split()
    after = text[end : end + 24]
    if before and before[-1].rstrip(".") in _TITLES | _PERSON_PREV:
        return True
    if initial and after.startswith(":") and (start == 0 or text[start - 1] == "\n"):
        return True  # "Caroline: ..." speaker prefix
    words = after.lower().replace("’", "'").split()
    if not words:
        return False
    if words[0] in _PERSON_NEXT:
        return True
    if after[:1] in {"!", "?"} and text[max(0, start - 2) : start] == ", ":
        return True  # "That's awesome, Caroline!"
    return after[:2] in {"'s", "’s"} and len(words) > 1 and words[1].strip(".,!?") in _PERSON_POSSESSED


def _quoted_term(inner: str) -> bool:
    words = inner.split()
    if not words or len(words) > 5 or len(inner) > 40 or inner.strip()[-1] in ".!?,;:。！？，":
        return False
    stops = sum(w.lower() in ENGLISH_STOP_WORDS for w in words)
    return stops * 2 <= len(words) and bool(re.search(r"\w", inner))


def _dotted_name(name: str) -> bool:
    parts = name.split(".")
    return len(name) >= 4 and any(len(p) > 1 for p in parts) and name.lower() not in {"e.g", "i.e", "a.m", "p.m"}


def _alias_like(inner: str) -> bool:
    """Parenthesised text that names something: "(NYC)", "(New York City)", "（北大）"; not "(my friend)"."""
    words = inner.split()
    if not words or len(words) > 4 or inner.isdigit():
        return False
    if CJK_CHAR.match(inner[0]):
        return True
    return all(w[0].isupper() or w.lower() in {"of", "de", "van", "von", "the", "&"} for w in words)


def _relation_between(text: str, a: _Span, b: _Span) -> str | None:
    mid = text[a.end : b.start]
    if len(mid) > 40:
        return None
    tail = text[b.end : b.end + 6]
    if tail[:2] in {"'s", "’s"}:
        return None  # "X is Mel's friend": Mel is not the object
    if CJK_CHAR.search(mid) or not mid.strip():
        compact = mid.strip()
        for pattern, need_tail, relation in _ZH_RELATIONS:
            if pattern.fullmatch(compact) and tail.startswith(need_tail):
                if relation == "is" and tail.startswith("的"):
                    return None  # "X是Y的工程师"
                if relation == "works_on" and a.type != "person":
                    return None  # "他使用Python开发Strata": Python develops nothing
                return relation
        return None
    words = " ".join(mid.lower().split()).strip(" ,")
    for en_pattern, relation in _EN_RELATIONS:
        if en_pattern.fullmatch(words):
            return relation
    return None
