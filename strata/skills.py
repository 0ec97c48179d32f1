"""Procedural memory: turn a task's execution trace into a reusable skill.

A trace is the list of steps an agent took, in order: each a free-text string
or a dict with any of ``tool``, ``args``, ``command``, ``action``, ``output``,
``error`` and ``status`` ("ok" | "error"). A :class:`SkillExtractor` turns it
into a :class:`SkillDraft`: successful steps become the skill's steps, with
concrete values replaced by ``{placeholder}`` variables; failed steps become
pitfalls, with the fix when a later step shows one.

:class:`RuleSkillExtractor` is deterministic and needs no LLM.
:class:`LLMSkillExtractor` asks the LLM and validates the answer strictly; it
never falls back by itself, so the caller (which keeps the trace) decides.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from strata.importance import ENGLISH_STOP_WORDS
from strata.llm import LLM, complete_json

__all__ = [
    "LLMSkillExtractor",
    "RuleSkillExtractor",
    "SkillDraft",
    "SkillExtractor",
    "make_skill_extractor",
    "merge_drafts",
    "normalize_step",
    "skill_search_text",
]

# Limits every draft obeys, whoever produced it.
_MAX_STEPS, _MAX_PITFALLS, _MAX_CRITERIA, _MAX_TRIGGERS, _MAX_ITEM = 50, 20, 10, 10, 500
_LIST_LIMITS = {"trigger_conditions": _MAX_TRIGGERS, "steps": _MAX_STEPS,
                "common_pitfalls": _MAX_PITFALLS, "success_criteria": _MAX_CRITERIA}
_LIST_FIELDS = tuple(_LIST_LIMITS)

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
# ``{name}``; ``${HOME}`` is shell, not a skill variable.
_VARIABLE = re.compile(r"(?<!\$)\{([^\W\d]\w*)\}")
_ANY_VARIABLE = re.compile(r"\{[^\W\d]\w*\}")
_TRAILING = ".,;:!?。，；：！？、 \t"
_STOP = ENGLISH_STOP_WORDS
# Words and tool names that occur in tasks and commands alike but are vocabulary, not values.
_ORDINARY = frozenset("""
    deploy deployment deployments build run start stop restart install uninstall update upgrade create delete
    remove rm get set list ls show apply push pull clone commit merge rebase checkout test tests check fix debug
    add init exec logs log status config configure setup service services server app application image images
    container containers pod pods node nodes cluster namespace database db file files dir directory folder branch
    release version job jobs task tasks script data error errors new old all latest default main master origin
    local remote env environment rollout scale describe edit patch port host url path value id name key secret
    token user users api http https json yaml true false null none k8s kubernetes kubectl docker helm git npm pip
    python python3 node go terraform aws gcloud az make curl fastapi django flask postgres redis mysql nginx s3
    ec2 utf-8 utf8 e2e ci cd oauth2 ipv4 ipv6 x86_64 arm64 amd64 py3 bash shell sh sudo
    unit integration src lib bin docs doc dist target assets static public scripts tmp temp home build output
