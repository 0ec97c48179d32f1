"""The retrieval ablation behind docs/retrieval-ablation.md.

``python -m strata_bench.evaluation.ablation DATASET [--format locomo|strata]`` prints one
Markdown row per configuration. Each row removes one part of episodic
retrieval from the defaults. It drives the same ``EpisodicMemory`` the
episodic actors run, in-process over the in-memory record store, so the
rows differ only in configuration: no Ray, Serve or Milvus noise. Turns
and questions are redacted by the default PII policy first, as the write and
search paths do. Turn vectors are embedded once per run and shared by every row.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import numpy as np

import strata.retrieval.terms
from strata.config import EmbeddingSettings, EpisodicSettings, PIISettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.privacy.redaction import Redaction
from strata.providers.embedder import OnnxMiniLMEmbedder, make_embedder
from strata.providers.routes import route_for, route_settings
from strata.retrieval.timeparse import question_time, resolve_time_range, strip_time_expression
from strata.store.records import InMemoryRecordStore
from strata_bench.evaluation.datasets import Benchmark, EvalSession, EvalTurn, load_benchmark, reference_time
from strata_bench.evaluation.metrics import Scoreboard

__all__ = ["main", "record_session", "redacted"]


def _text(t: EvalTurn) -> str:
    return t.text + (f" [shared an image: {t.image_caption}]" if t.image_caption else "")


def _plural_folding(word: str) -> str:
    """How the lexical paths stemmed before Snowball: a trailing s off, nothing else."""
    return word[:-1] if len(word) > 4 and word.endswith("s") and not word.endswith("ss") else word


def _digits_as_written(word: str) -> str:
    """How the lexical paths read a number before: as its digits, "07" apart from "7"."""
    return strata.retrieval.terms._stem(word)


def record_session(
    memory: EpisodicMemory, session: EvalSession, vectors: np.ndarray,
    embed_passages: Callable[[list[str]], np.ndarray] | None = None,
) -> int:
    """Write ``session``'s turns into ``memory`` as the write path does (turn and session ids with
    "_" for " ", a second apart from the session's date), their vectors the first rows of
    ``vectors``, then long turns' passages' vectors by ``embed_passages`` as the episodic shard
    does after the write (none: found by their words only); returns how many rows they took."""
    inputs = [
        TurnInput(user=_text(t), speaker=t.speaker, turn_id=t.id.replace(" ", "_"),
                  timestamp=(session.date + timedelta(seconds=k)) if session.date else None)
        for k, t in enumerate(session.turns)
    ]
    turns = memory.prepare(session.id.replace(" ", "_"), inputs, now=session.date or datetime.now(UTC))
    memory.record(turns, vectors[: len(turns)])
    if embed_passages is None:
        return len(turns)
    for key in memory.unembedded():
        texts = memory.texts_to_embed(key)
        passage_vectors = embed_passages(texts)
        routed = memory.routed_passage_vectors(key, texts)
        if memory.write_passage_vectors(key, texts, passage_vectors, routed):
            memory.index_passage_vectors(key, passage_vectors, routed)
    return len(turns)


def redacted(benchmark: Benchmark, settings: PIISettings | None = None) -> Benchmark:
    """``benchmark`` with its turns and questions as the default PII policy leaves them."""
    pii = Redaction(settings or PIISettings()).for_tenant("ablation")

    def turn(t: EvalTurn) -> EvalTurn:
        return replace(t, text=pii.text(t.text), image_caption=pii.value(t.image_caption))

    return replace(benchmark, conversations=tuple(
        replace(c, sessions=tuple(replace(s, turns=tuple(map(turn, s.turns))) for s in c.sessions),
                questions=tuple(replace(q, question=pii.text(q.question)) for q in c.questions))
        for c in benchmark.conversations
    ))


class _Remembered:
    """An embedder whose vectors are kept by text, so every row embeds a text once."""

    dim = 384

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._model: Any = None
        self._kept: dict[tuple[bool, str], np.ndarray] = {}

    def _embed(self, texts: Sequence[str], query: bool) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if (query, t) not in self._kept]
        if missing:
            self._model = self._model or self._load()
            made = self._model.embed_query(missing) if query else self._model.embed(missing)
            self._kept.update({(query, t): v for t, v in zip(missing, made, strict=True)})
        return np.stack([self._kept[(query, t)] for t in texts])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, False)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, True)


class _Ablation:
    def __init__(self, benchmark: Benchmark, embedder: OnnxMiniLMEmbedder) -> None:
        self.benchmark = benchmark
        self.embedder = embedder
        # The second model, as the default settings route non-Latin turns to it (strata.providers.routes).
        settings = route_settings(EmbeddingSettings(threads=2))
        second = _Remembered(lambda: make_embedder(settings))
        self.route = route_for(settings, lambda: second)
        turns = [t for c in benchmark.conversations for s in c.sessions for t in s.turns]
        # The same text the write path embeds (episodic Turn.text).
        self.vectors = embedder.embed([f"{t.speaker}: {_text(t)}" for t in turns])
        self.queries: dict[str, np.ndarray] = {}
        self.passages: dict[str, np.ndarray] = {}  # passage text -> vector, shared by every row

    def _embed_passages(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.passages]
        if missing:
            self.passages.update(zip(missing, self.embedder.embed(missing), strict=True))
        return np.stack([self.passages[t] for t in texts])

    def _embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.queries]
        if missing:
            self.queries.update(zip(missing, self.embedder.embed_query(missing), strict=True))
        return [self.queries[t] for t in texts]

    def run(self, settings: EpisodicSettings, *, strip_names: bool = True, time_mode: str = "soft",
            plural_folding: bool = False, digits_as_written: bool = False, route: bool = True) -> dict[str, Any]:
        stems = mock.patch.object(strata.retrieval.terms, "_stem", _plural_folding) if plural_folding else nullcontext()
        digits = (mock.patch.object(strata.retrieval.terms, "_term", _digits_as_written) if digits_as_written
                  else nullcontext())
        with stems, digits:
            return self._run(settings, strip_names=strip_names, time_mode=time_mode, route=route)

    def _run(self, settings: EpisodicSettings, *, strip_names: bool, time_mode: str, route: bool) -> dict[str, Any]:
        board = Scoreboard()
        row = 0
        for c in self.benchmark.conversations:
            store = InMemoryRecordStore()
            store.ensure_collection("e", dim=self.embedder.dim)
            memory = EpisodicMemory("ablation", store=store, collection="e", settings=settings,
                                    route=self.route if route else None)
            for s in c.sessions:
                row += record_session(memory, s, self.vectors[row:], self._embed_passages)
            questions = [q for q in c.questions if q.category != "adversarial"]
            dense = [memory.dense_query(q.question) if strip_names else q.question for q in questions]
            for q, vector in zip(questions, self._embed_queries(dense), strict=True):
                ref = reference_time(c, q)
                read = resolve_time_range if time_mode == "whole" else question_time
                found = read(q.question, ref) if ref and time_mode != "none" else None
                options: dict[str, Any] = {}
                text = q.question
                if found and time_mode in ("soft", "whole"):
                    options["prefer"] = (found.start, found.end)
                elif found and time_mode == "hard":
                    options["start"], options["end"] = found.start, found.end
                    text = strip_time_expression(q.question, found)
                hits = memory.search(vector, query_text=text, top_k=40, routed_query=memory.routed_query(q.question),
                                     **options)
                board.add(q.category, q.evidence, [h.id for h in hits if h.kind == "turn"][:20])
        return board.report([1, 5, 10, 20])


ROWS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("Strata defaults", {}, {}),
    ("− second model for non-Latin turns (embedding.script_route null: MiniLM alone)", {}, {"route": False}),
    ("− passages of long turns (a turn is one text, as before)", {"passage_chars": 10**9}, {}),
    ("− passages' vectors (passage_vectors_max 0: found by their words only)", {"passage_vectors_max": 0}, {}),
    ("− newest fact first (supersede_cosine 0)", {"supersede_cosine": 0}, {}),
    ("passages' cosines as the turn's when better (passage_dense_weight 1)", {"passage_dense_weight": 1.0}, {}),
    ("passages' cosines at a quarter weight (passage_dense_weight 0.25)", {"passage_dense_weight": 0.25}, {}),
    ("passages' cosines not used (passage_dense_weight 0)", {"passage_dense_weight": 0}, {}),
    ("− query embedded with the speaker names in it", {}, {"strip_names": False}),
    ("plural folding instead of Snowball stems (the lexical terms before)", {}, {"plural_folding": True}),
    ("numbers as their digits, leading zeros kept (the lexical terms before)", {}, {"digits_as_written": True}),
    ("− speaker-aware factor (speaker_boost 0)", {"speaker_boost": 0}, {}),
    ("− neighbour-aware vectors (context_neighbour_weight 0)", {"context_neighbour_weight": 0}, {}),
    ("− neighbour-aware BM25 (lexical_context_weight 0)", {"lexical_context_weight": 0}, {}),
    ("− neighbour-aware cosines (dense_context_weight 0)", {"dense_context_weight": 0}, {}),
    ("neighbour-aware cosines over 1 turn either side", {"dense_context_window": 1}, {}),
    ("neighbour-aware cosines over 8 turns either side", {"dense_context_window": 8}, {}),
    ("neighbour-aware BM25 over 1 turn either side", {"lexical_context_window": 1}, {}),
    ("neighbour-aware BM25 over 8 turns either side", {"lexical_context_window": 8}, {}),
    ("− BM25 path (fusion_lexical_weight 0)", {"fusion_lexical_weight": 0}, {}),
    ("+ graph path, weight 0.1 (fusion_graph_weight)", {"fusion_graph_weight": 0.1}, {}),
    ("+ graph path, weight 0.2", {"fusion_graph_weight": 0.2}, {}),
    ("+ graph path, weight 0.4", {"fusion_graph_weight": 0.4}, {}),
    ("− time preference (no time expressions)", {}, {"time_mode": "none"}),
    ("time expression as a hard filter instead", {}, {"time_mode": "hard"}),
    ("− time a turn speaks of (time_mentioned false: only when it was said)", {"time_mentioned": False}, {}),
    ("time read off the whole question, not its asking sentences", {}, {"time_mode": "whole"}),
    ("fusion by weighted RRF instead (fusion_mode rrf; the default before)", {"fusion_mode": "rrf"}, {}),
    ("fusion by scores min-max over the candidates (fusion_mode minmax)", {"fusion_mode": "minmax"}, {}),
    ("+ dense feedback, 3 docs, weight 0.5 (dense_feedback_docs)", {"dense_feedback_docs": 3}, {}),
    ("+ dense feedback, 3 docs, weight 0.75", {"dense_feedback_docs": 3, "dense_feedback_weight": 0.75}, {}),
    ("+ dense feedback, 3 docs, weight 0.5, with RRF", {"dense_feedback_docs": 3, "fusion_mode": "rrf"}, {}),
    ("+ lexical feedback, 3 docs, 10 terms, weight 0.5 (lexical_feedback_docs)", {"lexical_feedback_docs": 3}, {}),
    ("+ lexical feedback, 3 docs, 10 terms, weight 0.25",
     {"lexical_feedback_docs": 3, "lexical_feedback_weight": 0.25}, {}),
    ("+ lexical feedback, 3 docs, 10 terms, weight 0.5, with RRF",
     {"lexical_feedback_docs": 3, "fusion_mode": "rrf"}, {}),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_bench.evaluation.ablation", description=__doc__)
    parser.add_argument("dataset")
    parser.add_argument("--format", choices=["locomo", "strata"])
    parser.add_argument("--rows", help="comma-separated row numbers to run (0: the defaults); default all")
    args = parser.parse_args(argv)
    wanted = {int(n) for n in args.rows.split(",")} if args.rows else set(range(len(ROWS)))
    benchmark = redacted(load_benchmark(args.dataset, args.format))
    ablation = _Ablation(benchmark, OnnxMiniLMEmbedder(threads=2))
    categories = sorted({q.category for c in benchmark.conversations for q in c.questions} - {"adversarial"})
    print("| configuration | R@1 | R@5 | R@10 | R@20 | " + " | ".join(categories) + " (R@10) |")
    print("|---" * (5 + len(categories)) + "|")
    for n, (label, overrides, options) in enumerate(ROWS):
        if n not in wanted:
            continue
        # model_copy: a row may set a value the settings' bounds refuse (passage_chars 10**9: no cut)
        report = ablation.run(EpisodicSettings().model_copy(update=overrides), **options)
        o = report["overall"]
        cells = " | ".join(f"{report['categories'][c]['recall@10']:.3f}" for c in categories)
        print(f"| {label} | {o['recall@1']:.3f} | {o['recall@5']:.3f} | {o['recall@10']:.3f} | {o['recall@20']:.3f} "
              f"| {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
