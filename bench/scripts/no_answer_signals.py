"""Can a search tell a question whose answer is not in memory from one whose answer is?

The measurement behind the "no-answer" paragraphs of docs/evaluation.md. Every LoCoMo
conversation goes into an in-process ``EpisodicMemory`` (the retrieval ablation's harness:
MiniLM, the default PII policy, no Ray). For each question that names exactly one of the
conversation's two speakers (LoCoMo's adversarial questions ask what that speaker did when
the other one did it), two searches are run:

* the default search (speaker-aware factor on; no time preference), top 16: the turns a
  context is built from;
* the same question with the speaker's name taken out and the speaker factor off, top 10:
  what the memory holds about the question's content, whoever said it.

Per signal it prints the ROC AUC of adversarial against answerable questions (0.5 is chance):
the best hit's relevance and fused score, the share of content hits not spoken by the named
speaker, and the share not *owned* by them (a turn in the first person is its speaker's; one
that says "you" more than "I" is the other speaker's). Then, for the strongest signal, what a
cut on it would cost: answerable evidence recall within the 16 hits against adversarial tokens,
when a question over the threshold keeps only its best few hits.

    python -m strata_bench.scripts.no_answer_signals ../shared/bench/locomo10.json
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.ranking import speakers_named, without_speakers
from strata.providers.embedder import OnnxMiniLMEmbedder
from strata.providers.tokens import TiktokenCounter
from strata.store.records import InMemoryRecordStore
from strata_bench.evaluation.ablation import _Ablation, _text, record_session, redacted
from strata_bench.evaluation.datasets import load_benchmark

_FIRST = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself|we|our|us)\b", re.IGNORECASE)
_SECOND = re.compile(r"\b(?:you|your|you're|you've|yours|yourself)\b", re.IGNORECASE)


@dataclass
class _Question:
    adversarial: bool
    signals: dict[str, float]
    hits: list[str]  # the default search's top 16 turn ids
    tokens: list[int]  # each hit's line, as the context counts it
    evidence: set[str]


def _owner(speaker: str, text: str, other: str) -> str:
    """Whose the turn's content is: its speaker's, unless it speaks to the other more than of itself."""
    return other if len(_SECOND.findall(text)) > len(_FIRST.findall(text)) else speaker


def _auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    p, n = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float((p > n).mean() + 0.5 * (p == n).mean())


def _questions(path: str) -> list[_Question]:
    benchmark = redacted(load_benchmark(path, None))
    ablation = _Ablation(benchmark, OnnxMiniLMEmbedder(threads=2))
    counter = TiktokenCounter()
    out: list[_Question] = []
    row = 0
    for c in benchmark.conversations:
        memories = {}
        for name, settings in (("default", EpisodicSettings()), ("content", EpisodicSettings(speaker_boost=0))):
            store = InMemoryRecordStore()
            store.ensure_collection("e", dim=ablation.embedder.dim)
            memories[name] = EpisodicMemory("signals", store=store, collection="e", settings=settings)
        said: dict[str, tuple[str, str]] = {}
        for s in c.sessions:
            for memory in memories.values():
                used = record_session(memory, s, ablation.vectors[row:])
            row += used
            said.update({t.id.replace(" ", "_"): (t.speaker, _text(t)) for t in s.turns})
        speakers = sorted({speaker for speaker, _ in said.values()})
        for q in c.questions:
            named = speakers_named(speakers, q.question)
            if len(named) != 1 or len(speakers) != 2:
                continue
            (person,) = named
            other = next(s for s in speakers if s != person)
            vector = ablation._embed_queries([memories["default"].dense_query(q.question)])[0]
            found = memories["default"].search(vector, query_text=q.question, top_k=16, include_summaries=False)
            content = memories["content"].search(vector, query_text=without_speakers(q.question, named), top_k=10,
                                                 include_summaries=False)
            scores = np.array([h.score for h in content])
            not_said = np.array([said[h.id][0] != person for h in content], dtype=float)
            not_owned = np.array([_owner(*said[h.id], other) != person for h in content], dtype=float)
            weights = scores / scores.sum() if scores.sum() else scores
            signals = {
                "best hit's relevance (higher: answerable)": -found[0].relevance if found else 0.0,
                "best hit's fused score (higher: answerable)": -found[0].score if found else 0.0,
                "content hits not spoken by the person, top 5": float(not_said[:5].mean()) if len(content) else 0.0,
                "content hits not owned by the person, top 10, by score": float(weights @ not_owned),
            }
            out.append(_Question(q.category == "adversarial", signals, [h.id for h in found],
                                 [counter.count(f"{said[h.id][0]}: {said[h.id][1]}\n") for h in found],
                                 {e.replace(" ", "_") for e in q.evidence}))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    questions = _questions(args[0])
    adversarial = [q for q in questions if q.adversarial]
    answerable = [q for q in questions if not q.adversarial and q.evidence]
    print(f"{len(answerable)} answerable and {len(adversarial)} adversarial questions naming one speaker\n")
    print("| signal (higher: no answer) | ROC AUC |\n|---|---|")
    for name in questions[0].signals:
        print(f"| {name} | {_auc([q.signals[name] for q in adversarial], [q.signals[name] for q in answerable]):.3f} |")
    name = "content hits not owned by the person, top 10, by score"
    print(f"\nA cut on \"{name}\": a question at or over the threshold keeps its best `keep` hits of 16.\n")
    print("| threshold | keep | answerable flagged | answerable recall | adversarial flagged | adversarial tokens, "
          "share of the 16 hits' |\n|---|---|---|---|---|---|")
    every = np.mean([len(q.evidence.intersection(q.hits)) / len(q.evidence) for q in answerable])
    print(f"| none | 16 | 0 | {every:.3f} | 0 | 1.00 |")
    for threshold in (0.5, 0.6, 0.7, 0.8):
        for keep in (2, 4):
            def kept(q: _Question, threshold: float = threshold, keep: int = keep) -> int:
                return keep if q.signals[name] >= threshold else len(q.hits)
            recall = np.mean([len(q.evidence.intersection(q.hits[: kept(q)])) / len(q.evidence) for q in answerable])
            tokens = np.mean([sum(q.tokens[: kept(q)]) / max(1, sum(q.tokens)) for q in adversarial])
            flagged = [np.mean([q.signals[name] >= threshold for q in group]) for group in (answerable, adversarial)]
            print(f"| {threshold} | {keep} | {flagged[0]:.2f} | {recall:.3f} | {flagged[1]:.2f} | {tokens:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