""".split())  # noqa: SIM905 - a word list reads best as text
_ERR_START = re.compile(r"^\s*(?:error|failed|failure|fatal|traceback)\b", re.IGNORECASE)
_ERR_ANY = re.compile(r"Error:|Exception\b|ERR!|错误|失败|报错|异常")

_URL = re.compile(r"\b[a-zA-Z][\w+.-]*://[^\s'\"`<>]+")
_HOST = re.compile(
    r"(?<![\w.\-])(?P<host>(?:\d{1,3}\.){3}\d{1,3}|localhost|[A-Za-z][\w\-]*(?:\.[A-Za-z][\w\-]*)+)"
    r"(?::(?P<port>\d{2,5}))?(?!\w|\.\w)"
)
_PORT_FLAG = re.compile(r"(--port[= ])(\d{2,5})\b")
_PATH = re.compile(
    r"(?<![\w.\-/{}$])(?:~|\.{1,2})?/[\w.\-~@+%/]*[\w\-~@+%]"
    r"|(?<![\w.\-/{}$])[\w\-.]+(?:/[\w\-.]+)+\.[A-Za-z0-9]{1,8}(?![\w/])"
    r"|\b[A-Za-z]:\\[^\s'\"`]+"
)
_VERSION = re.compile(
    r"(?<![\w.\-{])v\d+(?:\.\d+)+(?:[-+][0-9A-Za-z.]+)?(?!\.?\w)"
    r"|(?<![\w.{])\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.]+)?(?!\.?\w)"
    r"|(?<=[@:=])\d+(?:\.\d+)+(?!\.?\w)"
)
_ID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
    r"|(?<![\w\-{])(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}(?![\w\-])"
)
_QUOTED = re.compile(
    r"(?<!\w)\"([^\"\n]{1,300})\"(?!\w)|(?<!\w)'([^'\n]{1,300})'(?!\w)|“([^”\n]{1,300})”|「([^」\n]{1,300})」"
)
_TASK_TOKEN = re.compile(r"[^\W_](?:[\w.\-]*[^\W_])?")
_IDENT_SHAPE = re.compile(r"[\d_.\-]|[a-z][A-Z]")
_SHELL_OPS = frozenset({"&&", "||", "|", ";"})
_HEAD_PREFIX = frozenset({"sudo", "env", "time", "nohup", "exec", "command"})
_ENV_ASSIGN = re.compile(r"[A-Za-z_]\w*=\S*")
_LONG_FLAG = re.compile(r"--([A-Za-z][\w-]*)(?:=(.+))?")
_SUBCOMMAND = re.compile(r"[a-z][\w-]*")


# --- the draft -------------------------------------------------------------------


@dataclass(frozen=True)
class SkillDraft:
    """A skill as extracted, before it is stored, versioned and scored."""

    skill_name: str
    description: str
    trigger_conditions: list[str]
    steps: list[str]
    common_pitfalls: list[str]
    success_criteria: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SkillDraft:
        """Rebuild a draft from :meth:`to_dict` output; unknown keys are ignored.

        Raises:
            ValueError: a field is missing or has the wrong type, or ``skill_name`` is empty.
        """
        if not isinstance(data, Mapping):
            raise ValueError("a skill draft must be a mapping")  # noqa: TRY004 - one error type for bad input
        for key in ("skill_name", "description"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"skill draft field {key!r} must be a string")  # noqa: TRY004
        if not data["skill_name"].strip():
            raise ValueError("skill draft field 'skill_name' is empty")
        lists: dict[str, list[str]] = {}
        for key in _LIST_FIELDS:
            value = data.get(key)
            if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"skill draft field {key!r} must be a list of strings")
            lists[key] = list(value)
        return cls(skill_name=data["skill_name"], description=data["description"], **lists)

    @property
    def variables(self) -> list[str]:
        """Placeholder names used in the steps, in order of first use."""
        return list(dict.fromkeys(m.group(1) for step in self.steps for m in _VARIABLE.finditer(step)))


class SkillExtractor(Protocol):
    """Turns a task, its trace and its outcome into a skill draft."""

    def extract(
        self, task: str, trace: Sequence[Mapping[str, Any] | str], outcome: str | None = None
    ) -> SkillDraft: ...


def normalize_step(text: str) -> str:
    """The key two steps (or pitfalls, criteria) are duplicates under: case, spacing,
    placeholder names and trailing punctuation do not count."""
    return " ".join(_ANY_VARIABLE.sub("{}", text).casefold().split()).rstrip(_TRAILING)


def skill_search_text(draft: SkillDraft) -> str:
    """The text embedded to find this skill for a new task."""
    parts = [draft.skill_name.replace("-", " "), draft.description, *draft.trigger_conditions]
    return "\n".join(p.strip() for p in parts if p.strip())


# --- small text helpers ------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _clean(text: str, limit: int = _MAX_ITEM) -> str:
    return _clip(" ".join(text.split()), limit)


def _unique(items: Sequence[str], limit: int) -> list[str]:
    """Ordered union under :func:`normalize_step`, each item clipped, at most ``limit``."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        item = _clip(item.strip(), _MAX_ITEM)
        key = normalize_step(item)
        if key and key not in seen and len(out) < limit:
            seen.add(key)
            out.append(item)
    return out


def _first_line(text: str, limit: int = 160) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    # A traceback's first line says nothing; its last line is the error.
    return _clip(lines[-1] if lines[0].startswith("Traceback") else lines[0], limit)


def _looks_like_error(text: str) -> bool:
    return bool(_ERR_START.search(text) or _ERR_ANY.search(text))


