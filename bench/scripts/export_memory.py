"""What exporting a tenant costs as it grows: the exporting process's peak memory, and the time.

For each size (default 10,000, 50,000 and 100,000 turns) a scratch tenant gets that many turns,
written straight through the episodic layer's own write (:func:`seed`: the rows a recorded turn
makes, with random vectors instead of embeddings, which the export does not read; through the
API this machine records ~30 turns a second, and 100k would take an hour). Then:

- ``strata export TENANT --out FILE`` (the in-cluster client) runs as a child process: the
  first read of the tenant, so its time includes the episodic actor loading it from the store;
- ``GET /v1/export`` read through :meth:`StrataClient.export` runs as another child, counting
  the parsed records (the tenant now loaded).

Each child's peak resident memory (its ``VmHWM``, read every 20 ms) and wall time are reported with
the file's records and size. Both stream a page at a time (:mod:`strata_actors.orchestration.export`),
so their peaks should not grow with the tenant; the layer actors hold the tenant in memory as
they always do (not measured here).

Everything runs on a scratch stack (``strata up`` on free ports in a temporary directory,
``strata down`` afterwards, even when a step fails). Run from the repository root::

    python -m strata_bench.scripts.export_memory [SIZE ...]      # default 10000 50000 100000
"""
from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from strata.config import load_settings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import TurnInput
from strata.store.layout import open_store
from strata_bench.stats import rss_mib

__all__ = ["export_http_once", "export_once", "main", "seed"]

STRATA = [sys.executable, "-m", "strata_cli.main"]
SESSION_TURNS = 1000
BATCH = 250
TOPICS = ("the Lisbon trip", "the quarterly budget", "the garden shed", "Bruno's birthday", "the train to Porto",
          "the heron survey", "the kettle recall", "the roof repair", "the chess club", "the allotment rota")


def _turn(n: int) -> dict[str, Any]:
    topic = TOPICS[n % len(TOPICS)]
    item = n * 7919 % 100003
    return {"turn_id": f"t{n:07d}", "user": f"Note {n} about {topic}: item {item} is due on day {n % 28 + 1}.",
            "agent": f"Noted item {item} for {topic}."}


