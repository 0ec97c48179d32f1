"""The rule extractor: a skill from a trace's structure alone, deterministic, no LLM.

It parses each step, names concrete values (URLs, paths, hosts, versions,
ids, task words) as ``{placeholder}`` variables, keeps the successful steps
and turns failed ones into pitfalls with their fix; see
:class:`RuleSkillExtractor` for the exact rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from strata.procedural.draft import (
    CJK,
    MAX_CRITERIA,
    MAX_ITEM,
    MAX_PITFALLS,
    MAX_STEPS,
    MAX_TRIGGERS,
    TRAILING_PUNCTUATION,
    SkillDraft,
    check_trace_input,
    clean_text,
    clip_text,
    normalize_step,
    slugify,
    unique_items,
)
from strata.retrieval.terms import ENGLISH_STOP_WORDS as _STOP

__all__ = ["RuleSkillExtractor"]

_MAX_INPUT = 4000  # a step's text is cut to this before the regexes see it: bounded work per step

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
    unit integration src lib bin docs doc dist target assets static public scripts tmp temp home output
""".split())  # noqa: SIM905  a block of words reads and edits better than a list of quoted ones
_ERR_START = re.compile(r"^\s*(?:error|failed|failure|fatal|traceback)\b", re.IGNORECASE)
_ERR_ANY = re.compile(r"Error:|Exception\b|ERR!|错误|失败|报错|异常")

#: A scheme is at most 32 characters: unbounded, a run like "a.a.a.…" (a word boundary at every
#: dot) made each start scan to the end, quadratic (16,000 characters: 1 s).
_URL = re.compile(r"\b[a-zA-Z][\w+.-]{0,31}://[^\s'\"`<>]+")
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


# --- small text helpers ------------------------------------------------------------


def _first_line(text: str, limit: int = 160) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    # A traceback's first line says nothing; its last line is the error.
    return clip_text(lines[-1] if lines[0].startswith("Traceback") else lines[0], limit)


def _looks_like_error(text: str) -> bool:
    return bool(_ERR_START.search(text) or _ERR_ANY.search(text))