def _slug(text: str, fallback: str = "skill") -> str:
    """At most six meaningful words joined by "-", at most 64 chars; CJK runs kept as they are."""
    text = re.sub(r"^\s*(?:请|帮我|帮忙|麻烦你?|我想|我要)+", "", text)
    words: list[str] = []
    for token in re.findall(r"[^\W_]+", text):
        for part in re.findall(f"[{_CJK}]+|[^{_CJK}]+", token):
            if re.match(f"[{_CJK}]", part):
                words.append(part[:16])
            elif part.casefold() not in _STOP:
                words.append(part.casefold())
    slug = ""
    for word in words[:6]:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > 64:
            slug = slug or word[:64]
            break
        slug = candidate
    return slug or fallback


def _ident(text: str) -> str:
    name = re.sub(r"\W+", "_", text.casefold()).strip("_")[:40].rstrip("_")
    if not name:
        return "value"
    return f"var_{name}" if name[0].isdigit() else name


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _check_input(task: str, trace: Sequence[Mapping[str, Any] | str]) -> None:
    if not isinstance(task, str) or not task.strip():
        raise ValueError("task must be a non-empty string")
    if isinstance(trace, (str, bytes)) or not isinstance(trace, Sequence):
        raise ValueError("trace must be a list of steps")  # noqa: TRY004 - one error type for bad input


# --- the rule extractor ------------------------------------------------------------


@dataclass
class _Step:
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    action: str = ""
    output: str = ""
    error: str = ""
    failed: bool = False
    confirmed: bool = False  # status "ok": a following error line is not about this step


def _parse(step: Mapping[str, Any] | str, index: int) -> _Step:
    if isinstance(step, str):
        text = step.strip()
        return _Step(error=text, failed=True) if _looks_like_error(text) else _Step(action=text)
    if not isinstance(step, Mapping):
        raise ValueError(f"trace step {index} is a {type(step).__name__}, not a dict or a string")  # noqa: TRY004
    args = step.get("args")
    error, status, output = _as_text(step.get("error")), step.get("status"), _as_text(step.get("output"))
    failed = bool(error) or status == "error"
    return _Step(
        tool=_as_text(step.get("tool")), args=dict(args) if isinstance(args, Mapping) else {},
        command=_as_text(step.get("command")), action=_as_text(step.get("action")), output=output,
        error=(error or output or "status error") if failed else "", failed=failed, confirmed=status == "ok",
    )


def _segments(command: str) -> list[list[str]]:
    """The words of each pipeline / list segment, without sudo / env prefixes."""
    out = []
    for segment in re.split(r"&&|\|\||[|;]", command):
        words = segment.split()
        while words and (words[0] in _HEAD_PREFIX or _ENV_ASSIGN.fullmatch(words[0])):
            words = words[1:]
        if words:
            out.append(words)
    return out


def _head(command: str) -> tuple[str, ...]:
    segments = _segments(command)
    if not segments:
        return ()
    words = segments[0]
    second = words[1:2] if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]) else []
    return (words[0], *second)


