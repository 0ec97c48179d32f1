"""``strata bench depth``: one tenant grown to many turns, measured at each depth (issue 42).

At each step the tenant's turns are topped up to the step's count through the HTTP batch route
(sessions of 100 turns, two writers, embedded by the stack's own model), then:

- **ingest**: turns/s of the step's new turns, and with the wait for their background summaries;
- **warm latency**: ``calls`` context calls (task type ``planning``) and as many episodic
  searches, one client, one after the other;
- **RSS and cold load**: the episodic shard that owns the tenant is killed and Ray restarts it
  empty; its process's RSS (found by the actor's pid) is read before and after the tenant's first
  episodic search, which is timed (the cold load from the store; a context call would answer
  without the layer after ``context.layer_timeout_s``). RSS per turn is the difference over the
  turns; the report also gives the difference between steps per turn added;
- **move wait**: the episodic layer grown by one shard, which moves the tenant (its name is chosen
  so that it does), then shrunk back, which moves it home; during each, a reader searches the
  tenant every ``reader_pause_s``, retrying a failed read, and the longest it waited for one
  read's answer is the move's wait (the new shard's start, the fence, the cold load).

The restart and the moves kill and add actors: they run only on a stack this command started.
The figures are single runs; the machine's load average at the start and end is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strata_bench.service.latency import cpu_ms_per_unit, stack_cpu_s
from strata_bench.service.scale import stack_pids, wait_for_summaries
from strata_bench.service.sizes import SESSION_TURNS
from strata_bench.service.text import TextSource, make_sessions
from strata_bench.service.timing import Ticker, pool, summary
from strata_bench.stats import median, rss_mib
from strata_bench.target import RAW, FindTarget, MeasuredStack, Target
from strata_bench.target import add_arguments as add_target_arguments

__all__ = [
    "DEFAULT_OUT",
    "DEFAULT_STEPS",
    "add_arguments",
    "format_table",
    "holds_until",
    "longest_wait_ms",
    "moving_tenant",
    "parse_steps",
    "plot",
    "run",
    "summarize",
]

DEFAULT_STEPS = "1k,10k,30k,100k"
#: Outside the repository: the reports and plots are not committed.
DEFAULT_OUT = Path(tempfile.gettempdir()) / "strata-bench-depth"
#: How much deeper a tenant may be before its warm context p95 stops "holding": within this
#: factor of the first step's.
HOLD_FACTOR = 2.0
_WRITE_ATTEMPTS = 5
_STEP = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kK]?)\s*$")


# -- pure parts ------------------------------------------------------------------------


def parse_steps(text: str) -> list[int]:
    """``"1k,10k,30k,100k"`` as turn counts, ascending.

    Raises:
        ValueError: a step that is no positive count, or steps not strictly ascending.
    """
    steps = []
    for part in text.split(","):
        found = _STEP.match(part)
        if found is None:
            raise ValueError(f"a step is a count of turns such as 5000 or 5k, not {part.strip()!r}")
        steps.append(round(float(found.group(1)) * (1000 if found.group(2) else 1)))
    if any(s < 1 for s in steps) or any(b <= a for a, b in itertools.pairwise(steps)):
        raise ValueError(f"steps must be positive and strictly ascending: {steps}")
    return steps


def moving_tenant(prefix: str, shards: int, owner: Any) -> str:
    """The first tenant ``prefix-N`` that moves to the new shard when a layer of ``shards`` grows
    by one (``owner(tenant, n)`` is the placement: :func:`strata_actors.placement.owner_shard`),
    so that growing and shrinking back each move it."""
    n = 0
    while owner(f"{prefix}-{n}", shards + 1) != shards:
        n += 1
    return f"{prefix}-{n}"


def longest_wait_ms(reads: Sequence[tuple[float, float]], since: float) -> float | None:
    """The longest a reader waited for one read's answer, from its first attempt (failed
    attempts retried), among the reads answered at or after ``since``; ``reads`` are
    ``(first attempt, answer)`` times in seconds. None when none was answered then."""
    waits = [answered - started for started, answered in reads if answered >= since]
    return round(max(waits) * 1000, 1) if waits else None


def holds_until(steps: Sequence[dict[str, Any]], *, factor: float = HOLD_FACTOR) -> int | None:
    """The deepest step (turns) up to which every step's warm context p95 is within ``factor``
    of the first step's; None without steps."""
    deepest = None
    base = steps[0]["context"]["p95_ms"] if steps else None
    for step in steps:
        p95 = step["context"]["p95_ms"]
        if base is None or p95 is None or p95 > factor * base:
            break
        deepest = step["turns"]
    return deepest


