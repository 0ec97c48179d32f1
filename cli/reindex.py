"""``strata reindex``: embed every stored vector again with the configured embedder.

Run it after changing ``embedding.provider`` (or the model): until then the stack refuses
to start on vectors of the old model. It runs with the stack down, since it rewrites rows
the layer actors hold in memory: it refuses while the stack of ``--data-dir`` is up, starts
the embedded milvus-lite if needed (and stops it again), and uses the settings of
``--config``, the environment and the defaults, the ones the next ``strata up`` will use.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

__all__ = ["add_arguments"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", help="re-embed one tenant only (the stack starts once every tenant is done)")
    parser.add_argument("--data-dir", default=".strata", help="the stack's data dir (default ./.strata)")
    parser.add_argument("--config", default=argparse.SUPPRESS, help="YAML settings (as `strata --config`)")
    parser.set_defaults(fn=_cmd_reindex)


def _cmd_reindex(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from strata.config import load_settings
    from strata.reindex import reindex
    from strata_cli.errors import StackError
    from strata_cli.stack import Stack

    settings = load_settings(args.config, data_dir=Path(args.data_dir))
    stack = Stack(settings, say=lambda m: print(m, flush=True))
    if stack.ray_running() or stack.healthy(timeout_s=2):
        raise StackError(
            "the stack is up: stop it first (strata down --data-dir "
            f"{shlex.quote(str(stack.data_dir))}); reindex rewrites rows its layers hold in memory"
        )
    stack.plan_ports()
    ours = not settings.milvus.uri and stack.milvus_pid() is None
    stack.ensure_milvus()
    bars: dict[str, Any] = {}

    def progress(layer: str, done: int, total: int) -> None:
        bar = bars.get(layer)
        if bar is None:
            bar = bars[layer] = tqdm(total=total, desc=layer, unit="vector")
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        report = reindex(stack.settings, tenant=args.tenant, progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
        if ours:
            stack.down()
    made = sum(report.vectors.values())
    print(f"re-embedded {made} vectors of {report.tenants} tenant layer(s) with {report.model} "
          f"in {report.seconds:.1f} s")
    for collection, tenants in report.remaining.items():
        print(f"  {collection}: {len(tenants)} tenant(s) still on another model; run `strata reindex` "
              "without --tenant to finish")
    return 1 if report.remaining else 0
