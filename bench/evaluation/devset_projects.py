"""A development set of long user–assistant project conversations, in the neutral format.

``python -m strata_bench.evaluation.devset_projects --out projects.json`` writes it; then
``strata eval retrieval --dataset projects.json --format strata``. Unlike LoCoMo (short chit-chat
between two friends) and MemSim (short Chinese messages), each conversation here is a user and
an AI assistant working on one project over weeks: replies of a median ~1,500 characters, pasted
logs, stack traces, code and configuration of 5,000 to 60,000 characters and a few above 100,000,
standing instructions, facts that change (a latency, a name, a deadline, a person), and decisions
whose reasons sit in the middle of a long message.

What is written by hand is what a question can ask about: every fact, instruction, decision and
later update, and every question with the turn(s) that answer it. The bulk of long messages
(log lines, tracebacks, code, configuration, explanatory prose) and the ordinary exchanges
between the scripted ones are generated from seeded choices, one :class:`random.Random` per turn
seeded by its project and turn id, so a build is the same on every machine and every run: no
network, no model.

The module is long because most of it is the hand-written content (:data:`PROJECTS`), which is
data; the generator itself is the first third.

Question categories:

- ``single-hop``: one fact in one turn;
- ``update``: a fact that changed; the evidence is the turn with the newest value only;
- ``previous-value``: what it was before the change; the evidence is the older turn. Its id ends
  like its ``update`` counterpart's (``<project>-update-<key>`` / ``<project>-previous-<key>``);
- ``instruction``: a standing instruction or preference of the user;
- ``long-message``: the fact sits inside a message over 5,000 characters;
- ``temporal``: when something happened or was decided;
- ``multi-hop``: needs two turns.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES", "PROJECTS", "A", "Ask", "Chat", "Project", "Say", "U", "Vocab", "build", "build_project", "main",
    "statistics",
]

CATEGORIES = ("single-hop", "update", "previous-value", "instruction", "long-message", "temporal", "multi-hop")
#: Where the hand-written text of a padded message goes.
POSITIONS = ("start", "middle", "end")
#: Median characters of an assistant reply that is not given a size.
REPLY_MEDIAN_CHARS = 1300


# ----------------------------------------------------------------- the content model


@dataclass(frozen=True)
class Say:
    """One scripted message.

    ``text`` is written by hand. With ``pad`` (a filler kind: ``reply``, ``log``, ``trace``,
    ``code``, ``config``, ``table``, ``plan``) it is placed ``at`` the start, middle or end of generated
    material that brings the message to about ``size`` characters. An assistant message without
    ``pad`` is padded as a ``reply`` of a drawn size at a drawn position; a user message without
    it is sent as written. ``lead``, when set, opens the message. ``key`` names the turn for questions.
    """

    speaker: str
    text: str
    key: str | None = None
    pad: str | None = None
    size: int = 0
    at: str | None = None
    #: Written by hand too, and always first: what a user says before pasting material.
    lead: str = ""


def U(text: str, key: str | None = None, *, pad: str | None = None, size: int = 0, at: str | None = None,
      lead: str = "") -> Say:
    """A user message."""
    return Say("user", text, key, pad, size, at, lead)


def A(text: str, key: str | None = None, *, pad: str | None = "reply", size: int = 0, at: str | None = None) -> Say:
    """An assistant message (a padded reply unless ``pad=None``)."""
    return Say("assistant", text, key, pad, size, at)


@dataclass(frozen=True)
class Chat:
    """``pairs`` generated exchanges (a user's question, the assistant's reply) about the project."""

    pairs: int


@dataclass(frozen=True)
class Ask:
    """A question: its category, its text, a short answer, and the keys of its evidence turns.
    ``pair`` links an ``update`` question to its ``previous-value`` counterpart."""

    category: str
    question: str
    answer: str
    evidence: tuple[str, ...]
    pair: str | None = None


@dataclass(frozen=True)
class Vocab:
    """The words generated material about a project is made of."""

    lang: str  # "en" or "de": the language of prose and of generated user questions
    code: str  # the language of code and tracebacks: python, kotlin, typescript, hcl, latex, sql
    components: tuple[str, ...]
    functions: tuple[str, ...]
    things: tuple[str, ...]
    paths: tuple[str, ...]
    errors: tuple[str, ...]
    libs: tuple[str, ...]


@dataclass(frozen=True)
class Project:
    """A conversation: sessions (days after ``start``, then messages) and questions."""

    id: str
    title: str
    start: date
    vocab: Vocab
    sessions: tuple[tuple[int, tuple[Say | Chat, ...]], ...]
    asks: tuple[Ask, ...] = field(default=())


# ----------------------------------------------------------------- generated material

_EN_SENTENCES = (
    "The {comp} path does {n} round trips per request today; batching them would bring that down to one.",
    "I'd keep `{func}` pure and move the I/O into {comp}, so it can be tested without a network.",
    "One thing to watch: the {thing} is read on every call, so caching it for {n} seconds is safe "
    "as long as a write invalidates it.",
    "If {comp} raises `{err}`, the caller retries up to {k} times with jittered backoff.",
    "The test in `{path}` asserts on ordering, which stops being guaranteed once {comp} runs concurrently.",
    "Let's add a metric for the {thing} so we can see whether the change actually helps.",
    "There's no need to lock everything here; a narrower lock around the {thing} is enough.",
    "A quick way to confirm the theory is to run `{func}` with logging at DEBUG and compare timestamps.",
    "The diff below is small: it renames one argument and moves the validation to the top.",
    "This also removes the hidden dependency on {comp} that made the import order matter.",
    "I'd rather not add a dependency for this; the standard library covers it.",
    "Note that `{func}` swallows `{err}` at the moment, which hides the real failure.",
    "The simplest fix is to pass the {thing} in explicitly instead of reading it from a global.",
    "For the edge case of an empty {thing}, return early and log at INFO.",
    "Before merging, run the {comp} tests twice; the flake showed up about one run in {k}.",
    "We can split this into two pull requests: the refactor first, then the change in behaviour.",
    "Measured locally, `{func}` went from {ms} ms to {ms2} ms on the sample input.",
    "The warning in that output is harmless; it comes from {comp} being imported twice.",
    "Keep the public signature of `{func}` as it is so that callers don't break.",
    "I checked the {lib} documentation: the option you want exists but is off by default.",
    "The root cause is that {comp} and {comp2} both assume they own the {thing}.",
    "A property-based test would catch this class of bug; a sketch is below.",
    "It's worth writing down why the {thing} is configured this way, right next to the setting.",
    "Nothing here changes the on-disk format, so no migration is needed.",
    "If you want to be extra careful, put the new behaviour behind a flag for a week.",
    "The error message should say which {thing} was rejected and why, not just that something failed.",
    "Logging the whole {thing} at INFO is too noisy; its id and size are enough.",
    "`{path}` has grown past what one person can review; splitting it by concern would help.",
    "{lib} handles the retries for us if we pass a timeout; we should not wrap it in a second loop.",
    "The numbers are within noise of each other, so I would not read much into the difference.",
)
_EN_OPENERS = (
    "Good question.", "Here's what I found.", "Short answer: yes, with one caveat.", "Let's go through it.",
    "I looked at this more closely.", "Happy to help with that.", "That makes sense.", "Right, so:",
)
_EN_ASKS = (
    "Can you explain what `{func}` in `{path}` actually does? I didn't write it.",
    "The {comp} tests are flaky again. Any idea why?",
    "What would be a cleaner way to structure {comp}?",
    "Could you draft a short README section for {comp}?",
    "Is there a simpler way to handle the {thing} in `{func}`?",
    "How should I test `{func}` without hitting the real {comp}?",
    "Can you review this before I open the PR?",
    "Why does {comp} log `{err}` on startup?",
    "quick one: is it safe to cache the {thing}?",
    "I keep getting `{err}` from {comp}, here's the output.",
    "Could you rewrite `{func}` so it's easier to read?",
    "What's the difference between the two ways we load the {thing}?",
)
_DE_SENTENCES = (
    "Der Pfad über {comp} macht im Moment {n} Aufrufe pro Anfrage; gebündelt wäre es einer.",
    "Ich würde `{func}` frei von Seiteneffekten halten und die Ein- und Ausgabe nach {comp} verschieben.",
    "Wichtig: {thing} wird bei jedem Aufruf gelesen, ein Cache für {n} Sekunden wäre also unbedenklich.",
    "Wenn {comp} `{err}` wirft, versucht es der Aufrufer bis zu {k} Mal erneut.",
    "Der Test in `{path}` verlässt sich auf eine Reihenfolge, die bei parallelem Lauf nicht garantiert ist.",
    "Eine Metrik für {thing} würde zeigen, ob die Änderung wirklich etwas bringt.",
    "Am einfachsten ist es, {thing} ausdrücklich zu übergeben, statt es aus einer globalen Variable zu lesen.",
    "Lokal gemessen braucht `{func}` jetzt {ms2} ms statt {ms} ms.",
    "Die Warnung in der Ausgabe ist harmlos; sie entsteht, weil {comp} zweimal importiert wird.",
    "Die öffentliche Signatur von `{func}` sollte gleich bleiben, damit nichts bricht.",
    "In der Dokumentation von {lib} steht, dass die Option zwar existiert, aber standardmäßig aus ist.",
    "Die eigentliche Ursache ist, dass {comp} und {comp2} beide glauben, für {thing} zuständig zu sein.",
    "Das ändert nichts am Speicherformat, eine Migration ist also nicht nötig.",
    "Wer ganz vorsichtig sein will, schaltet das neue Verhalten eine Woche lang nur per Schalter frei.",
    "Die Fehlermeldung sollte sagen, welches {thing} abgelehnt wurde und warum.",
    "Wir können das in zwei Pull Requests aufteilen: erst der Umbau, dann die Verhaltensänderung.",
    "`{path}` ist inzwischen zu groß für ein einzelnes Review; eine Aufteilung nach Zuständigkeit hilft.",
    "Die Zahlen liegen im Rauschen, daraus würde ich keine Schlüsse ziehen.",
)
_DE_OPENERS = ("Gute Frage.", "Ich habe mir das genauer angesehen.", "Kurz gesagt: ja, mit einer Einschränkung.",
               "Gehen wir das durch.", "Klar, gern.")
_DE_ASKS = (
    "Kannst du mir erklären, was `{func}` in `{path}` eigentlich macht?",
    "Die Tests für {comp} schlagen wieder sporadisch fehl. Woran kann das liegen?",
    "Wie könnte man {comp} sauberer aufbauen?",
    "Schreibst du mir einen kurzen README-Abschnitt zu {comp}?",
    "Wie teste ich `{func}`, ohne das echte {comp} anzusprechen?",
    "Kannst du da drüberschauen, bevor ich den PR aufmache?",
    "Ich bekomme ständig `{err}` von {comp}, hier die Ausgabe.",
)
_LEVELS = ("INFO", "INFO", "INFO", "INFO", "DEBUG", "DEBUG", "WARN", "ERROR")
_LOG_MESSAGES = (
    "request_id={hex} {method} /{route} status={status} dur_ms={ms}",
    "retrying {thing} attempt={k}/8 after {err}",
    "cache miss key={route}:{hex}",
    "gc pause {n}ms heap={mb}MB",
    "pool size={n} in_use={k} waiting=0",
    "task {func} finished in {sec}s rows={rows}",
    "{comp} healthy, lag={ms}ms",
    "flushed {rows} records to {route} in {ms} ms",
    "config reloaded from {path} (checksum {hex})",
    "slow call {func} took {ms2} ms (threshold 500 ms)",
)


def _fill(rng: random.Random, v: Vocab, template: str) -> str:
    comp, comp2 = rng.sample(v.components, 2) if len(v.components) > 1 else (v.components[0],) * 2
    ms = rng.randint(12, 900)
    return template.format(
        comp=comp, comp2=comp2, func=rng.choice(v.functions), thing=rng.choice(v.things),
        path=rng.choice(v.paths), err=rng.choice(v.errors), lib=rng.choice(v.libs),
        n=rng.randint(2, 40), k=rng.randint(2, 8), ms=ms, ms2=max(1, ms // rng.randint(2, 6)),
        hex=f"{rng.getrandbits(48):012x}", method=rng.choice(("GET", "GET", "POST", "PUT", "DELETE")),
        route=rng.choice(v.things).replace(" ", "_"), status=rng.choice((200, 200, 200, 201, 204, 304, 404, 500)),
        mb=rng.randint(180, 3900), sec=f"{rng.uniform(0.2, 95):.2f}", rows=rng.randint(10, 2_000_000),
    )


def _paragraph(rng: random.Random, v: Vocab) -> str:
    sentences = _DE_SENTENCES if v.lang == "de" else _EN_SENTENCES
    return " ".join(_fill(rng, v, s) for s in rng.sample(sentences, rng.randint(2, 5)))


def _bullets(rng: random.Random, v: Vocab) -> str:
    return "\n".join(f"- {_fill(rng, v, rng.choice(_DE_SENTENCES if v.lang == 'de' else _EN_SENTENCES))}"
                     for _ in range(rng.randint(2, 5)))


def _python(rng: random.Random, v: Vocab) -> str:
    func, thing = rng.choice(v.functions), rng.choice(v.things).replace(" ", "_")
    n = rng.randint(2, 500)
    return rng.choice((
        f"def {func}(items: list[dict[str, Any]], *, limit: int = {n}) -> list[dict[str, Any]]:\n"
        f"    \"\"\"Keep the {thing} entries that are set, oldest first.\"\"\"\n"
        f"    kept = [i for i in items if i.get(\"{thing}\") is not None]\n"
        f"    kept.sort(key=lambda i: i[\"created_at\"])\n"
        f"    return kept[:limit]\n",
        f"async def {func}(client: httpx.AsyncClient, {thing}_id: str) -> dict[str, Any]:\n"
        f"    for attempt in range({rng.randint(2, 6)}):\n"
        f"        response = await client.get(f\"/{thing}/{{{thing}_id}}\", timeout={rng.randint(2, 30)})\n"
        f"        if response.status_code != 503:\n"
        f"            response.raise_for_status()\n"
        f"            return response.json()\n"
        f"        await asyncio.sleep(2 ** attempt * 0.1)\n"
        f"    raise RuntimeError(\"{thing} service unavailable\")\n",
        f"@dataclass(frozen=True)\nclass {thing.title().replace('_', '')}:\n    id: str\n"
        f"    size: int = {n}\n    tags: tuple[str, ...] = ()\n\n"
        f"    def {func}(self) -> bool:\n        return self.size > {n // 2} and \"archived\" not in self.tags\n",
        f"def test_{func}_handles_empty_{thing}() -> None:\n    assert {func}([]) == []\n\n\n"
        f"def test_{func}_keeps_order() -> None:\n"
        f"    items = [{{\"{thing}\": i, \"created_at\": {n} - i}} for i in range({rng.randint(3, 9)})]\n"
        f"    kept = [i[\"{thing}\"] for i in {func}(items)]\n"
        f"    assert kept == sorted((i[\"{thing}\"] for i in items), reverse=True)\n",
    ))


def _code_snippet(rng: random.Random, v: Vocab) -> str:
    func, thing = rng.choice(v.functions), rng.choice(v.things).replace(" ", "_")
    n = rng.randint(2, 500)
    if v.code == "kotlin":
        body = rng.choice((
            f"suspend fun {func}(repo: {thing.title().replace('_', '')}Repository, id: String): Result<Unit> =\n"
            f"    runCatching {{\n        val item = repo.load(id) ?: error(\"no {thing} $id\")\n"
            f"        repo.save(item.copy(updatedAt = Clock.System.now()))\n    }}\n",
            f"@Composable\nfun {func.title().replace('_', '')}Screen(state: UiState, onRetry: () -> Unit) {{\n"
            f"    when (state) {{\n        is UiState.Loading -> CircularProgressIndicator()\n"
            f"        is UiState.Error -> ErrorBanner(state.message, onRetry)\n"
            f"        is UiState.Ready -> LazyColumn {{ items(state.{thing}s.take({n})) {{ Row(it) }} }}\n    }}\n}}\n",
        ))
        return f"```kotlin\n{body}```"
    if v.code == "hcl":
        body = rng.choice((
            f"resource \"aws_security_group_rule\" \"{thing}_{n}\" {{\n  type              = \"ingress\"\n"
            f"  from_port         = {rng.choice((443, 5432, 6379, 8080, 9090))}\n"
            f"  to_port           = {rng.choice((443, 5432, 6379, 8080, 9090))}\n  protocol          = \"tcp\"\n"
            f"  cidr_blocks       = [\"10.{rng.randint(0, 255)}.0.0/16\"]\n"
            f"  security_group_id = module.{func}.security_group_id\n}}\n",
            f"module \"{func}\" {{\n  source  = \"../modules/{thing}\"\n  name    = \"{thing}-{n}\"\n"
            f"  min_size = {rng.randint(1, 3)}\n  max_size = {rng.randint(4, 12)}\n"
            f"  tags = {{ team = \"platform\", cost_center = \"cc-{n}\" }}\n}}\n",
        ))
        return f"```hcl\n{body}```"
    if v.code == "latex":
        body = rng.choice((
            f"\\begin{{table}}[t]\n  \\centering\n  \\caption{{Results on the {thing} split.}}\n"
            f"  \\begin{{tabular}}{{lcc}}\n    \\toprule\n    Method & AUROC & ECE \\\\\n    \\midrule\n"
            + "".join(f"    {m} & {rng.uniform(0.7, 0.95):.3f} & {rng.uniform(0.01, 0.12):.3f} \\\\\n"
                      for m in ("FedAvg", "FedProx", "Local only"))
            + "    \\bottomrule\n  \\end{tabular}\n\\end{table}\n",
            f"\\paragraph{{{thing.replace('_', ' ').title()}.}} We evaluate on {n} held-out records per site and "
            f"report the mean over {rng.randint(3, 5)} seeds \\citep{{{func}}}.\n",
        ))
        return f"```latex\n{body}```"
    if v.code == "typescript":
        body = (f"export async function {func}(id: string): Promise<{thing.title().replace('_', '')}> {{\n"
                f"  const res = await fetch(`/api/{thing}/${{id}}`, {{ signal: AbortSignal.timeout({n * 10}) }});\n"
                f"  if (!res.ok) throw new Error(`{thing} ${{id}}: ${{res.status}}`);\n  return res.json();\n}}\n")
        return f"```ts\n{body}```"
    if v.code == "sql" and rng.random() < 0.5:
        body = (f"select {thing}, count(*) as n, max(updated_at) as last_seen\nfrom {rng.choice(v.things)}"
                f"\nwhere updated_at >= current_date - {n}\ngroup by 1\norder by n desc\nlimit {n};\n")
        return f"```sql\n{body}```"
    return f"```python\n{_python(rng, v)}```"


def _reply(rng: random.Random, v: Vocab) -> list[str]:
    openers = _DE_OPENERS if v.lang == "de" else _EN_OPENERS
    blocks = [rng.choice(openers) + " " + _paragraph(rng, v)]
    while len(blocks) < 40:
        roll = rng.random()
        blocks.append(_code_snippet(rng, v) if roll < 0.3 else _bullets(rng, v) if roll < 0.45 else _paragraph(rng, v))
    return blocks


def _log(rng: random.Random, v: Vocab, day: date) -> list[str]:
    when = datetime(day.year, day.month, day.day, rng.randint(0, 22), tzinfo=UTC)
    lines = []
    for _ in range(400):
        when += timedelta(milliseconds=rng.randint(3, 9000))
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
        lines.append(f"{stamp} {rng.choice(_LEVELS):5} [{rng.choice(v.components)}] "
                     f"{_fill(rng, v, rng.choice(_LOG_MESSAGES))}")
    return lines


def _trace(rng: random.Random, v: Vocab) -> list[str]:
    err = rng.choice(v.errors)
    if v.code in ("kotlin", "typescript"):
        frames = [f"    at {rng.choice(v.components).replace('-', '.')}.{rng.choice(v.functions)}"
                  f"({rng.choice(v.paths).rsplit('/', 1)[-1]}:{rng.randint(10, 900)})"
                  for _ in range(rng.randint(8, 30))]
        return [f"{err}: {_fill(rng, v, '{thing} {hex} not found')}", *frames]
    lines = ["Traceback (most recent call last):"]
    for _ in range(rng.randint(6, 24)):
        lines.append(f"  File \"/app/{rng.choice(v.paths)}\", line {rng.randint(10, 1200)}, "
                     f"in {rng.choice(v.functions)}")
        lines.append(f"    {rng.choice(('result = await', 'return', 'rows =', 'self._state ='))} "
                     f"{rng.choice(v.functions)}({rng.choice(v.things).replace(' ', '_')})")
    lines.append(f"{err}: {_fill(rng, v, 'unexpected {thing} (request_id={hex})')}")
    return lines


def _config(rng: random.Random, v: Vocab) -> list[str]:
    lines = []
    for comp in rng.sample(v.components, len(v.components)) * 4:
        lines.append(f"{comp}:")
        for _ in range(rng.randint(3, 8)):
            key = rng.choice(v.things).replace(" ", "_")
            value = rng.choice((str(rng.randint(1, 5000)), "true", "false", f"\"{rng.choice(v.paths)}\"",
                                f"{rng.randint(1, 120)}s", f"\"${{{key.upper()}}}\""))
            lines.append(f"  {key}_{rng.choice(('timeout', 'size', 'enabled', 'path', 'limit', 'url'))}: {value}")
    return lines


def _table(rng: random.Random, v: Vocab) -> list[str]:
    lines = ["| run | step | loss | metric | wall s |", "|---|---|---|---|---|"]
    loss = rng.uniform(1.5, 3.0)
    for step in range(0, 200_000, rng.randint(50, 400)):
        loss *= rng.uniform(0.985, 1.004)
        lines.append(f"| {rng.choice(v.functions)} | {step} | {loss:.4f} | {rng.uniform(0.4, 0.9):.4f} | "
                     f"{step * rng.uniform(0.2, 0.4):.0f} |")
    return lines


def _plan(rng: random.Random, v: Vocab) -> list[str]:
    blocks = []
    for _ in range(60):
        kind, name = rng.choice(v.things), rng.choice(v.functions)
        attributes = {
            "arn": "(known after apply)", "id": "(known after apply)",
            "name": f"\"{name}-{kind.replace('_', '-')}-{rng.randint(1, 99)}\"",
            "cidr_block": f"\"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.0/24\"",
            "tags": f"{{ \"cost_center\" = \"cc-{rng.randint(100, 999)}\", \"env\" = \"staging\" }}",
            "kms_key_id": "(known after apply)", "port": str(rng.choice((443, 5432, 6379, 8080))),
        }
        lines = [f"  # module.{name}.aws_{kind}.this[{rng.randint(0, 5)}] will be created",
                 f"  + resource \"aws_{kind}\" \"this\" {{"]
        lines += [f"      + {key:<12} = {value}" for key, value in rng.sample(sorted(attributes.items()), 5)]
        blocks.append("\n".join([*lines, "    }"]))
    return blocks


#: A filler kind -> (blocks of material, the separator they are joined with).
_PADS: dict[str, tuple[Callable[[random.Random, Vocab, date], list[str]], str]] = {
    "reply": (lambda rng, v, day: _reply(rng, v), "\n\n"),
    "log": (_log, "\n"),
    "trace": (lambda rng, v, day: _trace(rng, v), "\n"),
    "code": (lambda rng, v, day: [_code_snippet(rng, v) for _ in range(40)], "\n\n"),
    "config": (lambda rng, v, day: _config(rng, v), "\n"),
    "table": (lambda rng, v, day: _table(rng, v), "\n"),
    "plan": (lambda rng, v, day: _plan(rng, v), "\n\n"),
}


def _material(rng: random.Random, v: Vocab, kind: str, day: date, chars: int) -> list[str]:
    """Blocks of generated ``kind`` material, about ``chars`` characters joined."""
    make, sep = _PADS[kind]
    blocks: list[str] = []
    total = 0
    while total < chars:
        for block in make(rng, v, day):
            blocks.append(block)
            total += len(block) + len(sep)
            if total >= chars:
                break
    return blocks


def _padded(rng: random.Random, v: Vocab, text: str, kind: str, day: date, size: int, at: str) -> str:
    sep = _PADS[kind][1]
    blocks = _material(rng, v, kind, day, max(size - len(text), 0))
    where = {"start": 0, "middle": len(blocks) // 2, "end": len(blocks)}[at]
    if kind not in ("reply", "code") and at != "middle":
        # Pasted material is introduced and commented on in paragraphs of its own.
        return text + "\n\n" + sep.join(blocks) if at == "start" else sep.join(blocks) + "\n\n" + text
    blocks.insert(where, text)
    return sep.join(blocks)


def _reply_size(rng: random.Random) -> int:
    return min(max(int(rng.lognormvariate(math.log(REPLY_MEDIAN_CHARS), 0.45)), 450), 4800)


def _generated_pair(rng: random.Random, v: Vocab, day: date) -> tuple[str, str]:
    asks = _DE_ASKS if v.lang == "de" else _EN_ASKS
    question = _fill(rng, v, rng.choice(asks))
    if rng.random() < 0.3:
        kind = rng.choice(("log", "trace", "code", "config"))
        question = _padded(rng, v, question, kind, day, rng.randint(600, 4000), "start")
    return question, _padded(rng, v, "", "reply", day, _reply_size(rng), "start").lstrip()


# ----------------------------------------------------------------- the projects, written by hand

_LEDGERLY = Project(
    id="ledgerly-backend",
    title="Ledgerly: the v2 rewrite of an invoicing SaaS backend (FastAPI, Postgres)",
    start=date(2026, 1, 12),
    vocab=Vocab(
        lang="en", code="python",
        components=("api-gateway", "billing-svc", "tenant-service", "webhook-dispatcher", "pdf-worker", "auth"),
        functions=("list_invoices", "render_invoice", "apply_tax", "resolve_tenant", "dispatch_webhook",
                   "paginate", "issue_credit_note", "sync_customers"),
        things=("invoice", "line item", "tenant", "credit note", "webhook", "customer", "tax rate", "session"),
        paths=("ledgerly/api/invoices.py", "ledgerly/billing/tax.py", "ledgerly/db/queries.py",
               "ledgerly/webhooks/dispatch.py", "tests/test_invoices.py", "ledgerly/pdf/render.py"),
        errors=("asyncpg.exceptions.DeadlockDetectedError", "pydantic.ValidationError", "httpx.ReadTimeout",
                "KeyError", "sqlalchemy.exc.OperationalError"),
        libs=("FastAPI", "SQLAlchemy", "asyncpg", "httpx", "pydantic", "Alembic"),
    ),
    sessions=(
        (0, (
            U("Morning! We're starting the v2 rewrite of the Ledgerly backend today. One ground rule up front: "
              "every Python snippet you hand me has to be fully annotated with types. I won't merge anything "
              "that isn't.", "types"),
            A("Understood: annotations on every function, argument and return value, and I'll keep them "
              "compatible with mypy --strict."),
            U("Context so you have it: FastAPI on Python 3.12, Postgres 16, deployed on Fly.io. The service "
              "that generates and numbers invoices is called billing-svc for now.", "svc_old"),
            A("Thanks, that's a sensible stack. With Postgres 16 we get MERGE and better logical replication, "
              "which will matter for the tenant moves later."),
            Chat(2),
        )),
        (3, (
            U("Here's yesterday's slow-request log from the gateway. The home screen's summary call, "
              "/v1/dashboard/summary, sits at roughly 900 ms p95 and customers have started to notice.",
              "latency_old", pad="log", size=8200, at="start"),
            A("The log points at the summary handler issuing one query per open invoice, a classic N+1. "
              "I'd start with an index and a single aggregate query.", size=3600),
            U("Another rule while we're at it: never touch the production database on a Friday. No migrations, "
              "no backfills, no 'quick fixes'. On-call is thin at the end of the week.", "friday"),
            A("Noted, and I'll flag it if a plan I suggest would land on a Friday."),
            U("Also, Tom Becker from the frontend team signs off on every change to the public API schema. "
              "Loop him in when we touch response models.", "reviewer_old"),
            A("Will do. I'll keep schema changes in separate PRs so his review stays small."),
        )),
        (8, (
            U("How should we paginate GET /v1/invoices? Our biggest tenants have around two million invoices."),
            A("I compared the options against our data. Offset pagination forces Postgres to scan and discard "
              "every skipped row, so page 40,000 of a two-million-invoice tenant costs as much as reading "
              "them all; cursor pagination on (issued_at, id) keeps each page an index range scan, and it "
              "stays stable when invoices are inserted while a client is paging. That is why I recommend "
              "keyset cursors and not page numbers, even though the frontend loses 'jump to page N'.",
              "pagination", size=7400, at="middle"),
            U("ok, go with cursors. And the v2 launch date is fixed now: Tuesday, March 3.", "deadline_old"),
            A("Great, that gives us about seven weeks. I'll sketch a plan that leaves the last week for the "
              "migration rehearsal."),
            Chat(1),
        )),
        (14, (
            U("FYI, the public API rate limit is 100 requests per minute per API key at the moment.", "rate_old"),
            A("Then the bulk export endpoint needs to stream, otherwise a large tenant hits the limit "
              "before the export finishes."),
            U("The PDF worker keeps crashing. Trace below. It only happens for tenants on the EU shard, never US.",
              "pdf_crash", pad="trace", size=16500, at="start"),
            A("The EU shard is the only one where invoices carry the reverse-charge VAT note, and the renderer "
              "chokes on the long footnote. That narrows it down a lot.", size=2600),
            Chat(2),
        )),
        (21, (
            U("Heads-up from the platform team: billing-svc is being renamed to invoicer as part of the service "
              "catalogue clean-up. Repo, Docker image (ghcr.io/ledgerly/invoicer) and Fly app all change.",
              "svc_new"),
            A("I'll update the imports, the compose file and the Fly config. The old name will linger in "
              "dashboards for a while, so I'll add an alias in the service map."),
            Chat(2),
        )),
        (29, (
            U("I shipped the composite index on invoices(tenant_id, issued_at) last night. The home-screen "
              "summary endpoint is down to 250 ms p95 now.", "latency_new"),
            A("That's the improvement the query plan promised. The remaining time is mostly serialisation."),
            U("What do we do about the PDF renderer for good?"),
            A("After profiling both, I suggest we replace WeasyPrint with Gotenberg for the PDF step in "
              "billing-svc (now invoicer). WeasyPrint's memory grew without bound on 300-page invoices and the "
              "worker was OOM-killed; Gotenberg runs Chromium in its own container, so a bad document can "
              "no longer take the worker down with it.", "pdf_decision", size=9800, at="middle"),
            U("Agreed, let's switch to Gotenberg."),
            Chat(1),
        )),
        (36, (
            U("Two changes. Tom moved to the payments squad, so Aisha Rahman takes over sign-off on the public "
              "API schema.", "reviewer_new"),
            A("Noted. I'll tag Aisha on the pagination response models then."),
            U("And launch slips by two weeks: the new date is March 17, because the tax-rounding audit isn't "
              "finished.", "deadline_new"),
            A("The two weeks also give us room to rehearse the migration twice instead of once."),
            Chat(2),
        )),
        (44, (
            U("After Acme complained about throttling we raised the per-key allowance to 300 calls a minute.",
              "rate_new"),
            A("Then the token bucket refill should be recalculated; at 300/min a burst of 50 is reasonable."),
            U("# min_machines_running = 2: keep two machines warm, cold starts broke the Stripe webhook "
              "deadline in January", "machines", pad="config", size=14000, at="middle",
              lead="Here's the fly.toml and env file we're going to deploy with, can you sanity-check it?"),
            A("The config is mostly fine; two machines warm is right given the webhook timeout. I'd lower the "
              "health-check grace period and drop the duplicated DATABASE_URL.", size=2900),
        )),
        (52, (
            U("We decided this morning: v2 drops Python 3.11 support, 3.12 only. Less matrix to maintain.",
              "py_decision"),
            A("Then we can use the new generic syntax and drop the typing_extensions shim."),
            U("And from now on when you propose SQL, show me the EXPLAIN (ANALYZE, BUFFERS) output alongside it.",
              "explain"),
            A("Will do, with the plan from a copy of the largest tenant so the row counts are realistic."),
            Chat(2),
        )),
        (63, (
            U("Last bits before launch: Sentry is set to sample 20% of errors and 5% of traces in production.",
              "sentry"),
            A("That should keep us inside the plan's quota at launch traffic."),
            Chat(1),
        )),
    ),
    asks=(
        Ask("single-hop", "Where is the Ledgerly backend hosted?", "Fly.io", ("svc_old",)),
        Ask("single-hop", "What share of production errors ends up in our error tracker?", "20%", ("sentry",)),
        Ask("single-hop", "Which customer's complaint made us loosen API throttling?", "Acme", ("rate_new",)),
        Ask("single-hop", "What columns does the new index on the invoices table cover?", "tenant_id, issued_at",
            ("latency_new",)),
        Ask("update", "How quickly does the home page's summary request come back these days?", "250 ms p95",
            ("latency_new",), "latency"),
        Ask("previous-value", "Before the index fix, how slow was the home page's summary request?", "about 900 ms",
            ("latency_old",), "latency"),
        Ask("update", "Under what name does the invoice service run today?", "invoicer", ("svc_new",), "service"),
        Ask("previous-value", "What did we call the invoice service at the start?", "billing-svc",
            ("svc_old",), "service"),
        Ask("update", "On which date does v2 go live?", "March 17", ("deadline_new",), "deadline"),
        Ask("previous-value", "Which launch day did we plan for v2 at first?", "March 3", ("deadline_old",),
            "deadline"),
        Ask("update", "Whose go-ahead do changes to our external interface need now?", "Aisha Rahman",
            ("reviewer_new",), "reviewer"),
        Ask("previous-value", "Whose go-ahead did changes to our external interface need at first?", "Tom Becker",
            ("reviewer_old",), "reviewer"),
        Ask("update", "What is the current throttling threshold for one client credential?", "300",
            ("rate_new",), "rate"),
        Ask("previous-value", "What was the throttling threshold for one client credential originally?",
            "100 per minute", ("rate_old",), "rate"),
        Ask("instruction", "Is there a day of the week when I shouldn't run a backfill on prod?", "Friday",
            ("friday",)),
        Ask("instruction", "What does every bit of Python code I hand over need to have?", "full type annotations",
            ("types",)),
        Ask("instruction", "What should come along with any query I suggest for Postgres?",
            "EXPLAIN (ANALYZE, BUFFERS) output", ("explain",)),
        Ask("long-message", "Which tenants were hit by the PDF worker crash?", "only the EU shard",
            ("pdf_crash",)),
        Ask("long-message", "Why are page numbers a bad idea for listing a big customer's invoices?",
            "offset scans and discards skipped rows; keyset cursors stay index range scans and stable",
            ("pagination",)),
        Ask("long-message", "What went wrong with the old PDF library on very long documents?",
            "WeasyPrint's memory grew without bound on 300-page invoices; OOM-killed", ("pdf_decision",)),
        Ask("long-message", "Why do we keep a couple of machines warm on Fly?",
            "cold starts broke the Stripe webhook deadline", ("machines",)),
        Ask("temporal", "When did we agree to stop supporting the older Python release?", "{date}",
            ("py_decision",)),
        Ask("temporal", "When did the platform team announce the service's new name?", "{date}",
            ("svc_new",)),
        Ask("temporal", "When did the index that sped up the summary request ship?", "the night before {date}",
            ("latency_new",)),
        Ask("single-hop", "What share of traces do we keep in production?", "5%", ("sentry",)),
        Ask("long-message", "What does the frontend give up with the cursor approach?", "jumping to page N",
            ("pagination",)),
        Ask("temporal", "When did the schema sign-off change hands?", "{date}", ("reviewer_new",)),
        Ask("instruction", "Can I schedule the index migration for the last working day of the week?",
            "no: never touch the production database on Fridays", ("friday",)),
        Ask("multi-hop", "Under which container image name does the service that now uses Gotenberg ship?",
            "ghcr.io/ledgerly/invoicer", ("pdf_decision", "svc_new")),
        Ask("multi-hop", "Which database major version runs behind the endpoint that got the composite index?",
            "Postgres 16", ("svc_old", "latency_new")),
    ),
)

_RIVER = Project(
    id="river-pipeline",
    title="River: the nightly sales pipeline of a grocery chain (Airflow, dbt, a cloud warehouse)",
    start=date(2026, 3, 2),
    vocab=Vocab(
        lang="en", code="sql",
        components=("airflow-scheduler", "pos-extract", "dbt-runner", "loader", "quality-checks", "exporter"),
        functions=("extract_pos_batches", "load_raw_orders", "run_dbt_models", "check_freshness",
                   "publish_snapshot", "dedupe_lines", "backfill_partition"),
        things=("order_id", "store_id", "line_no", "sku", "basket_total", "promo_code", "business_date"),
        paths=("dags/river_nightly.py", "models/marts/fct_sales.sql", "models/staging/stg_orders.sql",
               "river/extract/pos.py", "river/load/warehouse.py", "tests/test_dedupe.py"),
        errors=("airflow.exceptions.AirflowTaskTimeout", "google.api_core.exceptions.BadRequest",
                "psycopg2.errors.SerializationFailure", "dbt.exceptions.CompilationError", "MemoryError"),
        libs=("Airflow", "dbt", "polars", "pyarrow", "great_expectations", "sqlfluff"),
    ),
    sessions=(
        (0, (
            U("hi, new project. I'm taking over River, the pipeline that moves till data from our 212 grocery "
              "stores into the warehouse every night. warehouse is Redshift today, dbt on top.", "warehouse_old"),
            A("Happy to help. A nightly batch from 212 stores is a classic setup; the first things I'd look at "
              "are how late the till exports arrive and how duplicates are handled."),
            U("one preference: write all SQL in lowercase, keywords included. the uppercase style drives me nuts.",
              "lowercase"),
            A("lowercase it is, keywords and functions alike."),
            Chat(1),
        )),
        (4, (
            U("the DAG kicks off every night at 02:00 UTC and the dashboards have to be fresh by 07:00 "
              "Amsterdam time.", "schedule_old"),
            A("That leaves about three hours of slack once you account for the time zone; fine as long as "
              "the extract doesn't wait on stragglers."),
            U("Priya Nair is on call for River this month if anything breaks overnight.", "oncall_old"),
            A("Good to know; I'll route the alert examples to her rotation."),
            Chat(2),
        )),
        (9, (
            U("Why are we seeing duplicate order lines in stg_orders? Should I just select distinct?"),
            A("Select distinct would hide it. The duplicates come from the tills themselves: when a store "
              "loses connectivity, the POS re-sends every line of the open basket once it's back online, "
              "with a fresh export timestamp. So the right key for deduplication is (order_id, line_no), "
              "keeping the earliest export, and not the whole row, because the timestamps differ.",
              "dedupe", size=8600, at="middle"),
            U("makes sense. raw partitions are kept for 14 days btw, so a re-send older than that is lost anyway.",
              "retention_old"),
            A("Then the dedupe window can be 14 days too; anything older can't be compared."),
        )),
        (15, (
            U("please don't suggest pandas for anything bigger than a gigabyte. use polars, or push the work "
              "into the warehouse.", "pandas"),
            A("Fair. For the backfill script I'll use polars' lazy scan so the 9 GB export never sits in memory."),
            U("Store 117 is our Antwerp flagship, the biggest store we have by basket count.", "store117"),
            A("Then it will dominate any per-store skew in the join; worth keeping an eye on."),
            Chat(2),
        )),
        (22, (
            U("[2026-03-23, 05:12:44 UTC] {dbt_runner.py:212} ERROR - dbt test "
              "unique_fct_sales_order_line failed: 1,284 duplicate rows, all from store_id=117",
              "dup_log", pad="log", size=132000, at="middle",
              lead="last night's run failed. full airflow log attached, sorry it's huge."),
            A("The failure is the uniqueness test on fct_sales, and the rows come from a single store. The "
              "dedupe in staging ran, so this looks like lines re-sent after the 14-day window.", size=2400),
            Chat(1),
        )),
        (30, (
            U("should fct_sales stay a full refresh?"),
            A("I would change it. A full refresh of fct_sales now takes about three hours and costs roughly "
              "$40 a night in warehouse compute, most of it re-reading months that never change. An "
              "incremental model with the merge strategy on (order_id, line_no) only touches the last few "
              "days, and the merge is what keeps late re-sends from creating duplicates. Full refresh stays "
              "available for the monthly rebuild.", "incremental", size=11200, at="middle"),
            U("ok, let's go incremental with merge.", "incremental_ok"),
            A("I'll prepare the model config and a backfill plan."),
        )),
        (37, (
            U("the till export now lands later, so the DAG start moved to 04:00 UTC.", "schedule_new"),
            A("Noted. The incremental model will have to carry most of that."),
            U("on-call change: Jonas Weber took over River from Priya as of this week.", "oncall_new"),
            A("Updated. I'll point the runbook at Jonas."),
            Chat(2),
        )),
        (45, (
            U("The Redshift to BigQuery migration is done, every model reads and writes BigQuery now. "
              "Redshift gets switched off at the end of the month.", "warehouse_new"),
            A("Congratulations. Remember that BigQuery's merge has a different cost model: partition "
              "pruning on business_date matters more than before."),
            U("-- finops ticket FIN-2231: raw partitions now expire after 45 days instead of two weeks",
              "retention_new", pad="log", size=23000, at="middle",
              lead="bq output from setting the table options, fyi:"),
            A("With 45 days of raw data the dedupe window can grow too; I'd make it a variable.", size=2000),
        )),
        (53, (
            U("Can you draft the data contract for the finance export?"),
            A("Here's a draft. It fixes the column types, the freshness guarantee and who to contact.",
              pad="code", size=18500, at="start"),
            Chat(2),
        )),
        (60, (
            U("we agreed with finance today that refunds are booked on the day of the refund, not the day of "
              "the original sale.", "refunds"),
            A("Then fct_refunds needs its own business_date, taken from the refund event, and the monthly "
              "revenue view must subtract by that date."),
            Chat(1),
        )),
        (74, (
            U("pipeline has been green for three weeks. median runtime is 48 minutes now.", "runtime"),
            A("That's a good margin against the 07:00 deadline."),
            Chat(1),
        )),
    ),
    asks=(
        Ask("single-hop", "How many shops feed data into River?", "212", ("warehouse_old",)),
        Ask("single-hop", "By what time do the dashboards have to be up to date?", "07:00 Amsterdam time",
            ("schedule_old",)),
        Ask("single-hop", "How long does a nightly run take these days, typically?", "48 minutes", ("runtime",)),
        Ask("single-hop", "On which date is a refund counted, according to finance?", "the day of the refund",
            ("refunds",)),
        Ask("update", "Which warehouse do our models run against?", "BigQuery", ("warehouse_new",), "warehouse"),
        Ask("previous-value", "What warehouse did River use when I inherited it?", "Redshift",
            ("warehouse_old",), "warehouse"),
        Ask("update", "When does the overnight job kick off now?", "04:00 UTC", ("schedule_new",), "schedule"),
        Ask("previous-value", "What was the nightly job's start time originally?", "02:00 UTC", ("schedule_old",),
            "schedule"),
        Ask("update", "Who do I page when the overnight load breaks?", "Jonas Weber", ("oncall_new",), "oncall"),
        Ask("previous-value", "Who was on the pager for River before the rotation changed?", "Priya Nair",
            ("oncall_old",), "oncall"),
        Ask("update", "How long do we hold on to unprocessed order data now?", "45 days", ("retention_new",),
            "retention"),
        Ask("previous-value", "How long did we hold on to unprocessed order data at first?", "14 days",
            ("retention_old",), "retention"),
        Ask("instruction", "How should SQL be formatted for this user?", "all lowercase, keywords included",
            ("lowercase",)),
        Ask("instruction", "What library should I reach for when a file is several gigabytes?",
            "polars, or do it in the warehouse (no pandas over 1 GB)", ("pandas",)),
        Ask("long-message", "Which test failed in the run that broke overnight?",
            "unique_fct_sales_order_line", ("dup_log",)),
        Ask("long-message", "Why can't we deduplicate on entire rows?",
            "re-sent lines get a fresh export timestamp; use (order_id, line_no)", ("dedupe",)),
        Ask("long-message", "What did rebuilding the sales fact table from scratch cost each night?",
            "about three hours and roughly $40", ("incremental",)),
        Ask("long-message", "Which finops ticket changed how long raw data lives?", "FIN-2231",
            ("retention_new",)),
        Ask("temporal", "When did we settle on merging incrementally instead of rebuilding?", "{date}",
            ("incremental_ok",)),
        Ask("temporal", "When did we switch off reading from the old warehouse?", "{date}", ("warehouse_new",)),
        Ask("temporal", "When did finance and we agree on how refunds are dated?", "{date}", ("refunds",)),
        Ask("single-hop", "Which of our shops sees the most baskets?", "store 117, the Antwerp flagship",
            ("store117",)),
        Ask("long-message", "How many repeated rows did the failing check find?", "1,284", ("dup_log",)),
        Ask("instruction", "Is SELECT in capitals fine in the queries I send?", "no: all lowercase",
            ("lowercase",)),
        Ask("temporal", "When did someone else take over the overnight pager?", "{date}", ("oncall_new",)),
        Ask("multi-hop", "In which city is the store that sent the duplicate sales lines?", "Antwerp",
            ("dup_log", "store117")),
        Ask("multi-hop", "With the later start, how much time is left before the freshness deadline?",
            "one hour (04:00 UTC is 06:00 in Amsterdam, deadline 07:00)", ("schedule_new", "schedule_old")),
    ),
)

_TRAILMATE = Project(
    id="trailmate-mobile",
    title="Trailmate: a hiking app for Android and iOS, from 2.x to the 3.0 release",
    start=date(2026, 2, 9),
    vocab=Vocab(
        lang="en", code="kotlin",
        components=("app-android", "app-ios", "map-renderer", "sync-service", "gps-tracker", "paywall"),
        functions=("loadOfflineRegion", "recordTrack", "syncPendingHikes", "renderElevation",
                   "requestLocation", "restorePurchases", "cacheTiles"),
        things=("trail", "waypoint", "region", "track", "tile", "subscription", "hike"),
        paths=("app/src/main/java/app/trailmate/map/MapScreen.kt", "app/src/main/java/app/trailmate/gps/Tracker.kt",
               "ios/Trailmate/Sync/SyncEngine.swift", "app/build.gradle.kts", "shared/src/commonMain/Trail.kt"),
        errors=("java.lang.IllegalStateException", "kotlinx.coroutines.TimeoutCancellationException",
                "java.lang.SecurityException", "android.database.sqlite.SQLiteDatabaseLockedException",
                "java.lang.OutOfMemoryError"),
        libs=("Jetpack Compose", "MapLibre", "Room", "Ktor", "SwiftUI", "Firebase Crashlytics"),
    ),
    sessions=(
        (0, (
            U("Hiya. I'm the only dev on Trailmate, a hiking app, Android in Kotlin and iOS in Swift. We've got "
              "about 80k monthly active users and the backend is Supabase. Aiming for a 3.0 release this spring.",
              "intro"),
            A("Sounds like a fun project. With two native code bases and one developer, sharing the trail model "
              "and the sync logic will pay off quickly."),
            U("Please use British spelling in anything a user will read. Colour, metres, favourite. Our users "
              "are mostly in the UK and they do notice.", "british"),
            A("Of course: British spelling in strings, store listings and release notes; code identifiers stay "
              "as they are."),
            U("Right now we still support iOS 15 as the minimum.", "ios_old"),
            A("iOS 15 still lets us use SwiftUI's refreshable lists and async/await, so nothing blocks us there."),
            Chat(1),
        )),
        (5, (
            U("Our crash-free sessions figure in Crashlytics is 97.1%, which is embarrassing.", "crash_old"),
            A("Anything under 99% usually means one or two dominant crashes. Can you paste the top issue?"),
            U("Sorry for the wall of text. It only crashes on Samsung phones running Android 14 when the user "
              "grants approximate location instead of precise.", "samsung", pad="trace", size=12800, at="end",
              lead="Top crash from Crashlytics:"),
            A("That matches a known bug in older play-services-location versions with coarse location. Let's "
              "check which version we pin.", size=2100),
            Chat(2),
        )),
        (12, (
            U("Which map SDK should we build the offline maps on?"),
            A("I compared Mapbox and MapLibre for offline regions. Functionally they're close, but Mapbox v10 "
              "bills by monthly active users: at our user numbers that comes to roughly $4,000 a month, which is "
              "more than the app earns. MapLibre is open source, renders the same vector tiles and has no "
              "per-user fee, so I recommend MapLibre and self-hosted tiles.", "maplibre", size=10400,
              at="middle"),
            U("MapLibre then. Offline packs stop at zoom 14 for now to keep downloads small.", "zoom_old"),
            A("Zoom 14 shows paths but not all the small footbridges; good enough for a first version."),
        )),
        (19, (
            U("Lena Fischer is doing our design, she'll send the Figma file for the offline flow this week.",
              "designer_old"),
            A("Great. If she uses auto layout, the Compose layouts will map over almost one to one."),
            U("One more habit I'd like: whenever you change behaviour, give me both the Kotlin and the Swift "
              "version. Don't leave iOS as an exercise.", "both"),
            A("Will do, both platforms every time."),
            Chat(2),
        )),
        (26, (
            U("Bumping play-services-location to 21.3.0 fixed the approximate-location crash, it's gone from "
              "Crashlytics.", "crash_fix"),
            A("Good. That crash was most of the unhealthy sessions, so the figure should move a lot."),
            Chat(2),
        )),
        (33, (
            U("Beta feedback is in: the thing testers asked for most is a dark mode for night hikes.",
              "beta_feedback"),
            A("Dark mode is mostly theming work on Android thanks to Material 3; the map style needs its own "
              "night variant."),
            U("Here's the Gradle file, can you see why the release build is so slow?",
              pad="code", size=21000, at="start"),
            A("Mostly R8 full mode and the unused ABI splits. Turning on the configuration cache helps too.",
              size=3100),
        )),
        (40, (
            U("Lena has left for an agency; Marco Rossi is our designer from now on and he starts with the "
              "night theme.", "designer_new"),
            A("I'll share the Compose theme tokens with Marco so he designs within them."),
            U("We compress tiles as WebP now, so offline packs go up to zoom 16 without growing much.",
              "zoom_new"),
            A("Zoom 16 will show the footbridges and stiles too, which people asked about."),
            Chat(1),
        )),
        (47, (
            U("Crashlytics says 99.3% crash-free sessions this week!", "crash_new"),
            A("That's a healthy number; the Play Store stops flagging apps well above that threshold."),
            U("Decision made: 3.0 drops iOS 15. iOS 16 is the new minimum, it lets us use the Swift Charts "
              "elevation profile.", "ios_new"),
            A("Then the elevation profile can be native Swift Charts instead of the custom Canvas drawing."),
            Chat(2),
        )),
        (55, (
            U("We submitted 3.0 to App Store review this afternoon. Fingers crossed.", "submitted"),
            A("Good luck. Apple tends to ask about background location; have the justification text ready."),
            U("Apple's reply, fyi. They rejected it because the background-location purpose string doesn't say "
              "why we track in the background.", "rejection", pad="log", size=6400, at="middle",
              lead="Resolution Center message and the build log from the review:"),
            A("Then the purpose string must mention recording the hike's track while the screen is off; I'll "
              "draft it in British English.", size=1800),
        )),
        (62, (
            U("3.0 is live on both stores. Paywall stays: Trailmate Plus costs £3.49 a month or £24.99 a year.",
              "price"),
            A("Congratulations! The annual price is a good discount; worth highlighting it on the paywall."),
            Chat(1),
        )),
    ),
    asks=(
        Ask("single-hop", "How many people use the app each month?", "about 80k", ("intro",)),
        Ask("single-hop", "What does the yearly premium plan cost?", "£24.99", ("price",)),
        Ask("single-hop", "What did hikers testing the beta want most?", "a dark mode for night hikes",
            ("beta_feedback",)),
        Ask("single-hop", "Which library version got rid of the location crash?", "play-services-location 21.3.0",
            ("crash_fix",)),
        Ask("update", "What is the lowest iPhone OS version the app runs on?", "iOS 16", ("ios_new",), "ios"),
        Ask("previous-value", "Which iPhone OS version was the floor before 3.0?", "iOS 15", ("ios_old",), "ios"),
        Ask("update", "What share of sessions is free of crashes now?", "99.3%", ("crash_new",), "crash"),
        Ask("previous-value", "How stable was the app before the crash fixes, in Crashlytics terms?", "97.1%",
            ("crash_old",), "crash"),
        Ask("update", "Who is designing the app at the moment?", "Marco Rossi", ("designer_new",), "designer"),
        Ask("previous-value", "Who did the Figma work for the offline flow originally?", "Lena Fischer",
            ("designer_old",), "designer"),
        Ask("update", "How far can you zoom into a downloaded map?", "zoom 16", ("zoom_new",), "zoom"),
        Ask("previous-value", "Up to what zoom did downloaded maps go in the first version?", "zoom 14",
            ("zoom_old",), "zoom"),
        Ask("instruction", "Should it say 'color' or 'colour' in the app?", "colour: British spelling",
            ("british",)),
        Ask("instruction", "When I suggest a change in behaviour, what does the developer expect from me?",
            "both the Kotlin and the Swift version", ("both",)),
        Ask("long-message", "Which phones and OS version had the crash?",
            "Samsung on Android 14 with approximate location", ("samsung",)),
        Ask("long-message", "What would the other map vendor have cost us per month?", "roughly $4,000",
            ("maplibre",)),
        Ask("long-message", "Why did Apple turn down the first submission?",
            "the background-location purpose string didn't say why", ("rejection",)),
        Ask("temporal", "When did we send the big release to Apple for review?", "{date}", ("submitted",)),
        Ask("temporal", "When was it decided to raise the minimum iPhone OS?", "{date}", ("ios_new",)),
        Ask("temporal", "When did the beta feedback come in?", "{date}", ("beta_feedback",)),
        Ask("single-hop", "What does the app use as its backend?", "Supabase", ("intro",)),
        Ask("single-hop", "How much is the premium tier per month?", "£3.49", ("price",)),
        Ask("long-message", "How does the commercial map vendor charge?", "by monthly active users",
            ("maplibre",)),
        Ask("temporal", "When did the big release reach both app stores?", "{date}", ("price",)),
        Ask("multi-hop", "Who is designing the feature that beta testers asked for most?", "Marco Rossi",
            ("beta_feedback", "designer_new")),
        Ask("multi-hop", "On which phone brand did the crash occur that the library bump fixed?", "Samsung",
            ("samsung", "crash_fix")),
    ),
)

_TICKETS = Project(
    id="ticket-router-ml",
    title="Fine-tuning a support-ticket router (23 queues, multilingual transformer)",
    start=date(2026, 4, 6),
    vocab=Vocab(
        lang="en", code="python",
        components=("trainer", "data-loader", "tokenizer", "eval-harness", "label-studio-sync", "serving"),
        functions=("build_dataset", "train_epoch", "evaluate_macro_f1", "collate_batch", "split_by_week",
                   "export_onnx", "calibrate_thresholds"),
        things=("ticket", "label", "queue", "checkpoint", "batch", "logit", "annotator"),
        paths=("router/train.py", "router/data.py", "router/eval.py", "configs/base.yaml", "tests/test_split.py",
               "router/serve/app.py"),
        errors=("torch.cuda.OutOfMemoryError", "ValueError", "RuntimeError", "datasets.builder.DatasetGenerationError",
                "KeyError"),
        libs=("PyTorch", "transformers", "datasets", "MLflow", "scikit-learn", "accelerate"),
    ),
    sessions=(
        (0, (
            U("Hello. Goal of this project: route incoming support tickets to one of 23 queues automatically. We "
              "have 184,000 labelled tickets in English, Spanish and German.", "dataset"),
            A("A good size for fine-tuning. The first thing to settle is the split: by time, so that the "
              "evaluation looks like next month's tickets rather than a random sample."),
            U("Agreed. Starting point is bert-base-multilingual-cased, it's what the prototype used.",
              "model_old"),
            A("A reasonable baseline. We should expect a newer multilingual encoder to beat it, but it's "
              "good to have the number."),
            U("House rule: every result you report comes with the random seed it was run with. No seed, no "
              "result.", "seeds"),
            A("Understood; seeds in every table and every sentence that quotes a number."),
        )),
        (3, (
            U("Also: experiment tracking goes to our MLflow server only. Weights & Biases isn't approved by legal, "
              "so please don't put wandb calls in anything.", "mlflow"),
            A("MLflow it is. I'll use mlflow.log_params and log the config file as an artifact."),
            U("First run used a learning rate of 3e-5 with linear decay.", "lr_old"),
            A("3e-5 is the usual default for base-sized encoders."),
            Chat(2),
        )),
        (8, (
            U("Baseline macro-F1 on the October test set is 0.81 (seed 13).", "f1_old"),
            A("Decent for 23 classes. The per-class report will tell us whether it's a few queues dragging "
              "the average down."),
            U("GPU budget for the whole project: 400 GPU-hours on the shared cluster.", "budget_old"),
            A("That's enough for a proper sweep if we keep the large models for the final runs."),
            Chat(1),
        )),
        (15, (
            U("Why is billing vs refund so noisy?"),
            A("I looked at the double-annotated sample. The two annotators disagree on billing versus refund "
              "for about 12% of tickets, because a refund request usually starts as a billing question. Since "
              "the labels themselves are uncertain there, I'd train with label smoothing of 0.1 rather than "
              "chase those tickets with more epochs; it stops the model from becoming overconfident on a "
              "boundary the humans don't agree on.", "smoothing", size=9300, at="middle"),
            U("ok add label smoothing 0.1 to the config.", "smoothing_ok"),
            A("Done in configs/base.yaml; the seed stays at 13 for comparability."),
        )),
        (22, (
            U("Switching the backbone: we're on xlm-roberta-large from now on, the base model plateaued.",
              "model_new"),
            A("With the large model the learning rate probably needs to come down; large encoders are "
              "prone to diverge at 3e-5."),
            U("Right, that's what happened. Lowered the LR to 1e-5 with 6% warmup and it's stable.", "lr_new"),
            A("Good, that's in line with the XLM-R paper's fine-tuning range."),
            Chat(2),
        )),
        (29, (
            U("# step 41200: loss spike traced to 900 duplicated tickets from the Spanish queue, deduped in v3 "
              "of the dataset", "spike", pad="table", size=112000, at="middle",
              lead="Here is the full metrics dump of run r17, all 200k steps:"),
            A("Apart from that spike the curve is smooth, and the eval metric keeps rising until about step "
              "150k, so early stopping at 160k would lose nothing.", size=2200),
            U("r17 ran on the 4×A100 node, in case it matters for timing.", "r17_node"),
            A("It does: the throughput numbers in the dump are only comparable with other A100 runs."),
        )),
        (36, (
            U("Finance cut the cluster allowance, we now have 250 GPU-hours in total, of which about 140 are "
              "already used.", "budget_new"),
            A("Then the remaining 110 hours go to two final seeds of the large model and the distillation "
              "run; no more sweeps."),
            Chat(2),
        )),
        (43, (
            U("New macro-F1 with xlm-roberta-large, deduped data and smoothing: 0.87 on the October set, "
              "seed 13.", "f1_new"),
            A("Six points over the baseline, most of it in the billing, refund and account queues."),
            U("We froze the label taxonomy today. 23 queues, no more merges or splits until after launch.",
              "taxonomy"),
            A("Good; a frozen taxonomy is what makes the October set a fair yardstick."),
            Chat(1),
        )),
        (50, (
            U("The serving team wants an ONNX export. Here's the stack trace from the exporter.",
              pad="trace", size=7600, at="start"),
            A("The exporter fails on the dynamic axes of the attention mask; passing opset 17 and naming the "
              "axes fixes it.", size=2500),
            U("Latency budget for serving is 40 ms per ticket on CPU.", "latency"),
            A("The large model won't make 40 ms on CPU; we should distil into a base-sized student."),
            Chat(2),
        )),
        (57, (
            U("Distilled student is done: 6 layers, 0.85 macro-F1, 23 ms per ticket on CPU.", "student"),
            A("That's a good trade: two points of F1 for less than half the time budget."),
            Chat(1),
        )),
    ),
    asks=(
        Ask("single-hop", "How many labelled examples do we have?", "184,000", ("dataset",)),
        Ask("single-hop", "How much time may the model spend on one ticket when served?", "40 ms on CPU",
            ("latency",)),
        Ask("single-hop", "How fast is the small distilled model per ticket?", "23 ms on CPU", ("student",)),
        Ask("single-hop", "How much label smoothing did we settle on?", "0.1", ("smoothing_ok",)),
        Ask("update", "Which pretrained encoder are we fine-tuning now?", "xlm-roberta-large", ("model_new",),
            "model"),
        Ask("previous-value", "Which encoder did the prototype start from?", "bert-base-multilingual-cased",
            ("model_old",), "model"),
        Ask("update", "What step size does the optimiser use at the moment?", "1e-5 with 6% warmup", ("lr_new",),
            "lr"),
        Ask("previous-value", "What step size did the very first run use?", "3e-5", ("lr_old",), "lr"),
        Ask("update", "What's our best macro-averaged F1 on the held-out month?", "0.87", ("f1_new",), "f1"),
        Ask("previous-value", "What did the baseline score on the held-out month?", "0.81", ("f1_old",), "f1"),
        Ask("update", "How many accelerator hours does the project get overall?", "250", ("budget_new",),
            "budget"),
        Ask("previous-value", "How large was the compute allowance before finance cut it?", "400 GPU-hours",
            ("budget_old",), "budget"),
        Ask("instruction", "What must accompany every number I report for this project?", "the random seed",
            ("seeds",)),
        Ask("instruction", "Can I log the experiments to wandb?", "no: MLflow only, W&B not approved by legal",
            ("mlflow",)),
        Ask("long-message", "What caused the jump in loss partway through run r17?",
            "900 duplicated Spanish tickets", ("spike",)),
        Ask("long-message", "How often do the two labellers disagree between billing and refund?", "about 12%",
            ("smoothing",)),
        Ask("temporal", "When did we lock the set of queues?", "{date}", ("taxonomy",)),
        Ask("temporal", "When did we move to the bigger backbone?", "{date}", ("model_new",)),
        Ask("temporal", "When was the compute allowance reduced?", "{date}", ("budget_new",)),
        Ask("single-hop", "Which languages do the support tickets come in?", "English, Spanish and German",
            ("dataset",)),
        Ask("single-hop", "How many layers does the distilled model have?", "6", ("student",)),
        Ask("long-message", "At which step did training go briefly off the rails in r17?", "step 41200",
            ("spike",)),
        Ask("temporal", "When was the small student model ready?", "{date}", ("student",)),
        Ask("multi-hop", "On what hardware was the run with the duplicated Spanish tickets trained?",
            "the 4×A100 node", ("spike", "r17_node")),
        Ask("multi-hop", "How much of the serving time budget does the distilled model leave unused?",
            "17 ms (23 of 40 ms)", ("latency", "student")),
    ),
)

_HARBOUR = Project(
    id="harbour-infra",
    title="Harbour: moving an insurer's 140 on-premises VMs to Kubernetes on AWS (Terraform, EKS)",
    start=date(2026, 2, 23),
    vocab=Vocab(
        lang="en", code="hcl",
        components=("eks-prod", "vpc-core", "rds-policy", "ingress-nginx", "karpenter", "vault", "argocd"),
        functions=("network", "eks", "rds", "observability", "dns", "backup"),
        things=("subnet", "node_group", "target_group", "hosted_zone", "kms_key", "bucket", "iam_role"),
        paths=("live/prod/eks/main.tf", "modules/vpc/variables.tf", "live/staging/rds/main.tf",
               "charts/policy-api/values.yaml", "scripts/cutover.sh"),
        errors=("Error: creating EKS Node Group", "Error: AccessDenied", "Error: timeout while waiting for state",
                "CrashLoopBackOff", "Error: Provider produced inconsistent final plan"),
        libs=("Terraform", "Helm", "Argo CD", "Karpenter", "external-dns", "Velero"),
    ),
    sessions=(
        (0, (
            U("We're migrating 140 VMs from our VMware cluster in the Leeds data centre to EKS. The VMware "
              "licence runs out on 31 August, that's the hard stop.", "scope"),
            A("140 VMs by the end of August is doable if most of them are stateless services; the databases "
              "and anything with local state need their own plan."),
            U("Target region is eu-west-1, Ireland.", "region_old"),
            A("Ireland has all the instance families we need; I'll start the VPC layout there."),
            U("Non-negotiable: never run terraform apply without showing me the plan output first. Not even "
              "for a tag change.", "plan_first"),
            A("Agreed: plan, you review, then apply, for every change."),
            Chat(1),
        )),
        (6, (
            U("Every resource has to carry a cost_center tag, finance reconciles the bill by it.", "tags"),
            A("I'll put it in the provider's default_tags so nothing can be created without it."),
            U("Our network contact at the colo for the Direct Connect cross-connect is Viktor Hale.",
              "contact_old"),
            A("I'll prepare the letter of authorisation so Viktor can order the cross-connect."),
            Chat(2),
        )),
        (13, (
            U("cluster-autoscaler or Karpenter?"),
            A("For this cluster I'd pick Karpenter. Our workloads are a mix of small API pods and large batch "
              "jobs for the actuarial models, and cluster-autoscaler can only scale node groups with one "
              "instance shape each, so we'd maintain a dozen groups. Karpenter picks the instance type per "
              "pending pod and can fall back from spot to on-demand, which is where most of the savings come "
              "from.", "karpenter", size=8800, at="middle"),
            U("Karpenter, then.", "karpenter_ok"),
            A("I'll add the controller and two NodePools: on-demand for the system pods, spot-first for the rest."),
        )),
        (20, (
            U("Legal came back: the DPO says policyholder data must stay in Germany-adjacent jurisdiction, so "
              "we build everything in eu-central-1 (Frankfurt) instead.", "region_new"),
            A("Nothing has been applied in Ireland except the state bucket, so the switch is cheap now. I'll "
              "move the backend and re-plan."),
            U("Cutover weekend is set for 6 June.", "cutover_old"),
            A("That leaves about twelve weeks. I'd do a full rehearsal two weeks before."),
            Chat(2),
        )),
        (27, (
            U("# NOTE: multi-AZ is off for the staging database only, it saves about $1,100 a month and "
              "staging can tolerate an outage", "staging_rds", pad="plan", size=152000, at="end",
              lead="Full terraform plan for the whole staging environment, please review before I apply:"),
            A("The plan creates 418 resources and changes none, which is what we want for a fresh environment. "
              "Two things: the NAT gateways are per-AZ (good), and the flow logs bucket has no lifecycle "
              "rule.", size=3000),
            Chat(1),
        )),
        (34, (
            U("Viktor retired at the end of last month; Sana Qureshi is now our contact at the colo for the "
              "cross-connect.", "contact_new"),
            A("I'll re-address the authorisation letter to Sana."),
            U("DNS: the policy portal's records have a TTL of 3600 seconds.", "ttl_old"),
            A("We should lower that well before cutover, otherwise resolvers will keep sending users to Leeds "
              "for an hour."),
            Chat(2),
        )),
        (41, (
            U("The policy-api pods restart about every 90 seconds, and only since Tuesday's Vault upgrade.",
              "restarts", pad="trace", size=9400, at="start",
              lead="Argo CD keeps failing to sync the policy-api. Pod logs attached."),
            A("The pods crash because the Vault agent injector annotation points at the old auth path; the "
              "role was created under kubernetes-eks, not kubernetes.", size=2600),
            U("Disaster recovery test went fine today: Velero restored the whole namespace in 19 minutes.",
              "dr_test"),
            A("19 minutes is inside the 30-minute RTO; worth writing down the exact steps in the runbook."),
        )),
        (48, (
            U("We lowered the TTL on the portal's records to 60 seconds ahead of the move.", "ttl_new"),
            A("Good. Leave it there for a week after cutover, then raise it again."),
            U("Cutover moves to 20 June: the actuarial team has a quarter-end close on the 6th.",
              "cutover_new"),
            A("Then the rehearsal moves to 6 June instead; same runbook."),
            Chat(2),
        )),
        (56, (
            U("Rehearsal notes: the database sync was the longest step, 3 h 40 min for the 2 TB policy "
              "database.", "rehearsal"),
            A("Then the cutover window must start the evening before; a final incremental sync should take "
              "minutes."),
            Chat(1),
        )),
        (66, (
            U("We're live on EKS. Leeds VMs are powered off but kept until the licence ends.", "live"),
            A("Congratulations. Keep the VMs for rollback until the licence ends, then archive the disks."),
            Chat(1),
        )),
    ),
    asks=(
        Ask("single-hop", "How many virtual machines are in scope?", "140", ("scope",)),
        Ask("single-hop", "How long did the backup tool need to bring a namespace back?", "19 minutes",
            ("dr_test",)),
        Ask("single-hop", "How long did copying the main database take in the dress rehearsal?", "3 h 40 min",
            ("rehearsal",)),
        Ask("update", "Which AWS region are we building in?", "eu-central-1 (Frankfurt)", ("region_new",),
            "region"),
        Ask("previous-value", "Which AWS region was planned before legal objected?", "eu-west-1 (Ireland)",
            ("region_old",), "region"),
        Ask("update", "When is the switch-over weekend?", "20 June", ("cutover_new",), "cutover"),
        Ask("previous-value", "What date had we first picked for the switch-over?", "6 June", ("cutover_old",),
            "cutover"),
        Ask("update", "How long may resolvers cache the portal's DNS answers right now?", "60 seconds",
            ("ttl_new",), "ttl"),
        Ask("previous-value", "What was the portal records' cache lifetime before we touched it?",
            "3600 seconds", ("ttl_old",), "ttl"),
        Ask("update", "Who do I talk to at the data centre about the cross-connect?", "Sana Qureshi",
            ("contact_new",), "contact"),
        Ask("previous-value", "Who handled the cross-connect at the data centre at first?", "Viktor Hale",
            ("contact_old",), "contact"),
        Ask("instruction", "Can I apply a small infrastructure change straight away?",
            "no: always show the plan output first", ("plan_first",)),
        Ask("instruction", "What label does finance require on everything we create in AWS?", "cost_center",
            ("tags",)),
        Ask("long-message", "Why isn't the staging database replicated across availability zones?",
            "saves about $1,100 a month; staging can tolerate an outage", ("staging_rds",)),
        Ask("long-message", "Why would the old autoscaler have meant lots of node groups?",
            "one instance shape per node group; a mix of small API pods and big batch jobs", ("karpenter",)),
        Ask("temporal", "When did we run the recovery drill?", "{date}", ("dr_test",)),
        Ask("temporal", "When did we choose the node provisioner?", "{date}", ("karpenter_ok",)),
        Ask("temporal", "When did the new platform go live?", "{date}", ("live",)),
        Ask("single-hop", "When does the virtualisation licence run out?", "31 August", ("scope",)),
        Ask("single-hop", "Where were the old machines hosted?", "the Leeds data centre", ("scope",)),
        Ask("long-message", "After which change did the policy service start crash-looping?",
            "Tuesday's Vault upgrade", ("restarts",)),
        Ask("temporal", "When was the switch-over pushed back?", "{date}", ("cutover_new",)),
        Ask("multi-hop", "How many days before the VMware licence expires is the switch-over now?",
            "72 days (20 June to 31 August)", ("cutover_new", "scope")),
        Ask("multi-hop", "In which region do the nodes that the chosen provisioner launches run?",
            "eu-central-1 (Frankfurt)", ("karpenter_ok", "region_new")),
    ),
)

_FEDICU = Project(
    id="fedicu-paper",
    title="Writing a paper on federated learning for ICU deterioration prediction (LaTeX)",
    start=date(2026, 6, 22),
    vocab=Vocab(
        lang="en", code="latex",
        components=("introduction", "related work", "methods section", "experiments", "appendix", "bibliography"),
        functions=("mcmahan2017fedavg", "li2020fedprox", "johnson2023mimiciv", "abadi2016dpsgd",
                   "rieke2020future", "kaissis2021end"),
        things=("site", "cohort", "ablation", "figure", "baseline", "calibration curve", "reviewer comment"),
        paths=("paper/main.tex", "paper/sections/methods.tex", "paper/sections/experiments.tex",
               "paper/refs.bib", "paper/figures/auroc.pdf"),
        errors=("LaTeX Error: File `natbib.sty' not found", "Undefined control sequence",
                "Overfull \\hbox", "Citation undefined", "Missing $ inserted"),
        libs=("natbib", "booktabs", "pgfplots", "cleveref", "latexmk", "Flower"),
    ),
    sessions=(
        (0, (
            U("I'm writing up our federated learning study: predicting ICU deterioration without pooling "
              "patient data. Five hospitals take part.", "sites_old"),
            A("A timely topic. For the framing, the contrast with centralised training on pooled data will be "
              "what reviewers look for first."),
            U("We're aiming for ICLR, abstract due 19 September.", "venue_old"),
            A("Then the main results should be frozen by the end of August so there's time to write."),
            U("Style: active voice with 'we', never 'it was observed that'. And cite with \\citet or \\citep "
              "from natbib, never a bare \\cite.", "style"),
            A("Noted; I'll use \\citet when the authors are the subject of the sentence and \\citep otherwise."),
        )),
        (5, (
            U("Dr. Okafor is our clinical co-author, he checks every claim about patient outcomes.",
              "clinician_old"),
            A("Good, then the clinical definitions of deterioration should be his wording."),
            U("Headline number right now: federated AUROC 0.861 against 0.874 for pooled training.",
              "auroc_old"),
            A("A gap of about 0.013 is a strong result for a federated setting."),
            Chat(2),
        )),
        (12, (
            U("How should we set the privacy budget for DP-SGD?"),
            A("I reran the sweep. At epsilon 1 the AUROC collapses to about 0.71, which no clinician would "
              "accept; at epsilon 8 the loss is under one point and the guarantee is still meaningful under "
              "the hospitals' threat model, since only gradients leave each site. So I'd report epsilon 8 as "
              "the main setting and show 1, 2 and 4 in the appendix.", "epsilon", size=9600, at="middle"),
            U("ok, epsilon 8 for the main table.", "epsilon_ok"),
            A("I'll update the methods paragraph and the table caption."),
        )),
        (19, (
            U("% Decision 2026-07-09: MIMIC-IV experiments are out, its data use agreement forbids sharing "
              "derived models across institutions", "mimic", pad="code", size=58000, at="middle",
              lead="Here's the current main.tex, it's long. Mostly check the methods."),
            A("The methods read well. I'd shorten the related-work paragraph on split learning and move the "
              "hyperparameters into a table.", size=2800),
            Chat(2),
        )),
        (26, (
            U("Two more hospitals signed on, so the study now has seven sites.", "sites_new"),
            A("Seven sites makes the heterogeneity analysis much more convincing; the non-IID figure needs "
              "the two new ones."),
            U("Bad news: we found label leakage in the preprocessing (future vitals in the input window). After "
              "the fix, federated AUROC is 0.834.", "auroc_new"),
            A("Better to find it now than in review. The gap to pooled training matters more than the "
              "absolute value; let's recompute that too."),
            Chat(1),
        )),
        (33, (
            U("We're switching venue: the clinical side would get lost at ICLR, so we'll submit to Machine "
              "Learning for Health (ML4H) instead, abstracts due 21 August, full paper a week later.",
              "venue_new"),
            A("ML4H suits the clinical framing better anyway, and the page limit is friendlier."),
            Chat(2),
        )),
        (40, (
            U("Dr. Okafor moved to industry, so Dr. Ingrid Lindqvist takes over as clinical co-author.",
              "clinician_new"),
            A("I'll send Dr. Lindqvist the list of clinical claims that still need a check."),
            U("Latexmk log from the broken build, can you find what's wrong?",
              pad="log", size=6200, at="start"),
            A("The bibliography fails because refs.bib has two entries with the key li2020fedprox.", "bibdup",
              size=1700),
        )),
        (47, (
            U("Reviewer 2: the paper needs a comparison with FedProx at mu = 0.01 before submission; FedAvg alone "
              "is not a fair baseline for non-IID sites.", "reviews", pad="reply", size=24000, at="middle",
              lead="Internal review from our group, pasted in full."),
            A("Reviewer 2's point is the one that matters most; the FedProx run takes about a day on our setup.",
              size=2300),
            Chat(1),
        )),
        (54, (
            U("We submitted the abstract to ML4H this evening.", "abstract"),
            A("Well done. The full paper has a week more; the FedProx row is the last open item."),
            Chat(2),
        )),
        (61, (
            U("FedProx result is in: 0.839 AUROC, half a point above FedAvg.", "fedprox"),
            A("Worth one sentence and a row in the table; it supports the claim that the method, not the "
              "optimiser, is what closes the gap."),
            Chat(1),
        )),
    ),
    asks=(
        Ask("single-hop", "What does FedProx reach on our main metric?", "0.839 AUROC", ("fedprox",)),
        Ask("single-hop", "What privacy budget did we put in the main table?", "epsilon 8", ("epsilon_ok",)),
        Ask("update", "How many participating medical centres are there now?", "seven", ("sites_new",), "sites"),
        Ask("previous-value", "How many medical centres took part at the outset?", "five", ("sites_old",),
            "sites"),
        Ask("update", "Where are we sending the paper?", "ML4H, abstracts due 21 August", ("venue_new",), "venue"),
        Ask("previous-value", "Which conference were we originally targeting?", "ICLR (abstract 19 September)",
            ("venue_old",), "venue"),
        Ask("update", "Who vets the clinical claims in the manuscript?", "Dr. Ingrid Lindqvist",
            ("clinician_new",), "clinician"),
        Ask("previous-value", "Who was the clinical co-author before the change?", "Dr. Okafor",
            ("clinician_old",), "clinician"),
        Ask("update", "What is the headline discrimination score of the federated model?", "AUROC 0.834",
            ("auroc_new",), "auroc"),
        Ask("previous-value", "What headline score did we report before the preprocessing bug was found?",
            "AUROC 0.861", ("auroc_old",), "auroc"),
        Ask("instruction", "How should I reference prior work in the LaTeX source?",
            "\\citet or \\citep from natbib, never a bare \\cite", ("style",)),
        Ask("instruction", "Is passive voice fine in the paper?", "no: active voice with 'we'", ("style",)),
        Ask("long-message", "Why were the MIMIC-IV experiments dropped?",
            "its data use agreement forbids sharing derived models across institutions", ("mimic",)),
        Ask("long-message", "Which additional baseline did our internal reviewer insist on?",
            "FedProx at mu = 0.01", ("reviews",)),
        Ask("long-message", "What happened to performance at the strictest privacy setting we tried?",
            "AUROC collapsed to about 0.71 at epsilon 1", ("epsilon",)),
        Ask("temporal", "When did the abstract go in?", "{date}", ("abstract",)),
        Ask("temporal", "When did we decide to change the target venue?", "{date}", ("venue_new",)),
        Ask("temporal", "When did we discover the leakage in preprocessing?", "{date}", ("auroc_new",)),
        Ask("single-hop", "What does training on the pooled data reach?", "AUROC 0.874", ("auroc_old",)),
        Ask("single-hop", "Which bibliography key appears twice?", "li2020fedprox", ("bibdup",)),
        Ask("long-message", "Why is FedAvg by itself not a fair comparison, according to the internal review?",
            "the sites are non-IID", ("reviews",)),
        Ask("temporal", "When did the new clinical co-author come on board?", "{date}", ("clinician_new",)),
        Ask("multi-hop", "How far is the FedProx result above our corrected federated number?",
            "0.005 (0.839 against 0.834)", ("fedprox", "auroc_new")),
        Ask("multi-hop", "How many days before the new venue's abstract deadline did ours go in?",
            "6 days (15 August against 21 August)", ("abstract", "venue_new")),
    ),
)

_RUDERVEREIN = Project(
    id="ruderverein-app",
    title="Mitgliederverwaltung für einen Ruderverein (Django, SEPA-Lastschriften), auf Deutsch",
    start=date(2026, 9, 7),
    vocab=Vocab(
        lang="de", code="python",
        components=("mitglieder-app", "beitragslauf", "bootsreservierung", "sepa-export", "mailversand"),
        functions=("erzeuge_lastschriften", "pruefe_mandat", "reserviere_boot", "sende_rundmail",
                   "berechne_beitrag", "importiere_mitglieder"),
        things=("Mitglied", "Lastschrift", "Boot", "Reservierung", "Beitrag", "Mandat", "Bankverbindung"),
        paths=("verein/mitglieder/models.py", "verein/beitraege/sepa.py", "verein/boote/views.py",
               "verein/settings.py", "tests/test_sepa.py"),
        errors=("django.db.utils.OperationalError", "ValidationError", "lxml.etree.XMLSyntaxError",
                "smtplib.SMTPAuthenticationError", "IntegrityError"),
        libs=("Django", "sepaxml", "Celery", "pytest-django", "WeasyPrint"),
    ),
    sessions=(
        (0, (
            U("Hallo! Ich baue für unseren Ruderverein eine Mitgliederverwaltung mit Django. Wir haben 347 "
              "Mitglieder, bisher läuft alles über eine Excel-Tabelle des Kassenwarts.", "mitglieder"),
            A("Schönes Projekt. Als Erstes würde ich das Datenmodell festlegen: Mitglied, Mandat für die "
              "Lastschrift und Beitragsart."),
            U("Bitte antworte immer auf Deutsch, aber Kommentare im Code auf Englisch.", "sprache"),
            A("Mache ich: Erklärungen auf Deutsch, Kommentare und Bezeichner im Code auf Englisch."),
            U("Kassenwartin ist Frau Berger, sie gibt jede Lastschriftdatei frei, bevor sie zur Bank geht.",
              "kasse_alt"),
            A("Dann bauen wir einen Freigabeschritt ein: die Datei wird erst nach ihrer Bestätigung "
              "hochgeladen."),
            Chat(1),
        )),
        (6, (
            U("SQLite oder Postgres?"),
            A("Ich habe mir angesehen, wie ihr arbeitet. Drei Ehrenamtliche buchen am Bootshaus oft gleichzeitig "
              "Reservierungen, und SQLite sperrt bei parallelen Schreibzugriffen die ganze Datenbank; genau "
              "dann kommen die Fehlermeldungen 'database is locked'. Deshalb empfehle ich Postgres, auch wenn "
              "es auf dem kleinen Server etwas mehr Speicher braucht.", "postgres", size=7800, at="middle"),
            U("Gut, dann Postgres.", "postgres_ok"),
            A("Ich richte die Datenbank ein und passe die settings.py an."),
            Chat(1),
        )),
        (13, (
            U("Der Jahresbeitrag für Erwachsene liegt bei 180 Euro.", "beitrag_alt"),
            A("Dann lege ich die Beitragsarten an: Erwachsene, Jugendliche und Fördermitglieder."),
            U("Wichtig: keine personenbezogenen Daten in die Logs, also keine Namen, keine IBANs. Datenschutz "
              "ist im Verein ein heißes Thema.", "logs"),
            A("Verstanden. Ich logge nur Mitgliedsnummern und maskiere IBANs auf die letzten vier Stellen.",
              "iban"),
            Chat(2),
        )),
        (20, (
            U("Der Lastschrifteinzug läuft einmal im Jahr, am 15. Januar.", "einzug_alt"),
            A("Dann muss der Beitragslauf spätestens Anfang Januar laufen, wegen der Vorlagefrist der Bank."),
            U("Grund laut Bank: die Gläubiger-Identifikationsnummer in der Datei ist falsch, richtig ist "
              "DE71ZZZ00001234567.", "glaeubiger", pad="log", size=11500, at="middle",
              lead="Die Bank hat die Testdatei abgelehnt, hier das komplette Protokoll."),
            A("Die Nummer steht fest in sepa.py; ich ziehe sie in die Einstellungen, dann ist sie an einer "
              "Stelle änderbar.", size=1900),
        )),
        (27, (
            U("Die Bootsreservierung ist seit heute für alle Mitglieder freigeschaltet.", "reservierung"),
            A("Glückwunsch! Ich würde in den ersten Wochen die Fehlerseiten im Auge behalten."),
            Chat(2),
        )),
        (34, (
            U("Die Mitgliederversammlung hat beschlossen: ab nächstem Jahr zahlen Erwachsene 204 Euro.",
              "beitrag_neu"),
            A("Ich ändere den Betrag über eine Datenmigration, damit die alten Lastschriften unverändert "
              "bleiben."),
            U("Außerdem wurde gewählt: Herr Yilmaz ist jetzt Kassenwart, Frau Berger hat nicht mehr kandidiert.",
              "kasse_neu"),
            A("Dann bekommt Herr Yilmaz die Freigaberechte, und Frau Bergers Konto wird auf Lesen gestellt."),
            Chat(1),
        )),
        (41, (
            U("Der Einzug wird auf den 1. März verschoben, damit neue Mitglieder aus dem Winter schon dabei sind.",
              "einzug_neu"),
            A("Dann verschiebt sich auch der Beitragslauf; ich passe den Celery-Zeitplan an."),
            Chat(2),
        )),
        (48, (
            U("Alles läuft. Danke! Als Nächstes kommt das Fahrtenbuch.", "fahrtenbuch"),
            A("Gern. Für das Fahrtenbuch bietet sich an, die Reservierungen als Grundlage zu nehmen."),
            Chat(1),
        )),
    ),
    asks=(
        Ask("single-hop", "Wie viele Leute sind im Verein?", "347", ("mitglieder",)),
        Ask("single-hop", "Was soll nach der Mitgliederverwaltung als nächstes gebaut werden?", "das Fahrtenbuch",
            ("fahrtenbuch",)),
        Ask("update", "Wie viel zahlt ein erwachsenes Mitglied künftig pro Jahr?", "204 Euro", ("beitrag_neu",),
            "beitrag"),
        Ask("previous-value", "Was hat ein Erwachsener vor dem Beschluss jährlich gezahlt?", "180 Euro",
            ("beitrag_alt",), "beitrag"),
        Ask("update", "Wer kümmert sich inzwischen um die Vereinsfinanzen?", "Herr Yilmaz", ("kasse_neu",),
            "kasse"),
        Ask("previous-value", "Wer hat die Finanzen vor der Wahl verwaltet?", "Frau Berger", ("kasse_alt",),
            "kasse"),
        Ask("update", "An welchem Tag wird das Geld von den Konten abgebucht?", "am 1. März", ("einzug_neu",),
            "einzug"),
        Ask("previous-value", "Zu welchem Termin wurde ursprünglich abgebucht?", "am 15. Januar",
            ("einzug_alt",), "einzug"),
        Ask("instruction", "In welcher Sprache sollen Kommentare im Quelltext stehen?", "Englisch",
            ("sprache",)),
        Ask("instruction", "Darf ich den Namen eines Mitglieds ins Protokoll schreiben?",
            "nein: keine personenbezogenen Daten in Logs", ("logs",)),
        Ask("long-message", "Warum hat die Bank die Testdatei zurückgewiesen?",
            "falsche Gläubiger-Identifikationsnummer; richtig ist DE71ZZZ00001234567", ("glaeubiger",)),
        Ask("long-message", "Was spricht in unserem Fall gegen SQLite?",
            "drei Ehrenamtliche schreiben gleichzeitig; SQLite sperrt die ganze Datenbank", ("postgres",)),
        Ask("temporal", "Wann konnten alle Mitglieder zum ersten Mal Boote reservieren?", "{date}",
            ("reservierung",)),
        Ask("temporal", "Wann fiel die Entscheidung für die Datenbank?", "{date}", ("postgres_ok",)),
        Ask("single-hop", "Womit hat der Verein seine Mitglieder bisher verwaltet?", "mit einer Excel-Tabelle",
            ("mitglieder",)),
        Ask("single-hop", "Wie viel von einer Kontonummer taucht in den Protokollen auf?", "die letzten vier Stellen",
            ("iban",)),
        Ask("long-message", "Welche Gläubiger-ID ist die richtige?", "DE71ZZZ00001234567", ("glaeubiger",)),
        Ask("temporal", "Wann wurde die Beitragserhöhung beschlossen?", "{date}", ("beitrag_neu",)),
        Ask("multi-hop", "Wer muss jetzt die Datei für den Einzug bestätigen, bevor sie zur Bank geht?",
            "Herr Yilmaz (der Kassenwart gibt frei)", ("kasse_alt", "kasse_neu")),
    ),
)

#: Every conversation of the set, in the order they are written out.
PROJECTS: tuple[Project, ...] = (_LEDGERLY, _RIVER, _TRAILMATE, _TICKETS, _HARBOUR, _FEDICU, _RUDERVEREIN)


# ----------------------------------------------------------------- building the set


def _text(project: Project, say: Say, rng: random.Random, day: date) -> str:
    if say.pad is None:
        body = say.text
    else:
        at = say.at or rng.choice(POSITIONS)
        size = say.size or _reply_size(rng)
        body = _padded(rng, project.vocab, say.text, say.pad, day, size - len(say.lead), at)
    return f"{say.lead}\n\n{body}" if say.lead else body


def _seeded(key: str) -> random.Random:
    # A string seed is hashed with SHA-512, the same in every process (PYTHONHASHSEED plays no part).
    return random.Random(key)  # noqa: S311  seeded filler, not a secret


def _append(turns: list[dict[str, str]], s_number: int, speaker: str, text: str) -> str:
    turn_id = f"S{s_number}:{len(turns) + 1}"
    turns.append({"id": turn_id, "speaker": speaker, "text": text})
    return turn_id


def build_project(project: Project) -> dict[str, Any]:
    """One conversation of the neutral format (``{"id", "sessions", "questions"}``).

    Raises:
        ValueError: If the content is inconsistent: a key used twice or never defined, an unknown
            category, an ``update`` without its ``previous-value`` (or the other way round).
    """
    sessions: list[dict[str, Any]] = []
    turn_of: dict[str, str] = {}
    date_of: dict[str, date] = {}
    for s_number, (offset_days, items) in enumerate(project.sessions, 1):
        day = project.start + timedelta(days=offset_days)
        clock = _seeded(f"{project.id}:S{s_number}")
        when = datetime(day.year, day.month, day.day, clock.randint(8, 19), clock.choice((0, 15, 30, 45)), tzinfo=UTC)
        turns: list[dict[str, str]] = []
        for item in items:
            if isinstance(item, Chat):
                for _ in range(item.pairs):
                    rng = _seeded(f"{project.id}:S{s_number}:{len(turns) + 1}")
                    question, reply = _generated_pair(rng, project.vocab, day)
                    _append(turns, s_number, "user", question)
                    _append(turns, s_number, "assistant", reply)
                continue
            rng = _seeded(f"{project.id}:S{s_number}:{len(turns) + 1}")
            turn_id = _append(turns, s_number, item.speaker, _text(project, item, rng, day))
            if item.key is not None:
                if item.key in turn_of:
                    raise ValueError(f"{project.id}: key {item.key!r} used twice")
                turn_of[item.key], date_of[item.key] = turn_id, day
        sessions.append({"id": f"S{s_number}", "date": when.isoformat(), "turns": turns})
    return {"id": project.id, "sessions": sessions, "questions": _questions(project, turn_of, date_of)}


def _questions(project: Project, turn_of: dict[str, str], date_of: dict[str, date]) -> list[dict[str, Any]]:
    questions = []
    pairs: dict[str, set[str]] = {}
    for n, ask in enumerate(project.asks, 1):
        if ask.category not in CATEGORIES:
            raise ValueError(f"{project.id}: unknown category {ask.category!r}")
        missing = [k for k in ask.evidence if k not in turn_of]
        if missing:
            raise ValueError(f"{project.id}: question {ask.question!r} names unknown keys {missing}")
        paired = ask.category in ("update", "previous-value")
        if paired != (ask.pair is not None):
            raise ValueError(f"{project.id}: {ask.category} question {ask.question!r}: pair must be set exactly "
                             "for update and previous-value")
        if ask.pair is not None:
            pairs.setdefault(ask.pair, set()).add(ask.category)
        questions.append({
            "id": f"{project.id}-{ask.category}-{ask.pair or n}",
            "question": ask.question,
            "answer": ask.answer.replace("{date}", date_of[ask.evidence[0]].isoformat()),
            "evidence": [turn_of[k] for k in ask.evidence],
            "category": ask.category,
        })
    lonely = sorted(p for p, c in pairs.items() if c != {"update", "previous-value"})
    if lonely:
        raise ValueError(f"{project.id}: update / previous-value pairs incomplete: {lonely}")
    return questions


def build(projects: Sequence[Project] = PROJECTS) -> dict[str, Any]:
    """The whole set in the neutral format: ``{"conversations": [...]}``, the same on every call."""
    return {"conversations": [build_project(p) for p in projects]}


def statistics(data: dict[str, Any]) -> dict[str, Any]:
    """Sizes of a built set: conversations, sessions, turns, questions per category, message lengths."""
    lengths = sorted(len(t["text"]) for c in data["conversations"] for s in c["sessions"] for t in s["turns"])
    replies = sorted(len(t["text"]) for c in data["conversations"] for s in c["sessions"] for t in s["turns"]
                     if t["speaker"] == "assistant")
    categories: dict[str, int] = {}
    for c in data["conversations"]:
        for q in c["questions"]:
            categories[q["category"]] = categories.get(q["category"], 0) + 1
    return {
        "conversations": len(data["conversations"]),
        "sessions": sum(len(c["sessions"]) for c in data["conversations"]),
        "turns": len(lengths),
        "questions": sum(categories.values()),
        "categories": dict(sorted(categories.items())),
        "characters": sum(lengths),
        "median_chars": _quantile(lengths, 0.5),
        "p90_chars": _quantile(lengths, 0.9),
        "assistant_median_chars": _quantile(replies, 0.5),
        "over_5k": sum(n > 5_000 for n in lengths),
        "over_100k": sum(n > 100_000 for n in lengths),
        "longest_chars": lengths[-1],
    }


def _quantile(ordered: Sequence[int], q: float) -> int:
    # Nearest rank: a value of the set, as a size target reads.
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_bench.evaluation.devset_projects",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", required=True, type=Path, help="where to write the JSON")
    args = parser.parse_args(argv)
    data = build()
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps({"out": str(args.out), **statistics(data)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