def _per_turn_kib(mib: float | None, turns: int) -> float | None:
    return None if mib is None or turns <= 0 else round(mib * 1024 / turns, 2)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """The report: ``raw`` (what :func:`_measure` returns) with a row of figures per step, the
    RSS added per turn between steps, and up to where the warm context p95 holds."""
    rows, previous = [], None
    for step in raw["steps"]:
        rss = step.get("rss") or {}
        loaded = rss.get("loaded_mib")
        move = step.get("move") or {}
        row = {
            "turns": step["turns"],
            "ingest_turns_per_s": step["ingest"]["turns_per_s"],
            "context_p50_ms": step["context"]["p50_ms"],
            "context_p95_ms": step["context"]["p95_ms"],
            "search_p50_ms": step["search"]["p50_ms"],
            "search_p95_ms": step["search"]["p95_ms"],
            "rss_per_turn_kib": rss.get("per_turn_kib"),
            "rss_added_per_turn_kib": None,
            "cold_first_search_ms": (step.get("cold") or {}).get("first_search_ms"),
            "move_wait_grow_ms": (move.get("grow") or {}).get("longest_wait_ms"),
            "move_wait_shrink_ms": (move.get("shrink") or {}).get("longest_wait_ms"),
        }
        if previous is not None and loaded is not None and previous[1] is not None:
            row["rss_added_per_turn_kib"] = _per_turn_kib(loaded - previous[1], step["turns"] - previous[0])
        rows.append(row)
        previous = (step["turns"], loaded)
    return {**raw, "rows": rows, "hold_factor": HOLD_FACTOR,
            "context_p95_holds_to_turns": holds_until(raw["steps"])}


_COLUMNS = (
    ("turns", "turns", "{:,}"),
    ("ingest/s", "ingest_turns_per_s", "{:.1f}"),
    ("ctx p50", "context_p50_ms", "{:.0f} ms"),
    ("ctx p95", "context_p95_ms", "{:.0f} ms"),
    ("search p50", "search_p50_ms", "{:.0f} ms"),
    ("RSS/turn", "rss_per_turn_kib", "{:.1f} KiB"),
    ("added/turn", "rss_added_per_turn_kib", "{:.1f} KiB"),
    ("cold", "cold_first_search_ms", "{:,.0f} ms"),
    ("move +1", "move_wait_grow_ms", "{:,.0f} ms"),
    ("move -1", "move_wait_shrink_ms", "{:,.0f} ms"),
)


