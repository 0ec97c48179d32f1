"""``python -m strata_bench.semantic``: its options; starts milvus-lite, runs, prints the report."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from strata_bench.semantic.corpus import DEFAULT_DATASET, locomo_corpus
from strata_bench.semantic.measure import run
from strata_bench.semantic.report import format_report

__all__ = ["main"]

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the benchmark against a scratch milvus-lite server, print the tables."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m strata_bench.semantic",
        description="Index throughput and search latency of the semantic layer at ~1k and ~50k children.",
    )
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="LoCoMo locomo10.json")
    parser.add_argument("--children-small", type=int, default=1000)
    parser.add_argument("--children-large", type=int, default=50_000)
    parser.add_argument(
        "--pool-children", type=int, default=None, help="distinct children for the large tenant (default: whole corpus)"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="embedder threads")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = parser.parse_args(argv)
    if not args.dataset.is_file():
        parser.error(f"{args.dataset} does not exist (LoCoMo's locomo10.json)")

    from strata.providers.embedder import OnnxMiniLMEmbedder
    from strata.store.milvus import MilvusRecordStore
    from strata_bench.scratch_milvus import scratch_milvus

    # Thread-count variables change the numpy (dense) and onnxruntime figures: part of the command.
    env = "".join(f"{v}={shlex.quote(os.environ[v])} " for v in _THREAD_VARS if v in os.environ)
    command = env + shlex.join(["python", "-m", "strata_bench.semantic", *argv])
    print("$ " + command, flush=True)
    wall = time.perf_counter()
    load_before = os.getloadavg()
    documents, questions = locomo_corpus(args.dataset)
    queries = questions[: args.queries]
    embedder = OnnxMiniLMEmbedder(threads=args.threads)
    with scratch_milvus() as (uri, pid):
        store = MilvusRecordStore(uri, timeout_s=60)
        result = run(
            documents,
            queries,
            store=store,
            embedder=embedder,
            children_small=args.children_small,
            children_large=args.children_large,
            pool_children=args.pool_children,
            milvus_pid=pid,
            say=lambda m: print(f"[{time.perf_counter() - wall:6.0f} s] {m}", file=sys.stderr, flush=True),
        )
    result["wall_s"] = time.perf_counter() - wall
    result["load_average"] = {"start": load_before, "end": os.getloadavg()}
    result["command"] = command
    print(format_report(result))
    la = result["load_average"]
    print(
        f"\nwall time {result['wall_s']:.0f} s on {os.cpu_count()} cores; 1-min load average {la['start'][0]:.1f} "
        f"at start, {la['end'][0]:.1f} at end (other work shares the machine: figures are noisy)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0