def _heads_match(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return bool(a and b) and a[0] == b[0] and (len(a) == 1 or len(b) == 1 or a[1] == b[1])


def _content_words(text: str) -> set[str]:
    words = {w for w in re.findall(r"[a-z0-9]+", text.casefold()) if w not in _STOP}
    for run in re.findall(f"[{_CJK}]+", text):
        words.update({run} if len(run) == 1 else {run[i : i + 2] for i in range(len(run) - 1)})
    return words


class _Vars:
    """Concrete value -> placeholder name, one instance per trace, so a value keeps its name."""

    def __init__(self, task: str) -> None:
        self.names: dict[str, str] = {}
        self.used: set[str] = set()
        self.words: dict[str, str] = {}  # values replaced wherever they occur (arg values, task words)
        tokens = _TASK_TOKEN.findall(re.sub(f"[{_CJK}]", " ", task))
        self.task_words = {t.casefold() for t in tokens if self._name_like(t)}
        self.task_idents = {t.casefold() for t in tokens if self._name_like(t) and _IDENT_SHAPE.search(t)}
        self._patterns: dict[tuple[str, ...], re.Pattern[str]] = {}

    @staticmethod
    def _name_like(token: str) -> bool:
        word = token.casefold()
        return (word not in _STOP and word not in _ORDINARY and any(c.isalpha() for c in word)
                and (len(word) >= 3 or any(c.isdigit() for c in word)))

    def name(self, value: str, kind: str, *, word: bool = False, key: str | None = None) -> str:
        key = key or value.casefold()
        if key not in self.names:
            base = candidate = _ident(kind)
            n = 1
            while candidate in self.used:
                n += 1
                candidate = f"{base}_{n}"
            self.used.add(candidate)
            self.names[key] = candidate
        if word:
            self.words.setdefault(key, self.names[key])
        return "{" + self.names[key] + "}"

    def arg(self, key: str, value: Any) -> str:
        if isinstance(value, str) and len(value.strip()) >= 3:
            value = value.strip()
            # An arg value is replaced in other steps' text too, unless it is an everyday word.
            word = (value.casefold() in self.task_words or " " in value and len(value) >= 8
                    or bool(_IDENT_SHAPE.search(value)) and self._name_like(value))
            return self.name(value, key, word=word)
        return self.name("", key, key=f"\0{key}\0{json.dumps(value, sort_keys=True, default=str)}")

    def _pattern(self, words: Sequence[str]) -> re.Pattern[str]:
        ordered = tuple(sorted(words, key=lambda w: (-len(w), w)))
        if ordered not in self._patterns:
            alternatives = "|".join(re.escape(w) for w in ordered)
            self._patterns[ordered] = re.compile(rf"(?<![\w\-{{$])(?:{alternatives})(?![\w\-}}]|\.\w)", re.IGNORECASE)
        return self._patterns[ordered]

    def text(self, text: str, *, command: bool = False) -> str:
        def sub(kind: str) -> Any:
            def replace(m: re.Match[str]) -> str:
                value = m.group(0).rstrip(".,;:!?)]'\"")
                return self.name(value, kind) + m.group(0)[len(value):]
            return replace

        text = _URL.sub(sub("url"), text)
        text = _HOST.sub(self._host, text)
        text = _PORT_FLAG.sub(lambda m: m.group(1) + self.name(m.group(2), "port"), text)
        for pattern, kind in ((_PATH, "path"), (_VERSION, "version"), (_ID, "id")):
            text = pattern.sub(sub(kind), text)
        text = _QUOTED.sub(self._quoted, text)
        if self.words:
            text = self._pattern(list(self.words)).sub(lambda m: "{" + self.words[m.group(0).casefold()] + "}", text)
        if command:
            return self._command_values(text)
        if self.task_idents:
            idents = self._pattern(list(self.task_idents))
            text = idents.sub(lambda m: self.name(m.group(0), m.group(0), word=True), text)
        return text

    def _host(self, m: re.Match[str]) -> str:
        host, port = m.group("host"), m.group("port")
        if port is None and not host[0].isdigit():
            return m.group(0)  # a dotted name without a port is too often a file name
        return self.name(host, "host") + (":" + self.name(port, "port") if port else "")

    def _quoted(self, m: re.Match[str]) -> str:
        inner = next(g for g in m.groups() if g is not None)
        if "{" in inner or not inner.strip():
            return m.group(0)
        return m.group(0)[0] + self.name(inner, "value") + m.group(0)[-1]

    def _command_values(self, command: str) -> str:
        """Task words in a command's value positions become placeholders; see :class:`RuleSkillExtractor`."""
        out: list[str] = []
        head, flag = True, ""
        for part in re.split(r"(\s+)", command):
            if not part or part.isspace():
                pass
            elif part in _SHELL_OPS:
                head, flag = True, ""
            elif head:
                head = part in _HEAD_PREFIX or bool(_ENV_ASSIGN.fullmatch(part))
            elif part.startswith("-"):
                m = _LONG_FLAG.fullmatch(part)
                flag = m.group(1) if m and m.group(2) is None else ""
                if m and m.group(2):
                    part = f"--{m.group(1)}={self._value(m.group(2), m.group(1))}"
            else:
                part, flag = self._value(part, flag), ""
            out.append(part)
        return "".join(out)

    def _value(self, token: str, kind: str) -> str:
        cut = max(token.rfind("/"), token.rfind("="))
        if cut >= 0 and token[cut] == "=" and not kind:
            kind = re.split(r"[/=]", token[:cut])[-1]
        pieces = re.split(r"([:,@])", token[cut + 1 :])
        return token[: cut + 1] + "".join(
            self.name(p, kind or p, word=True) if "{" not in p and p.casefold() in self.task_words else p
            for p in pieces
        )


class RuleSkillExtractor:
    """A skill from the trace's structure alone: deterministic, no LLM.

    Placeholders: tool ``args`` values become ``{arg_key}``. In commands and
    actions, URLs become ``{url}``, paths ``{path}`` (absolute, ``./``, ``~/``,
    or containing "/" and ending in an extension), IPv4 addresses and
    dotted/localhost hosts with a port ``{host}:{port}``, versions (``1.2.3``,
    ``v2.0``, ``==1.4``) ``{version}``, hex ids of 7+ chars and uuids ``{id}``,
    quoted strings ``"{value}"``. A word of the task (not a stopword, not in
    the everyday vocabulary above such as "deploy" or "docker", 3+ chars)
    becomes a placeholder in a command when it sits in a value position: any
    argument after the command head, the last ``/`` segment (``deploy/{payments}``)
    or the right side of ``=``. It is named after its long flag (``--namespace
    staging`` -> ``{namespace}``) or ``key=``, else after itself (``{staging}``).
    In prose only task words shaped like identifiers (``payments-api``,
    ``db01``) and values already named elsewhere in the trace are replaced. A
    value keeps one name everywhere; a second value of a kind is ``{kind_2}``.
    Error lines and outputs are quoted as they are, so triggers stay searchable.
    """

    def extract(
        self, task: str, trace: Sequence[Mapping[str, Any] | str], outcome: str | None = None
    ) -> SkillDraft:
        """Extract a skill draft.

        Args:
            task: what the agent was asked to do (English or Chinese).
            trace: the steps in execution order.
            outcome: how it ended; a failure-sounding outcome is not made a success criterion.

        Raises:
            ValueError: the task is empty or a step is neither a dict nor a string.
        """
        _check_input(task, trace)
        steps = self._steps(trace)
        names = _Vars(task)
        for step in steps:  # tool args name their values before any command can
            for key, value in step.args.items():
                names.arg(key, value)
        rendered = [self._render(step, names) for step in steps]
        # The second pass sees every name the first one found, so all steps agree.
        rendered = [self._render(step, names) for step in steps]

        ok = [i for i, s in enumerate(steps) if not s.failed]
        lines: list[str] = []
        for i in ok:
            if not lines or lines[-1] != rendered[i]:
                lines.append(rendered[i])
        pitfalls, errors = [], []
        for i, step in enumerate(steps):
            if not step.failed:
                continue
            error = _first_line(step.error) or "an error"
            errors.append(error)
            pitfall = f"{rendered[i] or 'A step'} fails with: {error}"
            fix = next((j for j in ok if j > i and self._fixes(step, rendered[i], steps[j], rendered[j])), None)
            if fix is not None and rendered[fix] == rendered[i]:
                # The same step worked on a retry: what changed is the first step in between.
                between = [k for k in ok if i < k < fix]
                pitfall += f" — fix: {rendered[between[0]]}, then retry" if between else ""
            elif fix is not None:
                pitfall += f" — fix: {rendered[fix]}"
            pitfalls.append(pitfall)

        tools = list(dict.fromkeys(t for i in (ok or range(len(steps))) for t in self._tools(steps[i])))[:6]
        clean_task = _clean(task, 300)
        end = "" if clean_task[-1] in ".!?。！？" else "。" if re.match(f"[{_CJK}]", clean_task[-1]) else "."
        description = clean_task + end + (f" Uses {', '.join(tools)}." if tools else "")
        triggers = [clean_task, *(f"when you see: {e}" for e in errors), *(f"tasks that use {t}" for t in tools)]
        criteria = []
        if outcome and outcome.strip() and not _looks_like_error(outcome):
            criteria.append(_clean(outcome))
        outputs = [steps[i].output for i in ok if steps[i].output]
        last_output = _first_line(outputs[-1], 10_000) if outputs else ""
        if last_output and len(last_output) <= 160:
            criteria.append(f"the last step reports: {last_output}")
        if errors:
            criteria.append("completes without the errors listed in the pitfalls")
        return SkillDraft(
            skill_name=_slug(_PATH.sub(" ", _URL.sub(" ", task)), _slug(task)),
            description=description,
            trigger_conditions=_unique(triggers, _MAX_TRIGGERS),
            steps=[_clip(line, _MAX_ITEM) for line in lines[:_MAX_STEPS]],
            common_pitfalls=_unique(pitfalls, _MAX_PITFALLS),
            success_criteria=_unique(criteria, _MAX_CRITERIA) or [_clip(f"the task '{clean_task}' is done", _MAX_ITEM)],
        )

    @staticmethod
    def _steps(trace: Sequence[Mapping[str, Any] | str]) -> list[_Step]:
        steps: list[_Step] = []
        for index, item in enumerate(trace):
            step = _parse(item, index)
            if step.tool or step.command or step.action:
                steps.append(step)
                continue
            last = steps[-1] if steps else None
            # An error line (or a bare output) right after a step reports on that step.
            if step.failed and last and not last.failed and not last.confirmed:
                last.failed, last.error = True, step.error
            elif step.failed:
                steps.append(step)
            elif step.output and last and not last.output:
                last.output = step.output
        return steps

    @staticmethod
    def _render(step: _Step, names: _Vars) -> str:
        if step.command:
            primary = f"Run `{names.text(step.command, command=True)}`"
        elif step.tool:
            args = ", ".join(f"{key}={names.arg(key, value)}" for key, value in step.args.items())
            primary = f"Call `{step.tool}`" + (f" with {args}" if args else "")
        else:
            primary = ""
        action = names.text(step.action) if step.action else ""
        if action and primary:
            return f"{action.rstrip(_TRAILING)}: {primary[0].lower()}{primary[1:]}"
        return action or primary

    @staticmethod
    def _fixes(failed: _Step, failed_text: str, later: _Step, later_text: str) -> bool:
        """Whether ``later`` looks like the retry that worked: same tool, same command head,
        or (free-text steps) at least half of the failed step's content words."""
        if failed.command or later.command:
            return _heads_match(_head(failed.command), _head(later.command))
        if failed.tool or later.tool:
            return failed.tool == later.tool
        words = _content_words(failed_text)
        return bool(words) and len(words & _content_words(later_text)) * 2 >= len(words)

    @staticmethod
    def _tools(step: _Step) -> list[str]:
        if not step.command:
            return [step.tool] if step.tool else []
        return [w[0].rsplit("/", 1)[-1] for w in _segments(step.command) if w[0] not in ("cd", "source", "export")]


# --- the LLM extractor -------------------------------------------------------------

_Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80, strict=True)]
_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000, strict=True)]
_Item = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=_MAX_ITEM, strict=True)]