def format_table(doc: dict[str, Any]) -> str:
    """The rows as a Markdown table, and up to where the warm context p95 holds."""
    lines = ["| " + " | ".join(name for name, _, _ in _COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for row in doc["rows"]:
        cells = ["–" if row[key] is None else fmt.format(row[key]) for _, key, fmt in _COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    holds = doc["context_p95_holds_to_turns"]
    lines.append(f"warm context p95 within {doc['hold_factor']:g}x of the first step's up to "
                 f"{'no step' if holds is None else f'{holds:,} turns'} (of {doc['rows'][-1]['turns']:,} measured)"
                 if doc["rows"] else "no step measured")
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> None:
    """Four panels against turns (log scale): latency, ingest, RSS per turn, cold load and move waits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["rows"]
    turns = [r["turns"] for r in rows]

    def series(key: str) -> list[float]:
        return [float("nan") if r[key] is None else r[key] for r in rows]

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = (
        (axes[0][0], "warm latency, one client (ms)",
         (("context_p50_ms", "context p50"), ("context_p95_ms", "context p95"), ("search_p50_ms", "search p50"))),
        (axes[0][1], "ingest (turns/s)", (("ingest_turns_per_s", "HTTP batch"),)),
        (axes[1][0], "episodic shard RSS per turn (KiB)",
         (("rss_per_turn_kib", "loaded / turns"), ("rss_added_per_turn_kib", "added since the step before"))),
        (axes[1][1], "waits (ms)", (("cold_first_search_ms", "first search after a restart"),
                                    ("move_wait_grow_ms", "move wait, shards +1"),
                                    ("move_wait_shrink_ms", "move wait, shards -1"))),
    )
    for ax, title, lines in panels:
        for key, label in lines:
            ax.plot(turns, series(key), marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("turns in the tenant")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    if rows and rows[0]["context_p95_ms"] is not None:
        axes[0][0].axhline(doc["hold_factor"] * rows[0]["context_p95_ms"], color="#999999", ls="--", lw=1)
    load = doc["machine"]
    fig.suptitle(f"strata bench depth at {doc.get('commit') or '?'}: {load['cpu_count']} cores, load "
                 f"{load['load_average_start'][0]:.1f} → {(load.get('load_average_end') or [float('nan')])[0]:.1f}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- measuring ------------------------------------------------------------------------


async def _ingest(url: str, key: str, sessions: list[tuple[str, list[dict[str, Any]]]], *,
                  pids: Any, writers: int = 2) -> dict[str, Any]:
    """The sessions' turns over ``writers`` batch writers; a batch that failed is sent again
    (its turns carry ids: those that landed are answered "replayed")."""
    from strata.errors import InvalidInput, NotFound, Unauthorized
    from strata_serve.client import AsyncStrataClient

    total = sum(len(t) for _, t in sessions)
    done, retries = [0], []
    clients = [AsyncStrataClient(url, key, timeout_s=300, **RAW) for _ in range(writers)]
    tick = Ticker("ingest", total, "turns", every_s=30)

    async def write(item: tuple[str, list[dict[str, Any]]], n: int) -> None:
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                await clients[n].record_turns(item[0], item[1])
                break
            except (InvalidInput, NotFound, Unauthorized):
                raise
            except Exception as exc:
                if attempt == _WRITE_ATTEMPTS - 1:
                    raise
                retries.append(f"{type(exc).__name__}: {str(exc)[:120]}")
                await asyncio.sleep(2.0 * 2**attempt)
        done[0] += len(item[1])
        tick(done[0])

    before, started = stack_cpu_s(pids), time.perf_counter()
    try:
        await pool(sessions, writers, write)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    seconds = time.perf_counter() - started
    cpu_per_turn, _ = cpu_ms_per_unit(before, stack_cpu_s(pids), total)
    return {"turns": total, "seconds": round(seconds, 1), "turns_per_s": round(total / seconds, 1),
            "stack_cpu_ms_per_turn": cpu_per_turn, "retries": retries}


async def _warm_calls(url: str, key: str, queries: list[str], session: str, calls: int) -> dict[str, Any]:
    """``calls`` context calls then as many episodic searches, one after the other (after two of each unmeasured)."""
    from strata_serve.client import AsyncStrataClient

    context_ms, search_ms, incomplete = [], [], 0
    async with AsyncStrataClient(url, key, timeout_s=120, **RAW) as client:
        for n in range(calls + 2):
            t0 = time.perf_counter()
            result = await client.build_context(queries[n % len(queries)], session, task_type="planning")
            if n >= 2:
                context_ms.append((time.perf_counter() - t0) * 1000)
                incomplete += bool(result.missing)
        for n in range(calls + 2):
            t0 = time.perf_counter()
            await client.search(queries[n % len(queries)], layers=["episodic"], top_k=10)
            if n >= 2:
                search_ms.append((time.perf_counter() - t0) * 1000)
    return {"context": {**summary(context_ms), "missing_a_layer": incomplete}, "search": summary(search_ms)}


def _pid(actor: Any) -> int:
    """Run inside the actor (``__ray_call__``): its process id."""
    return os.getpid()


class _Shards:
    """The bench's view into the episodic layer of a stack it started: the tenant's owner shard,
    its process, a restart, and a scale (the Ray calls are here, not in the measuring)."""

    def __init__(self, stack: MeasuredStack) -> None:
        from strata_actors.directory import Directory
        from strata_actors.router import LayerRouter

        stack.ensure_ray_client()
        self._settings = stack.settings
        self._router = LayerRouter(stack.settings)
        self._directory = Directory(stack.settings)

    async def count(self) -> int:
        return (await self._directory.placement("episodic")).shards

    async def owner(self, tenant: str) -> Any:
        await self._router.refresh()
        return self._router.handle("episodic", tenant)

    async def pid(self, tenant: str) -> int:
        return int(await (await self.owner(tenant)).__ray_call__.remote(_pid))

    async def restart_owner(self, tenant: str, *, timeout_s: float = 300.0) -> tuple[float, int]:
        """Kill the tenant's episodic shard (Ray restarts it empty); seconds until it answers, and its new pid."""
        import ray

        actor = await self.owner(tenant)
        old = await self.pid(tenant)
        started = time.perf_counter()
        ray.kill(actor, no_restart=False)
        while time.perf_counter() - started < timeout_s:
            await asyncio.sleep(0.5)
            try:
                pid = await asyncio.wait_for(self.pid(tenant), 30)
            except Exception:  # noqa: S112  still restarting
                continue
            if pid != old:
                return time.perf_counter() - started, pid
        raise RuntimeError(f"the episodic shard did not come back within {timeout_s:.0f} s")

    async def scale(self, shards: int) -> float:
        started = time.perf_counter()
        await self._directory.scale("episodic", shards)
        return time.perf_counter() - started


async def _move(shards: _Shards, url: str, key: str, queries: list[str], to: int, *,
                pause_s: float, after_s: float = 2.0, limit_s: float = 300.0) -> dict[str, Any]:
    """Scale the episodic layer to ``to`` shards while a reader searches the tenant every
    ``pause_s``; the reader's longest wait for an answer from the scale's start."""
    from strata_serve.client import AsyncStrataClient

    reads: list[tuple[float, float]] = []
    failures: list[str] = []
    stop = asyncio.Event()

    async def reader() -> None:
        async with AsyncStrataClient(url, key, timeout_s=120, **RAW) as client:
            n = 0
            while not stop.is_set():
                first = time.perf_counter()
                while not stop.is_set():
                    try:
                        await client.search(queries[n % len(queries)], layers=["episodic"], top_k=10)
                        reads.append((first, time.perf_counter()))
                        break
                    except Exception as exc:
                        failures.append(f"{type(exc).__name__}: {str(exc)[:120]}")
                        await asyncio.sleep(pause_s)
                n += 1
                await asyncio.sleep(pause_s)

    task = asyncio.ensure_future(reader())
    await asyncio.sleep(1.0)  # the reader's steady state before the change
    before = len(reads)
    since = time.perf_counter()
    try:
        scale_s = await shards.scale(to)
        scaled = time.perf_counter()
        # Until the reader has had answers to reads begun after the change was published
        # (the first of them is the one that waits for the cold load), and a little longer.
        while time.perf_counter() - since < limit_s:
            after = [r for r in reads if r[0] >= scaled]
            if len(after) >= 3 and time.perf_counter() - scaled >= after_s:
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await task
    return {"to_shards": to, "scale_s": round(scale_s, 2), "longest_wait_ms": longest_wait_ms(reads, since),
            "reads_during": len(reads) - before, "failed_attempts": len(failures), "failures": failures[:5],
            "reader_p50_before_ms": round(median([(b - a) * 1000 for a, b in reads[:before]]), 1) if before else None}


def _measure_step(found: Target, shards: _Shards | None, tenant: str, key: str, turns: int,
                  sessions: list[tuple[str, list[dict[str, Any]]]], queries: list[str], *,
                  calls: int, pause_s: float, move: bool) -> dict[str, Any]:
    stack = found.stack
    step: dict[str, Any] = {"turns": turns, "at": datetime.now(UTC).isoformat(timespec="seconds"),
                            "load_average": os.getloadavg()}
    new = sum(len(t) for _, t in sessions)
    print(f"\n[{turns:,} turns] ingest: {new:,} turns in {len(sessions)} batches of up to {SESSION_TURNS}", flush=True)
    step["ingest"] = asyncio.run(_ingest(found.url, key, sessions, pids=stack_pids(stack)))
    started = time.perf_counter()
    waited = wait_for_summaries(stack, [tenant])
    if waited is not None:
        whole = step["ingest"]["seconds"] + waited
        step["ingest"].update(summaries_wait_s=round(waited, 1), with_summaries_turns_per_s=round(new / whole, 1))
    print(f"  {step['ingest']['turns_per_s']} turns/s (summaries waited {time.perf_counter() - started:.1f} s)",
          flush=True)
    session = sessions[-1][0]
    step.update(asyncio.run(_warm_calls(found.url, key, queries, session, calls)))
    print(f"  warm: context p50 / p95 {step['context']['p50_ms']} / {step['context']['p95_ms']} ms, "
          f"search {step['search']['p50_ms']} / {step['search']['p95_ms']} ms", flush=True)
    if shards is None:
        step["cold"] = step["rss"] = step["move"] = {"skipped": "only on a stack this command started"}
        return step

    async def cold() -> None:
        pid = await shards.pid(tenant)
        after_ingest = rss_mib(pid)
        restart_s, pid = await shards.restart_owner(tenant)
        empty = rss_mib(pid)
        from strata_serve.client import AsyncStrataClient

        async with AsyncStrataClient(found.url, key, timeout_s=600, **RAW) as client:
            # An episodic search waits for the tenant's load (a context call gives up on a layer
            # after context.layer_timeout_s and answers without it). A deep tenant's load can
            # outlast the ingress's request timeout, or a store read fail: the search is sent
            # again until answered (the load goes on in the shard), timed from the first attempt.
            t0, failed = time.perf_counter(), []
            while True:
                try:
                    await client.search(queries[0], layers=["episodic"], top_k=10)
                    break
                except Exception as exc:
                    failed.append(f"{type(exc).__name__} after {time.perf_counter() - t0:.1f} s: {str(exc)[:120]}")
                    if time.perf_counter() - t0 > 900:
                        raise
                    await asyncio.sleep(0.1)
            first_ms = (time.perf_counter() - t0) * 1000
            loaded = rss_mib(pid)
            warm, incomplete = [], 0
            for n in range(5):
                t0 = time.perf_counter()
                result = await client.build_context(queries[n + 1], session, task_type="planning")
                warm.append((time.perf_counter() - t0) * 1000)
                incomplete += bool(result.missing)
        step["rss"] = {"after_ingest_mib": round(after_ingest, 1), "empty_mib": round(empty, 1),
                       "loaded_mib": round(loaded, 1), "per_turn_kib": _per_turn_kib(loaded - empty, turns),
                       "after_contexts_mib": round(rss_mib(pid), 1), "pid": pid}
        step["cold"] = {"restart_s": round(restart_s, 1), "first_search_ms": round(first_ms, 1),
                        "failed_attempts": failed, "contexts_after_p50_ms": round(median(warm), 1),
                        "contexts_after_missing_a_layer": incomplete}

    print("  restarting the tenant's episodic shard: its RSS empty and loaded, the first context call", flush=True)
    asyncio.run(cold())
    print(f"  cold first search {step['cold']['first_search_ms']:,.0f} ms; RSS {step['rss']['empty_mib']} → "
          f"{step['rss']['loaded_mib']} MiB ({step['rss']['per_turn_kib']} KiB a turn)", flush=True)
    if not move:
        step["move"] = {"skipped": "--no-move"}
        return step

    async def moves() -> None:
        n = await shards.count()
        step["move"] = {}
        for name, to in (("grow", n + 1), ("shrink", n)):
            step["move"][name] = await _move(shards, found.url, key, queries, to, pause_s=pause_s)
            print(f"  episodic shards → {to}: scale {step['move'][name]['scale_s']} s, reader's longest wait "
                  f"{step['move'][name]['longest_wait_ms']} ms", flush=True)

    asyncio.run(moves())
    return step


def _machine() -> dict[str, Any]:
    return {"cpu_count": os.cpu_count(), "load_average_start": os.getloadavg(),
            "date": datetime.now(UTC).isoformat(timespec="seconds")}


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,  # noqa: S607
                              capture_output=True, text=True, check=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``strata bench depth``."""
    add_target_arguments(parser)
    parser.add_argument("--steps", default=DEFAULT_STEPS,
                        help=f"the tenant's turn counts to measure at, ascending (default {DEFAULT_STEPS})")
    parser.add_argument("--calls", type=int, default=40, help="warm context calls and searches per step")
    parser.add_argument("--reader-pause-ms", type=float, default=10.0,
                        help="the move reader's pause between searches")
    parser.add_argument("--no-move", action="store_true", help="skip the move waits")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"where the JSON report and the plot go (default {DEFAULT_OUT}); --json names the JSON")
    parser.add_argument("--sentences", type=Path, default=Path("../shared/bench/locomo10.json"),
                        help="LoCoMo JSON to draw sentences from, if it exists (else templates only)")


def run(args: argparse.Namespace, find_target: FindTarget) -> int:
    """``strata bench depth`` against the stack ``find_target`` finds from ``args``."""
    try:
        steps = parse_steps(args.steps)
    except ValueError as exc:
        raise SystemExit(f"strata bench depth: --steps: {exc}") from None
    source = TextSource(args.sentences)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    json_path = Path(args.json) if args.json else args.out / f"depth-{stamp}.json"
    png_path = json_path.with_suffix(".png")
    raw: dict[str, Any] = {"command": "strata bench depth --steps " + args.steps, "commit": _commit(),
                           "machine": _machine(), "text": source.origin, "steps": []}
    print(f"depth benchmark at {raw['commit']}: steps {steps}, text from {source.origin}; "
          f"load average {raw['machine']['load_average_start'][0]:.1f}", flush=True)
    with find_target(args) as found:
        from strata.access.keys import open_keys
        from strata.store.layout import open_store
        from strata_actors.placement import owner_shard

        ours = found.scratch and found.stack is not None
        shards = _Shards(found.stack) if ours and found.stack is not None else None
        count = asyncio.run(shards.count()) if shards is not None else 1
        run_id = uuid.uuid4().hex[:6]
        tenant = moving_tenant(f"depth-{run_id}", count, owner_shard)
        if found.stack is not None:
            store = open_store(found.stack.settings)
            key = open_keys(store[0], store[1]).issue(tenant, name="strata bench depth").key
        else:
            key, tenant = found.key, "(the --api-key's tenant)"
        raw["tenant"] = tenant
        queries = source.questions(60)
        now, have = datetime.now(UTC), 0
        for n, turns in enumerate(steps):
            sessions = make_sessions(source, turns - have, f"depth-{n}", now=now)
            step = _measure_step(found, shards, tenant, key, turns, sessions, queries, calls=args.calls,
                                 pause_s=args.reader_pause_ms / 1000, move=not args.no_move)
            raw["steps"].append(step)
            have = turns
            raw["machine"]["load_average_end"] = os.getloadavg()
            json_path.write_text(json.dumps(summarize(raw), indent=2, default=str))  # a partial run stays readable
    doc = summarize(raw)
    json_path.write_text(json.dumps(doc, indent=2, default=str))
    print("\n" + format_table(doc))
    print(f"load average {doc['machine']['load_average_start'][0]:.1f} at the start, "
          f"{doc['machine']['load_average_end'][0]:.1f} at the end; wrote {json_path}")
    try:
        plot(doc, png_path)
        print(f"wrote {png_path}")
    except ImportError:
        print("no plot: matplotlib is not installed")
    return 0
