"""``strata bench llm``: the four LLM features end to end, over HTTP, against a real model.

Against a stack whose ``llm.base_url`` is the model (a scratch stack is started with
``--llm URL``; ``python -m strata_bench.scripts.real_llm`` serves SmolLM2-135M here), it

1. records ``--turns`` turns in one session (summaries are made in the background),
2. indexes ``--documents`` documents (their LLM entities are drawn in the background),
3. learns a skill from each of ``--traces`` traces (direct: the caller waits, bounded),
4. asks ``--contexts`` contexts over the session with a budget too small for it (condensing),

then waits for the background work to settle and reports, per feature, from the stack's
``GET /metrics`` (the admin key): requests to the model and how they ended, uses accepted
and fallbacks by reason, the median request latency (interpolated in the histogram, as
Prometheus' ``histogram_quantile`` does), tokens; and the HTTP latency of each call that
waits (documents, skills, contexts). "Nothing lost": every turn listed, every document
ready, every skill learned or its job named.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from strata.providers.llm_meter import LATENCY_BUCKETS_S
from strata_bench.service.text import TextSource
from strata_bench.stats import median
from strata_bench.target import FindTarget, Target
from strata_bench.target import add_arguments as add_target_arguments

__all__ = [
    "FEATURES", "TRACES", "add_arguments", "feature_table", "histogram_quantile", "measure", "parse_metrics", "run",
]

FEATURES = ("summary", "entities", "skills", "refine")

#: Traces to learn from: everyday agent work, not any benchmark's.
TRACES: list[tuple[str, list[Any], str]] = [
    ("restart the payments api after a config change",
     [{"tool": "shell", "command": "kubectl apply -f payments.yaml", "status": "ok"},
      {"tool": "shell", "command": "kubectl rollout restart deploy/payments", "status": "error",
       "error": "forbidden: user cannot patch deployments"},
      {"tool": "shell", "command": "kubectl --context admin rollout restart deploy/payments", "status": "ok"},
      {"tool": "shell", "command": "kubectl rollout status deploy/payments", "output": "successfully rolled out"}],
     "rolled out"),
    ("fix the failing unit test in the parser",
     [{"tool": "shell", "command": "pytest tests/test_parser.py", "status": "error", "error": "AssertionError: 3 != 4"},
      {"tool": "edit", "args": {"file": "parser.py", "change": "count the last token"}, "status": "ok"},
      {"tool": "shell", "command": "pytest tests/test_parser.py", "output": "4 passed"}],
     "tests pass"),
    ("book a table for four on friday evening",
     ["searched restaurants near the office", "the first one was full at 19:00",
      "booked the second one for 19:30, four people", "sent the confirmation to the team channel"],
     "booked"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_target_arguments(parser)
    parser.add_argument("--llm", help="the model's OpenAI-compatible base URL, for a scratch stack "
                        "(e.g. http://127.0.0.1:8088/v1 from `python -m strata_bench.scripts.real_llm`)")
    parser.add_argument("--model", default="smollm2", help="the model's name at that endpoint")
    parser.add_argument("--admin-key", help="the stack's admin key, to read /metrics (a scratch stack makes one)")
    parser.add_argument("--sentences", type=Path, default=Path("../shared/bench/locomo10.json"),
                        help="LoCoMo JSON whose turns are mixed into the recorded ones (if present)")
    parser.add_argument("--turns", type=int, default=52)
    parser.add_argument("--documents", type=int, default=5)
    parser.add_argument("--traces", type=int, default=3)
    parser.add_argument("--contexts", type=int, default=5)
    parser.add_argument("--settle-s", type=float, default=900.0, help="the longest wait for background work")
    parser.add_argument("--config", default=argparse.SUPPRESS, help="YAML settings (as `strata --config`)")


def histogram_quantile(q: float, buckets: Mapping[str, float]) -> float | None:
    """The ``q`` quantile of a cumulative histogram (``le`` bound -> count), interpolated
    linearly in its bucket; None when it is empty."""
    total = buckets.get("+Inf", 0.0)
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in LATENCY_BUCKETS_S:
        count = buckets.get(f"{bound:g}", 0.0)
        if count >= rank:
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return LATENCY_BUCKETS_S[-1]  # past the last bound: at least that


def parse_metrics(text: str) -> dict[tuple[str, str, str], float]:
    """``/metrics`` back into ``(metric, feature, label)`` counts (what :class:`MeterCounts` holds)."""
    names = {"strata_llm_calls_total": "calls", "strata_llm_tokens_total": "tokens",
             "strata_llm_results_total": "results", "strata_llm_latency_seconds_bucket": "latency_bucket",
             "strata_llm_latency_seconds_sum": "latency_sum", "strata_llm_latency_seconds_count": "latency_count"}
    out: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels_text, value = rest.rsplit("}", 1)
        labels = dict(part.split("=", 1) for part in labels_text.split(",") if "=" in part)
        labels = {k: v.strip('"') for k, v in labels.items()}
        metric = names.get(name)
        if metric is None:
            continue
        other = next((v for k, v in labels.items() if k != "feature"), "")
        out[(metric, labels.get("feature", ""), other)] = float(value)
    return out


def feature_table(before: Mapping[tuple[str, str, str], float], after: Mapping[tuple[str, str, str], float]
                  ) -> dict[str, dict[str, Any]]:
    """Per feature, what changed between two ``/metrics`` reads."""
    delta = {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}
    table: dict[str, dict[str, Any]] = {}
    for feature in FEATURES:
        def of(metric: str, feature: str = feature) -> dict[str, float]:
            return {label: v for (m, f, label), v in delta.items() if m == metric and f == feature}
        results = of("results")
        table[feature] = {
            "requests": sum(of("calls").values()),
            "requests_by_outcome": of("calls"),
            "uses": sum(results.values()),
            "accepted": results.get("accepted", 0.0),
            "fallbacks": {k: v for k, v in results.items() if k != "accepted"},
            "p50_s": histogram_quantile(0.5, of("latency_bucket")),
            "tokens_in": of("tokens").get("in", 0.0),
            "tokens_out": of("tokens").get("out", 0.0),
        }
    return table


def _metrics(client: httpx.Client, admin_key: str) -> dict[tuple[str, str, str], float]:
    """The stack's LLM counts; none from a Strata older than ``/metrics`` (only the HTTP side
    of the calls is measured then: how to compare with a release before issue 43)."""
    response = client.get("/metrics", headers={"Authorization": f"Bearer {admin_key}"})
    if response.status_code == 404:
        return {}
    response.raise_for_status()
    return parse_metrics(response.text)


def measure(found: Target, args: argparse.Namespace, admin_key: str) -> dict[str, Any]:
    source = TextSource(args.sentences)
    session = "llm-bench-" + uuid.uuid4().hex[:6]
    headers = {"Authorization": f"Bearer {found.key}"}
    calls: dict[str, list[dict[str, Any]]] = {"documents": [], "skills": [], "contexts": []}
    with httpx.Client(base_url=found.url, headers=headers, timeout=120.0) as client:
        before = _metrics(client, admin_key)
        started = time.monotonic()
        turns = [{"user": user, "agent": agent} for user, agent in source.turns(args.turns)]
        for i in range(0, len(turns), 20):
            client.post(f"/v1/sessions/{session}/turns/batch", json={"turns": turns[i : i + 20]}).raise_for_status()
        print(f"recorded {len(turns)} turns", flush=True)
        for n in range(args.documents):
            title, text = source.document(n, paragraphs=2 + n % 3)
            t0 = time.monotonic()
            doc = {"doc_id": f"{session}-doc{n}", "title": title, "text": text}
            response = client.post("/v1/documents", json=doc)
            calls["documents"].append({"status": response.status_code, "s": time.monotonic() - t0})
            print(f"document {n}: {response.status_code} in {time.monotonic() - t0:.1f} s", flush=True)
        for task, trace, outcome in TRACES[: args.traces]:
            t0 = time.monotonic()
            response = client.post("/v1/skills:extract", json={"task": task, "trace": trace, "outcome": outcome})
            body = response.json()
            calls["skills"].append({"status": response.status_code, "s": time.monotonic() - t0,
                                    "job_id": body.get("job_id") or (body.get("details") or {}).get("job_id"),
                                    "error": body.get("message") if response.status_code >= 400 else None})
            print(f"skill {task!r}: {response.status_code} in {time.monotonic() - t0:.1f} s", flush=True)
        for question in source.questions(args.contexts):
            t0 = time.monotonic()
            response = client.post("/v1/context", json={"message": question, "session_id": session, "max_tokens": 200})
            body = response.json()
            calls["contexts"].append({"status": response.status_code, "s": time.monotonic() - t0,
                                      "refined": body.get("refined"), "refine_error": body.get("refine_error")})
            print(f"context: {response.status_code} in {time.monotonic() - t0:.1f} s, refined={body.get('refined')} "
                  f"{body.get('refine_error') or ''}", flush=True)
        after = _settle(client, admin_key, args.settle_s)
        waited = time.monotonic() - started
        listed = client.get(f"/v1/sessions/{session}/turns", params={"limit": 500}).json()
        ready = [client.get(f"/v1/documents/{session}-doc{n}").json().get("status") for n in range(args.documents)]
    return {
        "model": args.model, "url": args.llm, "turns": len(turns), "seconds": round(waited, 1),
        "features": feature_table(before, after), "calls": calls,
        "lost": {"turns_listed": len(listed.get("turns", [])), "turns_sent": len(turns),
                 "documents_ready": ready.count("ready"), "documents_sent": args.documents},
    }


def _settle(client: httpx.Client, admin_key: str, limit_s: float) -> dict[tuple[str, str, str], float]:
    """``/metrics`` once no LLM request has ended for 30 s (background work done), or at ``limit_s``."""
    deadline = time.monotonic() + limit_s
    last, quiet_since = _metrics(client, admin_key), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(5)
        now = _metrics(client, admin_key)
        if now != last:
            last, quiet_since = now, time.monotonic()
            done = sum(v for (m, _, _), v in now.items() if m == "calls")
            print(f"  background: {done:g} LLM requests so far", flush=True)
        elif time.monotonic() - quiet_since > 30:
            break
    return last


def _format(document: dict[str, Any]) -> str:
    lines = ["| feature | uses | accepted | fallbacks (why) | requests (how they ended) | p50 request "
             "| tokens in/out |",
             "|---|---|---|---|---|---|---|"]
    for feature, row in document["features"].items():
        why = ", ".join(f"{k} {v:g}" for k, v in sorted(row["fallbacks"].items())) or "-"
        how = ", ".join(f"{k} {v:g}" for k, v in sorted(row["requests_by_outcome"].items())) or "-"
        p50 = f"{row['p50_s']:.1f} s" if row["p50_s"] is not None else "-"
        lines.append(f"| {feature} | {row['uses']:g} | {row['accepted']:g} | {why} | {how} | {p50} | "
                     f"{row['tokens_in']:g}/{row['tokens_out']:g} |")
    for kind, made in document["calls"].items():
        if made:
            statuses = ", ".join(sorted({str(c["status"]) for c in made}))
            lines.append(f"{kind}: HTTP {statuses}; median {median([c['s'] for c in made]):.1f} s, "
                         f"slowest {max(c['s'] for c in made):.1f} s")
    lost = document["lost"]
    lines.append(f"kept: {lost['turns_listed']}/{lost['turns_sent']} turns listed, "
                 f"{lost['documents_ready']}/{lost['documents_sent']} documents ready")
    return "\n".join(lines)


def run(args: argparse.Namespace, find_target: FindTarget) -> int:
    admin_key = args.admin_key or os.environ.get("STRATA_AUTH__ADMIN_KEY")
    if args.llm:
        if args.url or args.data_dir:
            raise SystemExit("strata bench llm: --llm configures a scratch stack; a running one has its llm.base_url")
        admin_key = admin_key or secrets.token_urlsafe(24)
        # The scratch stack reads its settings from the environment (STRATA_<SECTION>__<FIELD>).
        os.environ.update({
            "STRATA_LLM__BASE_URL": args.llm, "STRATA_LLM__MODEL": args.model,
            "STRATA_LLM__MAX_CONCURRENCY": os.environ.get("STRATA_LLM__MAX_CONCURRENCY", "1"),
            "STRATA_AUTH__ADMIN_KEY": admin_key,
        })
    if not admin_key:
        raise SystemExit("strata bench llm: /metrics needs the stack's admin key (--admin-key, STRATA_AUTH__ADMIN_KEY)")
    with find_target(args) as found:
        document = measure(found, args, admin_key)
    print(_format(document))
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=2, default=str))
    return 0