class _SkillSchema(BaseModel):
    # Extra keys are ignored: they do no harm and a retry costs a call. Missing keys do not pass.
    model_config = ConfigDict(extra="ignore")

    skill_name: _Name
    description: _Text
    trigger_conditions: list[_Item] = Field(max_length=30)
    steps: list[_Item] = Field(min_length=1, max_length=_MAX_STEPS)
    common_pitfalls: list[_Item] = Field(max_length=30)
    success_criteria: list[_Item] = Field(max_length=30)


_SYSTEM = """You turn an AI agent's execution trace into a reusable skill (procedural memory).
Reply with ONE JSON object with exactly these keys:
- "skill_name": a short lowercase slug of 2-6 words joined by "-", e.g. "deploy-fastapi-service-kubernetes".
- "description": one or two sentences: what the skill does and which tools it uses.
- "trigger_conditions": list of strings: tasks, situations or error messages in which to use this skill.
- "steps": list of 1-50 strings: the steps that worked, in order, leaving out failed attempts. Replace \
concrete values (service names, paths, URLs, hosts, ports, versions, ids) with {placeholder} variables \
such as {service} or {path}, the same name for the same value.
- "common_pitfalls": list of strings: what failed in the trace, the error it gave and the fix if one is known.
- "success_criteria": list of strings: how to tell the task is done.
Every string is 1-500 characters. Keep the trace's language: if it is Chinese, write Chinese. \
No prose outside the JSON object."""


