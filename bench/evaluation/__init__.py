"""Quality evaluations: benchmark loaders, recall metrics, turn-level baselines, a chart,
and the runs built on them.

The runs, each a module of its own (not imported here):

- :mod:`~strata_bench.evaluation.retrieval`: ``strata eval retrieval``, Strata against BM25,
  dense and RRF baselines on a conversation benchmark;
- :mod:`~strata_bench.evaluation.answers`: ``strata eval answers``, LoCoMo's answer protocol
  (Strata's context, an LLM's answer, an LLM judge's label; the calls in
  :mod:`~strata_bench.evaluation.chat`);
- :mod:`~strata_bench.evaluation.chunking`: ``strata eval chunking``, chunking strategies and
  retrieval paths of the semantic layer on documents made from a benchmark
  (:mod:`~strata_bench.evaluation.documents`);
- :mod:`~strata_bench.evaluation.ablation`: ``python -m strata_bench.evaluation.ablation``,
  the episodic retrieval ablation behind ``docs/retrieval-ablation.md``;
- :mod:`~strata_bench.evaluation.bm25_compare`: ``python -m strata_bench.evaluation.bm25_compare``,
  which BM25 the semantic layer uses.

Plain Python, like the rest of :mod:`strata`: no Ray, no Milvus. ``bm25s`` and
``matplotlib`` are imported only by the baseline and the chart that need them.
"""

from strata_bench.evaluation.baselines import (
    BM25Retriever,
    DenseRetriever,
    MemoEmbedder,
    Retriever,
    RRFRetriever,
    turn_document,
    words_and_bigrams,
)
from strata_bench.evaluation.datasets import (
    LOCOMO_CATEGORIES,
    Benchmark,
    EvalConversation,
    EvalQuestion,
    EvalSession,
    EvalTurn,
    load_benchmark,
    load_locomo,
    load_strata,
    parse_locomo_datetime,
    reference_time,
)
from strata_bench.evaluation.metrics import Scoreboard, any_at_k, recall_at_k
from strata_bench.evaluation.plot import plot_k, plot_results

__all__ = [
    "LOCOMO_CATEGORIES",
    "BM25Retriever",
    "Benchmark",
    "DenseRetriever",
    "EvalConversation",
    "EvalQuestion",
    "EvalSession",
    "EvalTurn",
    "MemoEmbedder",
    "RRFRetriever",
    "Retriever",
    "Scoreboard",
    "any_at_k",
    "load_benchmark",
    "load_locomo",
    "load_strata",
    "parse_locomo_datetime",
    "plot_k",
    "plot_results",
    "recall_at_k",
    "reference_time",
    "turn_document",
    "words_and_bigrams",
]
