"""``strata bench pii``: precision and recall of PII detection per type, on the labelled corpus.

The corpus (``tests/data/pii_corpus.jsonl``) is one sentence a line,
``{"text", "lang": "en"|"zh", "entities": [{"type", "value"}]}``, ``value`` the
exact substring; a value that occurs twice is labelled twice. A finding is a
true positive when a label of the same type and value is still unmatched, so
findings and labels pair up by (type, value, occurrence). Hard negatives
(order numbers, dates, versions, Luhn-invalid numbers, ...) are sentences
with no labels: whatever is found there lowers precision.

A second corpus, ``tests/data/pii_evasion.jsonl`` (same format, kept apart
from the rules' own examples and tests), holds PII written to slip past them:
full-width and Arabic-Indic digits, zero-width and no-break spaces, mixed
separators, accents, IDN domains, Cyrillic look-alikes, ``[at]``/``at ... dot``
emails, lower-case IBANs, SSNs and passports, beside hard negatives (prices,
dates, versions, "at" in prose). Its figures are printed after the main ones;
``--evasion-corpus ''`` skips it. It is not part of the exit status.

The rule detector always runs; Presidio's detector too when it is installed.
The corpus labels only the rule types, so for ``person`` and ``address`` only
the found count means anything. Exit status 0 when every rule type reaches
the targets (recall >= 0.95, precision >= 0.90), else 1.

It also prints the cost of the worst query an attacker can send: each
:data:`ADVERSARIAL` family at the longest message allowed, redacted by the rule
detector, median of a few runs; the slowest family is shown against a target
of 20 ms (printed, not part of the exit status: it depends on the machine).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.config import PII_TYPES, PIISettings
from strata.limits import MESSAGE_CHARS_MAX
from strata.privacy.pii import Detector, MergedDetector, RuleDetector, make_detector
from strata.privacy.redaction import Redactor
from strata_bench.stats import median

__all__ = [
    "ADVERSARIAL",
    "ADVERSARIAL_TARGET_MS",
    "DEFAULT_CORPUS",
    "EVASION_CORPUS",
    "RULE_TYPES",
    "Scores",
    "Sentence",
    "Tally",
    "add_arguments",
    "adversarial_ms",
    "evaluate",
    "format_report",
    "load_corpus",
    "repeat",
    "run",
    "throughput",
]

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "pii_corpus.jsonl"
EVASION_CORPUS = DEFAULT_CORPUS.with_name("pii_evasion.jsonl")
RULE_TYPES = ("email", "phone", "card", "cn_id", "iban", "ip", "secret")
MIN_RECALL = 0.95
MIN_PRECISION = 0.90
_THROUGHPUT_S = 1.0
#: The longest query redaction may take, in ms, at the longest message allowed.
ADVERSARIAL_TARGET_MS = 20.0
_ADVERSARIAL_RUNS = 5


def repeat(unit: str, n: int, *, head: str = "", tail: str = "") -> str:
    """``head``, ``unit`` repeated, ``tail``: exactly ``n`` characters (at least ``head + tail``)."""
    body = max(0, n - len(head) - len(tail))
    return head + (unit * (body // len(unit) + 1))[:body] + tail


#: Inputs of ``n`` characters that made a rule backtrack over the whole text from each character:
#: what each stresses -> the text. Redaction must stay linear on every one (tests/unit/test_pii_linear.py).
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "name chain before a key word (_ASSIGN_EN)": lambda n: repeat("a_", n),
    "dotted chain before a key word (_ASSIGN_EN)": lambda n: repeat("a.", n),
    "key word, underscores, no end (_NOT_A_VALUE)": lambda n: repeat("_", n, head="password=", tail="!"),
    "BEGIN lines without END (_SECRETS)": lambda n: repeat("-----BEGIN PRIVATE KEY-----\n", n),
    "email with a long domain (_EMAIL)": lambda n: repeat("a.", n, head="x@", tail="1"),
    "digit groups (phones, cards, ids)": lambda n: repeat("1234-", n),
    "colons and hex (_IPV6)": lambda n: repeat(" a:", n),
    "many IPs (resolve)": lambda n: repeat("1.2.3.4 ", n),
    "many emails (resolve)": lambda n: repeat("a@b.co ", n),
    "brackets and at-words (_SPELLED_EMAIL)": lambda n: repeat("a [at] b [dot] ", n),
    "passport words (_PASSPORT)": lambda n: repeat("passport no. ", n),
    "a space between digits (_CARD)": lambda n: repeat("1 ", n),
    "full-width and zero-width (normal_view)": lambda n: repeat("１\u200b２－", n),  # noqa: RUF001  the evasion measured
    "Cyrillic letters (normal_view)": lambda n: repeat("пример ", n),
}


@dataclass(frozen=True)
class Sentence:
    text: str
    lang: str
    labels: tuple[tuple[str, str], ...]  # (type, value), one per occurrence


@dataclass
class Tally:
    labelled: int = 0
    found: int = 0
    tp: int = 0

    def add(self, other: Tally) -> None:
        self.labelled += other.labelled
        self.found += other.found
        self.tp += other.tp

    def as_dict(self) -> dict[str, Any]:
        # Nothing labelled (or nothing found) counts as perfect recall (precision): there was nothing to miss.
        precision = self.tp / self.found if self.found else 1.0
        recall = self.tp / self.labelled if self.labelled else 1.0
        return {"labelled": self.labelled, "found": self.found, "tp": self.tp, "precision": precision, "recall": recall}


@dataclass
class Scores:
    types: dict[str, Tally] = field(default_factory=dict)
    by_lang: dict[str, Tally] = field(default_factory=dict)
    #: (type, value found, sentence) of each finding without a label, and of each label not found.
    false_positives: list[tuple[str, str, str]] = field(default_factory=list)
    misses: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def overall(self) -> Tally:
        total = Tally()
        for tally in self.types.values():
            total.add(tally)
        return total

    def failing(self) -> list[str]:
        """The rule types below a target."""
        out = []
        for t in RULE_TYPES:
            d = self.types.get(t, Tally()).as_dict()
            if d["recall"] < MIN_RECALL or d["precision"] < MIN_PRECISION:
                out.append(t)
        return out


def load_corpus(path: Path) -> list[Sentence]:
    """Args:
        path: a JSON-lines corpus as the module docstring describes.

    Raises:
        ValueError: a line is not valid, or a label's value is not in its text as often as it is labelled.
    """
    corpus = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        labels = tuple((e["type"], e["value"]) for e in row["entities"])
        for (t, v), k in Counter(labels).items():
            if t not in PII_TYPES or row["text"].count(v) < k:
                raise ValueError(f"{path}:{n}: label {t}={v!r} is not a PII type or not in the text {k} time(s)")
        corpus.append(Sentence(row["text"], row["lang"], labels))
    return corpus


def evaluate(detector: Detector, corpus: Sequence[Sentence]) -> Scores:
    """Matches findings to labels by (type, value, occurrence), per type and per language."""
    scores = Scores(types={t: Tally() for t in PII_TYPES})
    for sentence in corpus:
        found = Counter((f.type, sentence.text[f.start : f.end]) for f in detector.find(sentence.text))
        labelled = Counter(sentence.labels)
        lang = scores.by_lang.setdefault(sentence.lang, Tally())
        for key in found.keys() | labelled.keys():
            tally = Tally(labelled[key], found[key], min(labelled[key], found[key]))
            scores.types.setdefault(key[0], Tally()).add(tally)
            lang.add(tally)
            scores.false_positives += [(*key, sentence.text)] * (found[key] - tally.tp)
            scores.misses += [(*key, sentence.text)] * (labelled[key] - tally.tp)
    return scores


def throughput(detector: Detector, corpus: Sequence[Sentence]) -> float:
    """Sentences per second that a mask-everything :class:`Redactor` over ``detector`` redacts."""
    redactor = Redactor(detector, {t: "mask" for t in PII_TYPES}, hash_key=b"bench")
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < _THROUGHPUT_S or done == 0:
        for sentence in corpus:
            redactor.redact(sentence.text)
        done += len(corpus)
    return done / elapsed


def adversarial_ms(
    detector: Detector, *, chars: int = MESSAGE_CHARS_MAX, runs: int = _ADVERSARIAL_RUNS
) -> dict[str, float]:
    """Milliseconds (median of ``runs``, CPU time) that a mask-everything :class:`Redactor` takes per
    :data:`ADVERSARIAL` family at ``chars`` characters."""
    redactor = Redactor(detector, {t: "mask" for t in PII_TYPES}, hash_key=b"bench")
    out = {}
    for name, build in ADVERSARIAL.items():
        text = build(chars)
        times = []
        for _ in range(runs):
            started = time.process_time()
            redactor.redact(text)
            times.append((time.process_time() - started) * 1000)
        out[name] = median(times)
    return out


def _row(name: str, tally: Tally, target: bool) -> str:
    d = tally.as_dict()
    mark = ""
    if target:
        mark = "ok" if d["recall"] >= MIN_RECALL and d["precision"] >= MIN_PRECISION else "MISSES TARGET"
    row = f"{name:9} {d['labelled']:>8} {d['found']:>6} {d['tp']:>5} {d['precision']:>9.3f} {d['recall']:>7.3f}"
    return f"{row}  {mark}".rstrip()


def format_report(name: str, scores: Scores, sentences_per_s: float | None = None) -> str:
    lines = [f"detector: {name}", f"{'type':9} {'labelled':>8} {'found':>6} {'tp':>5} {'precision':>9} {'recall':>7}"]
    for t in PII_TYPES:
        tally = scores.types.get(t, Tally())
        if t in RULE_TYPES or tally.found or tally.labelled:
            lines.append(_row(t, tally, t in RULE_TYPES))
    lines.append(_row("overall", scores.overall, False))
    lines += [_row(f"lang={lang}", tally, False) for lang, tally in sorted(scores.by_lang.items())]
    if sentences_per_s is not None:
        lines.append(f"redaction throughput: {sentences_per_s:,.0f} sentences/s (mask every type, one thread)")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="labelled JSON-lines corpus")
    parser.add_argument("--evasion-corpus", type=Path, default=EVASION_CORPUS, help="evasion corpus ('' to skip)")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the figures as JSON")
    parser.add_argument("--show-errors", action="store_true", help="print each false positive and miss")


def run(args: argparse.Namespace) -> int:
    corpus = load_corpus(args.corpus)
    langs = Counter(s.lang for s in corpus)
    print(f"corpus: {args.corpus} ({len(corpus)} sentences: "
          + ", ".join(f"{n} {lang}" for lang, n in sorted(langs.items()))
          + f"; {sum(1 for s in corpus if not s.labels)} without PII)")
    rules = RuleDetector()
    scores = evaluate(rules, corpus)
    rate = throughput(rules, corpus)
    print(format_report("rules", scores, rate))
    adversarial = adversarial_ms(rules, runs=_ADVERSARIAL_RUNS)
    worst = max(adversarial, key=adversarial.__getitem__)
    mark = "ok" if adversarial[worst] < ADVERSARIAL_TARGET_MS else "MISSES TARGET"
    print(f"worst {MESSAGE_CHARS_MAX:,}-character adversarial query: {adversarial[worst]:.1f} ms to redact "
          f"(target < {ADVERSARIAL_TARGET_MS:.0f} ms: {mark}; {worst}, median of {_ADVERSARIAL_RUNS} runs)")
    if args.show_errors:
        for kind, errors in (("false positive", scores.false_positives), ("miss", scores.misses)):
            for t, value, text in errors:
                print(f"  {kind}: {t} {value!r} in {text!r}")
    evasion_scores = None
    if args.evasion_corpus and str(args.evasion_corpus):
        evasion = load_corpus(args.evasion_corpus)
        evasion_scores = evaluate(rules, evasion)
        print()
        print(f"evasion corpus: {args.evasion_corpus} ({len(evasion)} sentences; "
              f"{sum(1 for s in evasion if not s.labels)} without PII; not part of the exit status)")
        print(format_report("rules", evasion_scores))
        if args.show_errors:
            for kind, errors in (("false positive", evasion_scores.false_positives), ("miss", evasion_scores.misses)):
                for t, value, text in errors:
                    print(f"  {kind}: {t} {value!r} in {text!r}")
    merged = make_detector(PIISettings(ner=True))
    if isinstance(merged, MergedDetector):
        print()
        print(format_report("rules + presidio", evaluate(merged, corpus), throughput(merged, corpus)))
    else:
        print("presidio: not installed (person and address are detected only with it)")
    failing = scores.failing()
    print(f"targets per rule type: recall >= {MIN_RECALL}, precision >= {MIN_PRECISION}: "
          + (f"missed by {', '.join(failing)}" if failing else "all met"))
    if args.json:
        report = {
            "types": {t: tally.as_dict() for t, tally in scores.types.items()},
            "overall": scores.overall.as_dict(),
            "by_lang": {lang: tally.as_dict() for lang, tally in scores.by_lang.items()},
            "sentences_per_s": rate,
            "adversarial_ms": adversarial,
        }
        if evasion_scores is not None:
            report["evasion"] = {
                "types": {t: tally.as_dict() for t, tally in evasion_scores.types.items()},
                "overall": evasion_scores.overall.as_dict(),
            }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if failing else 0