def _strata(*args: str, data_dir: Path) -> str:
    command = [*STRATA, *args, "--data-dir", str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603  our own command, no shell
    if done.returncode != 0:
        raise RuntimeError(f"strata {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done.stdout


def seed(tenant: str, turns: int, *, data_dir: Path) -> float:
    """``turns`` turns written into ``tenant``'s episodic rows of the stack at ``data_dir``,
    straight through the episodic layer's own write (:meth:`EpisodicMemory.record`: the rows a
    recorded turn makes), with random unit vectors instead of embeddings; returns the seconds
    taken. The stack's episodic actor loads them from the store on the export's first read,
    as it loads any tenant it does not hold."""
    settings = load_settings(None, data_dir=data_dir)
    store, names = open_store(settings)
    layer = EpisodicMemory(tenant, store=store, collection=names.episodic, settings=settings.episodic,
                           ttl=settings.ttl)
    rng = np.random.default_rng(0)
    now = datetime.now(UTC)
    started = time.perf_counter()
    for first in range(0, turns, BATCH):
        numbers = range(first, min(first + BATCH, turns))
        batch = layer.prepare(f"s{first // SESSION_TURNS:04d}", [TurnInput(**_turn(n)) for n in numbers], now=now)
        vectors = rng.standard_normal((len(batch), names.dim)).astype(np.float32)
        layer.record(batch, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return time.perf_counter() - started


def export_once(tenant: str, out: Path, *, data_dir: Path) -> dict[str, float]:
    """``strata export tenant --out out`` as a child: its wall seconds, peak RSS (MiB), records and file MiB."""
    seconds, peak, _ = _child([*STRATA, "export", tenant, "--out", str(out), "--data-dir", str(data_dir)])
    with out.open(encoding="utf-8") as lines:
        records = sum(1 for _ in lines) - 2  # the header and the end line
    return {"seconds": seconds, "peak_rss_mib": peak, "records": records, "file_mib": out.stat().st_size / 2**20}


def export_http_once(url: str, key: str) -> dict[str, float]:
    """``GET /v1/export`` through :meth:`StrataClient.export` in a child: its seconds, peak RSS and records."""
    env = {**os.environ, "STRATA_URL": url, "STRATA_API_KEY": key}
    seconds, peak, said = _child([sys.executable, "-m", "strata_bench.scripts.export_memory", "--client"], env)
    return {"seconds": seconds, "peak_rss_mib": peak, "records": float(said.split()[-1])}


def _free_ports(count: int) -> list[int]:
    """Free ports below the kernel's ephemeral range, as ``strata_cli.ports.free_ports`` draws
    them (a port from that range can be taken before the stack binds it)."""
    probes: list[socket.socket] = []
    try:
        for port in random.sample(range(20000, 30000), 10000):
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                probe.close()
                continue
            probes.append(probe)
            if len(probes) == count:
                return [int(p.getsockname()[1]) for p in probes]
        raise RuntimeError("no free ports between 20000 and 30000")
    finally:
        for probe in probes:
            probe.close()


def _client_export() -> None:
    """The HTTP child: read the export of ``$STRATA_API_KEY``'s tenant at ``$STRATA_URL``, print its records."""
    from strata_serve.client import StrataClient

    with StrataClient(os.environ["STRATA_URL"], os.environ["STRATA_API_KEY"], timeout_s=300) as client:
        print(sum(1 for item in client.export() if item.kind not in ("header", "end")))


def _child(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``command``: its wall seconds, peak RSS in MiB and output (raises if it failed).

    The peak is the child's own ``VmHWM``, read every 20 ms until it exits (the high-water mark
    of its memory since its exec; ``ru_maxrss`` from ``wait4`` would also count the copy of this
    process it was forked from)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as said:
        child = subprocess.Popen(  # noqa: S603  our own command, no shell
            command, stdout=said, stderr=subprocess.DEVNULL, text=True, env=env)
        peak = 0.0
        while child.poll() is None:
            peak = max(peak, rss_mib(child.pid, peak=True))
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        said.seek(0)
        output = said.read()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} exited {child.returncode}: {output}")
    return seconds, peak, output


def main(sizes: list[int]) -> None:
    """Seed, export and report each of ``sizes`` (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="strata-export-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        port, milvus, gcs = _free_ports(3)
        os.environ.update({"STRATA_MILVUS__PORT": str(milvus), "STRATA_RAY__GCS_PORT": str(gcs)})
        _strata("up", "--port", str(port), data_dir=data_dir)
        url = f"http://127.0.0.1:{port}"
        rows = []
        try:
            for size in sizes:
                tenant = f"export-bench-{size}"
                key = _strata("keys", "create", tenant, data_dir=data_dir).strip().splitlines()[-1]
                # In a child: the layer it fills holds the tenant, and a child forked from a
                # process that large would start its export already that large.
                seed_s, _, _ = _child([sys.executable, "-m", "strata_bench.scripts.export_memory", "--seed", tenant,
                                       str(size), str(data_dir)])
                print(f"{size} turns written in {seed_s:.0f} s", flush=True)
                cli = export_once(tenant, Path(tmp) / f"{tenant}.jsonl", data_dir=data_dir)
                http = export_http_once(url, key)
                rows.append((size, cli, http))
                print(f"  strata export: {cli['records']:.0f} records ({cli['file_mib']:.1f} MiB) in "
                      f"{cli['seconds']:.1f} s, peak RSS {cli['peak_rss_mib']:.0f} MiB; GET /v1/export through "
                      f"StrataClient.export: {http['records']:.0f} records in {http['seconds']:.1f} s, "
                      f"peak RSS {http['peak_rss_mib']:.0f} MiB", flush=True)
        finally:
            _strata("down", data_dir=data_dir)
    print("\n| turns | records | file MiB | `strata export` s (cold) | its peak RSS MiB "
          "| `StrataClient.export()` s | its peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, cli, http in rows:
        print(f"| {size:,} | {cli['records']:,.0f} | {cli['file_mib']:.1f} | {cli['seconds']:.1f} | "
              f"{cli['peak_rss_mib']:.0f} | {http['seconds']:.1f} | {http['peak_rss_mib']:.0f} |")

if __name__ == "__main__":
    if sys.argv[1:] == ["--client"]:
        _client_export()
    elif sys.argv[1:2] == ["--seed"]:
        seed(sys.argv[2], int(sys.argv[3]), data_dir=Path(sys.argv[4]))
    else:
        main([int(a) for a in sys.argv[1:]] or [10_000, 50_000, 100_000])