def _ident(text: str) -> str:
    name = re.sub(r"\W+", "_", text.casefold()).strip("_")[:40].rstrip("_")
    if not name:
        return "value"
    return f"var_{name}" if name[0].isdigit() else name


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value.strip() if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


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
        text = step.strip()[:_MAX_INPUT]
        return _Step(error=text, failed=True) if _looks_like_error(text) else _Step(action=text)
    if not isinstance(step, Mapping):
        raise ValueError(f"trace step {index} is a {type(step).__name__}, not a dict or a string")
    args = step.get("args")
    error, status, output = _as_text(step.get("error")), step.get("status"), _as_text(step.get("output"))
    # A tool's error often comes back as its output (a LangChain observation, an Agents SDK
    # function_call_output): an output that starts like an error is one, unless the step said "ok".
    failed = bool(error) or status == "error" or (status != "ok" and bool(_ERR_START.search(output)))
    return _Step(
        tool=_as_text(step.get("tool")), args=dict(args) if isinstance(args, Mapping) else {},
        command=_as_text(step.get("command"))[:_MAX_INPUT], action=_as_text(step.get("action"))[:_MAX_INPUT],
        output=output,
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


def _same_kind(failed: tuple[str, Any], later: tuple[str, Any]) -> bool:
    if failed[0] != later[0]:
        return False
    if failed[0] == "command":
        return _heads_match(failed[1], later[1])
    if failed[0] == "tool":
        return bool(failed[1] == later[1])
    # Free text: the later step repeats at least half of the failed step's content words.
    return bool(failed[1]) and len(failed[1] & later[1]) * 2 >= len(failed[1])


def _content_words(text: str) -> set[str]:
    words = {w for w in re.findall(r"[a-z0-9]+", text.casefold()) if w not in _STOP}
    for run in re.findall(f"[{CJK}]+", text):
        words.update({run} if len(run) == 1 else {run[i : i + 2] for i in range(len(run) - 1)})
    return words


class _Vars:
    """Concrete value -> placeholder name, one instance per trace, so a value keeps its name."""

    def __init__(self, task: str) -> None:
        self.names: dict[str, str] = {}
        self.used: set[str] = set()
        self.words: dict[str, str] = {}  # values replaced wherever they occur (arg values, task words)
        tokens = _TASK_TOKEN.findall(re.sub(f"[{CJK}]", " ", task))
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
            # An arg value is replaced in other steps' text too, unless it is an everyday word (or a blob).
            word = len(value) <= 200 and (value.casefold() in self.task_words or (" " in value and len(value) >= 8)
                                          or (bool(_IDENT_SHAPE.search(value)) and self._name_like(value)))
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
    dotted/localhost hosts with a port (or ``--port N``) ``{host}:{port}``, versions (``1.2.3``,
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

    Failures: a step with ``error`` or ``status: "error"``, or whose ``output``
    starts like an error (``Error:``, ``Traceback``, ``failed``) without
    ``status: "ok"``, is a pitfall, not a step; an error-looking string (or a bare ``error``) reports on the step
    before it unless that one said ``status: "ok"``. The fix is the first later
    successful step with the same command head (``docker push``), the same
    tool, or (free text) half the failed step's words; when that is the very
    same step retried, the fix is the first step in between.
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
        check_trace_input(task, trace)
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
        pitfalls: dict[str, str] = {}
        errors: list[str] = []
        shapes = [self._shape(step, text) for step, text in zip(steps, rendered, strict=True)]
        for i, step in enumerate(steps):
            if not step.failed:
                continue
            error = _first_line(step.error) or "an error"
            errors.append(error)
            if len(pitfalls) >= MAX_PITFALLS:
                continue  # enough; the search for a fix is what costs
            pitfall = f"{rendered[i] or 'A step'} fails with: {error}"
            fix = next((j for j in ok if j > i and _same_kind(shapes[i], shapes[j])), None)
            if fix is not None and rendered[fix] == rendered[i]:
                # The same step worked on a retry: what changed is the first step in between.
                between = [k for k in ok if i < k < fix]
                pitfall += f" — fix: {rendered[between[0]]}, then retry" if between else ""
            elif fix is not None:
                pitfall += f" — fix: {rendered[fix]}"
            pitfalls.setdefault(normalize_step(pitfall), pitfall)

        tools = list(dict.fromkeys(t for i in (ok or range(len(steps))) for t in self._tools(steps[i])))[:6]
        clean_task = clean_text(task, 300)
        end = "" if clean_task[-1] in ".!?。！？" else "。" if re.match(f"[{CJK}]", clean_task[-1]) else "."
        description = clean_task + end + (f" Uses {', '.join(tools)}." if tools else "")
        triggers = [clean_task, *(f"when you see: {e}" for e in errors), *(f"tasks that use {t}" for t in tools)]
        criteria = []
        if outcome and outcome.strip() and not _looks_like_error(outcome):
            criteria.append(clean_text(outcome))
        outputs = [steps[i].output for i in ok if steps[i].output]
        last_output = _first_line(outputs[-1], 10_000) if outputs else ""
        if last_output and len(last_output) <= 160:
            criteria.append(f"the last step reports: {last_output}")
        if errors:
            criteria.append("completes without the errors listed in the pitfalls")
        return SkillDraft(
            skill_name=slugify(_PATH.sub(" ", _URL.sub(" ", task)), slugify(task)),
            description=description,
            trigger_conditions=unique_items(triggers, MAX_TRIGGERS),
            steps=[clip_text(line, MAX_ITEM) for line in lines[:MAX_STEPS]],
            common_pitfalls=unique_items(list(pitfalls.values()), MAX_PITFALLS),
            success_criteria=(
                unique_items(criteria, MAX_CRITERIA) or [clip_text(f"the task '{clean_task}' is done", MAX_ITEM)]
            ),
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
            return f"{action.rstrip(TRAILING_PUNCTUATION)}: {primary[0].lower()}{primary[1:]}"
        return action or primary

    @staticmethod
    def _shape(step: _Step, text: str) -> tuple[str, Any]:
        """What a later step must share with a failed one to count as its fix: the command
        head, else the tool, else (free text) the content words."""
        if step.command:
            return "command", _head(step.command)
        return ("tool", step.tool) if step.tool else ("text", _content_words(text))

    @staticmethod
    def _tools(step: _Step) -> list[str]:
        if not step.command:
            return [step.tool] if step.tool else []
        return [w[0].rsplit("/", 1)[-1] for w in _segments(step.command) if w[0] not in ("cd", "source", "export")]
