"""The stack a benchmark over HTTP measures, chosen from its options (:mod:`strata_bench.target`).

``--url`` / ``--api-key`` name a running Strata; else ``--data-dir`` names the stack
``strata up`` runs there; else a scratch stack is started on free ports in a temporary
directory and stopped afterwards. ``strata bench`` and its ``contention`` and ``fanout``
sub-benchmarks are given :func:`target` to find their stack with: the benchmarks know
the stack only as :class:`strata_bench.target.MeasuredStack`.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from strata.config import StrataSettings, load_settings
from strata_bench.target import Target
from strata_cli.options import store_overrides
from strata_cli.ports import free_ports
from strata_cli.stack import Stack

__all__ = ["scratch_stack", "target"]


@contextmanager
def scratch_stack(config: str | None, milvus: dict[str, Any] | None = None) -> Iterator[Target]:
    """A stack on free ports in a temporary directory, stopped (``down``) on exit.

    ``milvus``: settings of a Milvus server to store in (``--milvus-uri``), where the run's
    rows go to collections of their own (``bench_<random>``), dropped afterwards: a server
    may hold a deployment's collections under the default prefix."""
    server = dict(milvus or {})
    if server:
        server["collection_prefix"] = "bench_" + uuid.uuid4().hex[:8]
    serve_port, milvus_port, gcs_port = free_ports(3)
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as tmp:
        settings = load_settings(
            config,
            data_dir=Path(tmp) / "data",
            serve={"port": serve_port},
            milvus={"port": milvus_port, **server},
            ray={"gcs_port": gcs_port},
        )
        stack = Stack(settings, say=lambda m: print(f"  {m}", flush=True))
        print(f"starting a scratch stack in {tmp} (about a minute)", flush=True)
        key = stack.up()
        try:
            yield Target(stack.url, key, stack, True)
        finally:
            stack.down()
            if server:
                _drop_collections(settings)


def _drop_collections(settings: StrataSettings) -> None:
    """The scratch run's collections on the server, dropped."""
    from pymilvus import MilvusClient

    m = settings.milvus
    client = MilvusClient(uri=m.address, token=m.token, db_name=m.db_name, timeout=m.timeout_s)
    try:
        for name in client.list_collections():
            if name.startswith(m.collection_prefix + "_"):
                client.drop_collection(name)
    finally:
        client.close()


@contextmanager
def target(args: argparse.Namespace) -> Iterator[Target]:
    """``--url``/``--api-key``, else the stack ``strata up`` runs in ``--data-dir``, else a scratch stack."""
    if args.url:
        if not args.api_key:
            raise SystemExit("strata bench: --url needs --api-key")
        yield Target(args.url, args.api_key, None, False)
        return
    if args.data_dir:
        settings = load_settings(args.config, data_dir=Path(args.data_dir))
        recorded = Stack.recorded(settings.data_dir, say=lambda m: None)
        if recorded is not None and recorded.healthy():
            print(f"measuring the stack at {recorded.url}", flush=True)
            yield Target(recorded.url, recorded.up(), recorded, False)
            return
    with scratch_stack(args.config, store_overrides(args).get("milvus")) as found:
        yield found