class LLMSkillExtractor:
    """A skill drafted by the LLM and validated strictly.

    It never falls back to the rules: :class:`~strata.errors.LLMError` and
    :class:`~strata.errors.LLMOutputInvalid` reach the caller, which still has the trace.
    """

    def __init__(self, llm: LLM, *, retries: int = 1, max_trace_chars: int = 12000) -> None:
        if retries < 0 or max_trace_chars < 500:
            raise ValueError("retries must be >= 0 and max_trace_chars >= 500")
        self.llm = llm
        self.retries = retries
        self.max_trace_chars = max_trace_chars

    def extract(
        self, task: str, trace: Sequence[Mapping[str, Any] | str], outcome: str | None = None
    ) -> SkillDraft:
        """Ask the LLM for a skill draft.

        Args:
            task: what the agent was asked to do.
            trace: the steps in execution order; sent as JSON, cut to ``max_trace_chars``.
            outcome: how it ended.

        Raises:
            ValueError: the task is empty or the trace is not a list.
            LLMError: the endpoint failed, timed out or refused.
            LLMOutputInvalid: no reply validated (after ``retries`` further attempts).
        """
        _check_input(task, trace)
        parsed: _SkillSchema = complete_json(
            self.llm, _SYSTEM, self.prompt(task, trace, outcome),
            validate=_SkillSchema.model_validate, retries=self.retries,
        )
        lists = {key: _unique(getattr(parsed, key), _LIST_LIMITS[key]) for key in _LIST_FIELDS}
        if not lists["success_criteria"]:
            lists["success_criteria"] = [_clip(f"the task '{_clean(task, 300)}' is done", _MAX_ITEM)]
        return SkillDraft(skill_name=_slug(parsed.skill_name, _slug(task)), description=parsed.description, **lists)

    def prompt(self, task: str, trace: Sequence[Mapping[str, Any] | str], outcome: str | None) -> str:
        """The user prompt: task, outcome and the trace, one JSON step per line.

        Past ``max_trace_chars`` long steps are cut first (one huge log must not
        crowd out the rest), then the middle goes: the start sets the scene, the
        end holds the fix.
        """
        full = [f"{i + 1}. {json.dumps(step, ensure_ascii=False, default=str)}" for i, step in enumerate(trace)]
        lines = [_clip(line, max(200, self.max_trace_chars // 4)) for line in full]
        shown = lines
        if sum(len(line) + 1 for line in lines) > self.max_trace_chars:
            head = _take(lines, self.max_trace_chars * 2 // 3)
            tail = _take(lines[len(head) :][::-1], self.max_trace_chars - sum(len(line) + 1 for line in head))[::-1]
            shown = [*head, f"... ({len(lines) - len(head) - len(tail)} steps omitted) ...", *tail]
        note = "\n(The trace was truncated to fit: steps omitted or cut.)" if shown != full else ""
        return (
            f"Task: {task.strip()}\nOutcome: {(outcome or '').strip() or 'not given'}\n"
            f"Trace ({len(full)} steps, JSON, one per line):\n" + "\n".join(shown) + note
        )


def _take(lines: list[str], budget: int) -> list[str]:
    """The leading lines that fit in ``budget`` characters."""
    out: list[str] = []
    for line in lines:
        budget -= len(line) + 1
        if budget < 0:
            break
        out.append(line)
    return out


def make_skill_extractor(llm: LLM | None) -> SkillExtractor:
    """The LLM extractor when an LLM is configured, else the rule extractor."""
    return LLMSkillExtractor(llm) if llm is not None else RuleSkillExtractor()


# --- merging -------------------------------------------------------------------------


def merge_drafts(existing: SkillDraft, new: SkillDraft) -> SkillDraft:
    """Merge a near-duplicate draft into an existing skill.

    The name stays; the description stays unless empty. Lists are ordered
    unions under :func:`normalize_step`. Steps keep their order; a new step
    goes right after the nearest preceding new step already present (a step
    the new trace added between two known steps lands between them); new
    steps before any known one go just before the first known one, and when
    nothing is known they are appended. Nothing existing is dropped for the limits.
    """
    steps = list(existing.steps)
    keys = [normalize_step(s) for s in steps]
    new_keys = [normalize_step(s) for s in new.steps]
    known = [keys.index(k) for k in new_keys if k in keys]
    # Index of the step the next new one goes after; leading new steps go just before the first known one.
    anchor = known[0] - 1 if known else len(steps) - 1
    for step, key in zip(new.steps, new_keys):
        if key in keys:
            anchor = keys.index(key)
        elif key and len(steps) < _MAX_STEPS:
            anchor += 1
            steps.insert(anchor, step)
            keys.insert(anchor, key)

    def union(key: str) -> list[str]:
        old = getattr(existing, key)
        return _unique([*old, *getattr(new, key)], max(_LIST_LIMITS[key], len(old)))

    return SkillDraft(
        skill_name=existing.skill_name,
        description=existing.description if existing.description.strip() else new.description,
        trigger_conditions=union("trigger_conditions"),
        steps=steps,
        common_pitfalls=union("common_pitfalls"),
        success_criteria=union("success_criteria"),
    )
