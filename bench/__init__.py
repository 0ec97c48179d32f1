"""Strata's benchmarks and evaluations: every figure the README publishes, and the command behind it.

Speed, over HTTP against a running stack (``strata bench``):

- :mod:`~strata_bench.service`: ``strata bench`` -- latency, ingest and scale, each against a floor
  measured in the same run;
- :mod:`~strata_bench.fanout`: ``strata bench contention`` and ``strata bench fanout``;
- :mod:`~strata_bench.target`: which stack they measure (``--url``, ``--data-dir`` or a scratch one).

Speed, in-process: :mod:`~strata_bench.semantic` (``python -m strata_bench.semantic``).

Quality: :mod:`~strata_bench.evaluation` (``strata eval retrieval``, ``strata eval chunking``, the
retrieval ablation, the BM25 comparison) and :mod:`~strata_bench.pii` (``strata bench pii``).

:mod:`~strata_bench.stats` is the one definition of a percentile and of process memory that
every figure uses; :mod:`strata_bench.scripts` holds the measurement scripts behind the
README's milvus-lite figures.
"""

__all__: list[str] = []
