"""``python -m strata_bench.semantic``: how fast the semantic layer indexes
and searches, at ~1k and ~50k children per tenant, in one run.

It drives :class:`~strata.semantic.memory.SemanticMemory` in-process, the way the
semantic actor does (prepare, embed, write, index), against a milvus-lite
server it starts on a free loopback port and kills at the end. No Ray, no
Serve. The corpus is LoCoMo (``../shared/bench/locomo10.json``), one Markdown
document per session, ``**Speaker**: text`` paragraphs; the queries are its
questions.

1. Index throughput of a ~1k-child tenant, end to end and per stage, with the
   embedder's own throughput on the same child texts as the floor.
2. Search latency of that tenant, fused and per path, without and with the
   query embedding.
3. A ~50k-child tenant. Embedding 50k 256-token children takes about an hour
   here, so the tenant is built from a pool of real children embedded once
   (the whole corpus, ~1.3k), its documents re-used under new ids with their
   chunks, entities and vectors; the output says how many texts are distinct.
   Write, index, a cold :meth:`~strata.semantic.memory.SemanticMemory.load`, the
   memory it takes, and the latency table again.

Figures are single runs on a shared machine; latencies are percentiles over
the queries, by :func:`strata_bench.stats.percentile`.
"""

from strata_bench.semantic.command import main
from strata_bench.semantic.corpus import locomo_corpus
from strata_bench.semantic.measure import SEARCH_PATHS, run
from strata_bench.semantic.report import format_report

__all__ = ["SEARCH_PATHS", "format_report", "locomo_corpus", "main", "run"]
