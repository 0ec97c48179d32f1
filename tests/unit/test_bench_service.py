"""The service benchmark's parts that need no stack: arguments, the JSON it writes,
the in-process floor on a tiny data set, and finding processes' memory."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from strata.config import load_settings
from strata.limits import DOCUMENT_CHARS_MAX, MESSAGE_CHARS_MAX
from strata.providers.embedder import make_embedder
from strata.providers.tokens import TiktokenCounter
from strata.schema import ContextRequest, DocumentIn, SearchRequest
from strata.working.memory import WorkingMemory
from strata_bench import fanout as bench_fanout
from strata_bench import service as bench_service
from strata_bench.service import (
    QUICK,
    TextSource,
    embed_floor,
    floor_in_memory,
    format_report,
    make_sessions,
    measure_floor,
    summarize,
)
from strata_bench.service.hostile import BODY_MARGIN_BYTES, _Neighbour, hostile_queries, maximal_body
from strata_bench.stats import processes_memory
from strata_cli import main as cli
from strata_cli.processes import processes_naming

REQUIRED = {
    "context_p50_ms": float, "context_p95_ms": float, "context_p99_ms": float, "search_p50_ms": float,
    "search_p95_ms": float, "floor_p50_ms": float, "ingest_turns_per_s": float, "embed_floor_turns_per_s": float,
    "read_your_writes": bool, "tenants": int, "stack_rss_mib": float, "cold_tenant_p95_ms": float,
}


def _pcts(p50: float, p95: float, p99: float, calls: int = 100) -> dict[str, Any]:
    return {"p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "calls": calls}


def _fake_raw() -> dict[str, Any]:
    memory = {
        "rss_mib": 3000.5, "pss_mib": 2500.0, "processes": 20, "largest": [{"process": "ray::X (1)", "rss_mib": 900.0}]
    }
    return {
        "sizes": {**vars(QUICK)}, "text": "templates", "run_id": "abc123",
        "phase_seconds": {"embed_floor": 5.0, "ingest": 20.0},
        "embed_floor": {"turns_per_s": 150.0, "texts": 500, "threads": 1, "one_thread_turns_per_s": 150.0,
                        "all_cores_turns_per_s": 200.0, "all_cores_threads": 2},
        "ingest": {"turns": 1000, "seconds": 8.0, "turns_per_s": 125.0, "batch_turns": 100, "writers": 2,
                   "documents": 20, "documents_seconds": 3.0, "summaries_wait_s": 2.0},
        "read_your_writes": {
            "ok": True, "trials": [{"rank": 1, "found_first": True, "write_ms": 50.0, "search_ms": 30.0}]
        },
        "floor_source": "fake",
        "floor": {"context": {"total": _pcts(10.0, 12.0, 14.0), "embed": _pcts(7.0, 8.0, 9.0),
                              "episodic": _pcts(2.0, 3.0, 3.5), "semantic": _pcts(1.0, 1.5, 2.0)},
                  "search": {"total": _pcts(11.0, 13.0, 15.0), "embed": _pcts(7.0, 8.0, 9.0),
                             "episodic": _pcts(2.5, 3.0, 3.5), "semantic": _pcts(1.5, 1.5, 2.0)}},
        "latency": {"clients": 8, "context": {**_pcts(35.0, 70.0, 90.0), "calls_with_missing_layers": 0,
                                              "calls_per_s": 50.0, "stack_cpu_ms_per_call": 15.0},
                    "search": {**_pcts(25.0, 50.0, 60.0), "calls_per_s": 70.0},
                    "one_client": {"context": {**_pcts(20.0, 30.0, 31.0, 10), "calls_with_missing_layers": 0},
                                   "search": _pcts(15.0, 20.0, 21.0, 10)}},
        "hostile": {"clients": 8,
                    "context": {**_pcts(40.0, 100.0, 150.0, 120), "calls_per_s": 40.0, "calls_with_missing_layers": 0,
                                "errors": {"RateLimited": 3}, "stack_cpu_ms_per_call": 25.0,
                                "cpu_ms_per_call_by_process": {"ray::ServeReplica:strata:api": 12.0,
                                                               "ray::EpisodicShard": 6.0}},
                    "neighbour": {"search": {**_pcts(900.0, 2000.0, 2100.0, 5), "statuses": {"200": 5}},
                                  "bad_keys": {**_pcts(5.0, 9.0, 10.0, 50), "statuses": {"401": 20, "429": 30}},
                                  "maximal_body": {**_pcts(3000.0, 3000.0, 3000.0, 1), "statuses": {"401": 1}},
                                  "rounds_completed": 1, "query_chars": 16000, "queries": ["word_separators"],
                                  "body_bytes": 134213632, "flood": 50, "source_address": "127.0.0.2"}},
        "key_lookup_ms": {"after_one_tenant": 3.0, "after_scale": 9.0},
        "memory_one_tenant": memory,
        "scale": {"tenants": 100, "ingest_seconds": 60.0, "summaries_wait_s": 1.0, "memory_loaded": memory,
                  "resident": {"calls": [_pcts(40.0, 80.0, 90.0)], "answered": 100, "complete": 100,
                               "first_calls_missing_layer": {}},
                  "restart_s": 12.0, "cold": _pcts(400.0, 900.0, 1200.0), "warm": _pcts(30.0, 60.0, 80.0),
                  "cold_sample": 30, "cold_complete": 28, "cold_calls_missing_layer": {"semantic": 2},
                  "memory_after_cold_pass": {**memory, "rss_mib": 2800.0},
                  "memory_after_answers": {**memory, "rss_mib": 3100.0},
                  "tenants_in_memory_after_answers": {"working": [40, 60], "episodic": [52, 48]}},
    }


def _bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    bench_service.add_arguments(parser)
    return parser


def test_arguments() -> None:
    args = _bench_parser().parse_args(["--quick", "--json", "out.json", "--plot", "out.png"])
    assert args.quick and args.json == "out.json" and args.plot == "out.png"
    assert args.url is None and args.data_dir is None and args.clients == 8 and args.tenants is None
    assert not args.no_hostile and _bench_parser().parse_args(["--no-hostile"]).no_hostile
    args = _bench_parser().parse_args(["--url", "http://h:1", "--api-key", "k", "--admin-key", "a", "--tenants", "5"])
    assert (args.url, args.api_key, args.admin_key, args.tenants, args.quick) == ("http://h:1", "k", "a", 5, False)


def test_strata_bench_without_a_name_runs_the_service_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, argparse.Namespace]] = []
    def run_service(a: argparse.Namespace, find_target: object) -> int:
        seen.append(("service", a))
        return 0

    def run_fanout(a: argparse.Namespace, which: str, find_target: object) -> int:
        seen.append((which, a))
        return 0

    monkeypatch.setattr(bench_service, "run", run_service)
    monkeypatch.setattr(bench_fanout, "run", run_fanout)
    assert cli.main(["bench", "--quick", "--json", "out.json"]) == 0
    assert cli.main(["bench", "contention", "--json", "c.json"]) == 0
    assert cli.main(["bench", "fanout", "--calls", "3"]) == 0
    (first, a), (second, b), (third, c) = seen
    assert first == "service" and a.quick and a.json == "out.json"
    assert second == "contention" and b.json == "c.json" and b.clients == 16  # the sub-benchmark's own default
    assert third == "fanout" and c.calls == 3


def test_json_has_the_figures_with_their_types() -> None:
    doc = json.loads(json.dumps(summarize(_fake_raw(), machine={"cpu_count": 2}), default=str))
    for key, kind in REQUIRED.items():
        assert isinstance(doc[key], kind), key
    assert doc["context_p50_ms"] == 35.0 and doc["floor_p50_ms"] == 10.0
    assert doc["stack_rss_mib"] == 3100.0  # the largest of the snapshots
    assert doc["cold_tenant_p95_ms"] == 900.0 and doc["warm_tenant_p95_ms"] == 60.0 and doc["tenants_answered"] == 100
    assert doc["ingest_with_summaries_turns_per_s"] == 100.0  # 1000 turns / (8 + 2) s
    t = doc["targets"]
    assert t["context_p50_ms"]["met"] and t["context_p95_ms"]["met"]
    assert t["context_p50_over_floor"] == {"value": 3.5, "target": "<= 3", "met": False}
    assert t["embed_floor_over_ingest"]["value"] == 1.2 and t["embed_floor_over_ingest"]["met"]
    assert t["ingest_turns_per_s"]["met"] and t["stack_rss_mib"]["met"] and t["cold_tenant_p95_ms"]["met"]
    assert doc["embed_one_thread_turns_per_s"] == 150.0 and doc["embed_all_cores_turns_per_s"] == 200.0
    assert t["ingest_over_all_cores_floor"] == {"value": 0.62, "target": ">= 0.8", "met": False}  # 125 / 200
    assert (doc["hostile_context_p50_ms"], doc["hostile_context_p99_ms"], doc["hostile_context_calls_per_s"]) == (
        40.0, 150.0, 40.0)
    assert t["hostile_p99_ratio"] == {"value": 1.67, "target": "<= 2", "met": True}  # 150 / 90
    assert doc["machine"] == {"cpu_count": 2}
    report = format_report(doc)
    assert "on all 2 cores 200 turns/s" in report
    assert "ingest / all-cores embedder = 0.62x: target >= 0.8: MISSED" in report
    assert "p99 with / without = 1.67x: target <= 2: met; the clients' failed calls: RateLimited 3" in report
    assert "random wrong keys, 50 at once: 50 completed" in report and "401 x20, 429 x30" in report
    assert ("CPU per client call: 25 ms with the neighbour, 15 without (the neighbour's share over the phase: 1.20 s); "
            "by process: ray::ServeReplica:strata:api 12.0, ray::EpisodicShard 6.0") in report  # (25 - 15) x 120 calls
    assert "134,213,632-byte body, a wrong key: 1 completed" in report
    assert "source address 127.0.0.2; 1 rounds" in report
    assert "target <= 3: MISSED" in report and "a layer missing: semantic 2" in report
    assert "context answered for 100 of 100 tenants" in report and "true (ranks 1)" in report
    assert "tenants in memory per shard after every tenant's context: working 40/60; episodic 52/48" in report


def test_json_of_a_run_without_scale_or_store() -> None:
    raw = _fake_raw()
    raw["scale"] = {"tenants": 0, "skipped": "no admin key (--admin-key)"}
    raw["memory_one_tenant"] = None
    raw["ingest"]["summaries_wait_s"] = None
    raw["key_lookup_ms"] = {"after_one_tenant": None, "after_scale": None}
    raw["hostile"] = {"skipped": "--no-hostile"}
    doc = summarize(raw)
    assert doc["tenants"] == 0 and doc["stack_rss_mib"] is None and doc["cold_tenant_p95_ms"] is None
    assert doc["targets"]["cold_tenant_p95_ms"]["met"] is None
    assert doc["hostile_context_p99_ms"] is None and doc["targets"]["hostile_p99_ratio"]["met"] is None
    report = format_report(doc)
    assert "skipped: no admin key" in report and "skipped: --no-hostile" in report


def test_the_floor_measured_again_after_the_clients_gives_the_ratios_against_it_too() -> None:
    raw = _fake_raw()
    raw["floor"]["context"]["cpu_ms_per_call"] = 8.0
    raw["floor_again"] = {"context": {"total": _pcts(12.5, 14.0, 16.0), "cpu_ms_per_call": 10.0}}
    doc = summarize(raw, machine={"cpu_count": 2})
    assert doc["targets"]["throughput_over_floor"]["value"] == 0.2  # 50 / (2 cores x 1000 / 8 ms)
    assert doc["floor_again"] == {"p50_ms": 12.5, "cpu_ms_per_call": 10.0, "p50_over_first": 1.25,
                                  "cpu_over_first": 1.25, "one_client_p50_over_it": 1.6, "throughput_over_it": 0.25}
    assert ("the floor again after the clients: p50 12.5 ms, CPU 10 ms a call (1.25x and 1.25x the first: how far the "
            "machine's speed moved between the two sides); against it one client 1.6x, throughput 0.25x"
            ) in format_report(doc)
    without = summarize(_fake_raw())
    assert "floor_again" not in without and "the floor again" not in format_report(without)


def test_a_failed_read_your_writes_trial_says_what_ranked_above_the_turn() -> None:
    raw = _fake_raw()
    raw["read_your_writes"] = {"ok": False, "trials": [
        {"rank": 1, "found_first": True, "write_ms": 50.0, "search_ms": 30.0},
        {"rank": 2, "found_first": False, "write_ms": 50.0, "search_ms": 30.0, "sentence": "I tried making paella.",
         "above": [{"kind": "summary", "score": 0.99, "relevance": 1.0, "text": "user: I tried making falafel."}]},
    ]}
    report = format_report(summarize(raw))
    assert "false (ranks 1, 2)" in report
    assert ("above the turn of 'I tried making paella.': summary score 0.99 relevance 1.0: "
            "'user: I tried making falafel.'") in report


def test_json_of_a_raw_result_from_before_the_hostile_phase() -> None:
    raw = _fake_raw()
    del raw["hostile"]
    raw["embed_floor"] = {"turns_per_s": 150.0, "texts": 500, "threads": 1}
    doc = summarize(raw)
    assert doc["embed_all_cores_turns_per_s"] is None and doc["targets"]["ingest_over_all_cores_floor"]["met"] is None
    assert doc["targets"]["hostile_p99_ratio"]["met"] is None
    assert "hostile neighbour" in format_report(doc)


def test_hostile_queries_are_as_long_as_a_query_may_be() -> None:
    queries = hostile_queries()
    assert {"word_separators", "unterminated_password", "digit_groups", "dotted_words", "at_signs",
            "unreadable_dates"} <= set(queries)
    for name, query in queries.items():
        assert len(query) == MESSAGE_CHARS_MAX, name
        SearchRequest(query=query)  # the API accepts each: it has to redact it
    assert queries["unterminated_password"].startswith("password=__") and queries["unterminated_password"][-2:] == "_!"
    assert {len(q) for q in hostile_queries(11).values()} == {11}


def test_maximal_body_is_a_valid_document_of_the_size_asked() -> None:
    small = b"".join(maximal_body(4096))
    assert len(small) == 4096
    doc = DocumentIn.model_validate_json(small)
    assert doc.doc_id == "hostile-neighbour" and set(doc.text) == {"a"} and len(doc.text) == (4096 - 44) // 6
    size = load_settings(None).serve.max_body_bytes - BODY_MARGIN_BYTES
    sizes, escapes, last = 0, 0, b""
    for chunk in maximal_body(size):  # streamed: no chunk over a MiB, the whole never in memory at once
        assert len(chunk) <= 2**20
        sizes += len(chunk)
        escapes += chunk.count(b"\\u")
        last = chunk
    assert sizes == size and escapes == DOCUMENT_CHARS_MAX and last == b"}"  # the text is as long as a document may be
    with pytest.raises(ValueError):
        next(maximal_body(40))


def test_the_neighbour_sends_what_the_api_reads() -> None:
    """One round of the neighbour against a fake transport: each request is one the API would read."""
    seen: dict[str, int] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        path, key = request.url.path, request.headers["authorization"].removeprefix("Bearer ")
        seen[path] = seen.get(path, 0) + 1
        if path == "/v1/search":
            assert len(SearchRequest.model_validate_json(request.content).query) == MESSAGE_CHARS_MAX
            return httpx.Response(200 if key == "sk-strata-right" else 401, json={})
        assert key.startswith("sk-strata-") and key != "sk-strata-right"
        if path == "/v1/context":
            ContextRequest.model_validate_json(request.content)
        else:
            assert path == "/v1/documents" and int(request.headers["content-length"]) == len(request.content) == 8192
            DocumentIn.model_validate_json(request.content)
        return httpx.Response(401, json={})

    async def one_round() -> dict[str, Any]:
        neighbour = _Neighbour("http://stack", "sk-strata-right", "s1", body_bytes=8192, flood=7,
                               transport=httpx.MockTransport(answer))
        running = asyncio.create_task(neighbour.run())
        while neighbour.report()["rounds_completed"] < 1:
            await asyncio.sleep(0.001)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await neighbour.aclose()
        return neighbour.report()

    sent = asyncio.run(one_round())
    assert seen["/v1/context"] >= 7 and seen["/v1/documents"] >= 1
    assert sent["search"]["statuses"]["200"] >= len(hostile_queries()) and sent["bad_keys"]["statuses"]["401"] >= 7
    assert sent["maximal_body"]["statuses"] == {"401": sent["maximal_body"]["calls"]} and sent["flood"] == 7


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "bench.png"
    bench_service.plot(summarize(_fake_raw()), str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_source_without_locomo_is_varied(tmp_path: Path) -> None:
    source = TextSource(tmp_path / "missing.json")
    assert source.origin == "templates"
    pairs = source.turns(200)
    assert len(pairs) == 200 and len(set(pairs)) > 150
    title, text = source.document(3, paragraphs=4)
    assert text.startswith(f"# {title}") and len(text.split()) > 150
    assert len(set(source.questions(40))) > 20


def test_floor_on_a_tiny_in_memory_data_set() -> None:
    settings = load_settings(None)
    source = TextSource(None, seed=3)
    now = datetime.now(UTC)
    sessions = make_sessions(source, 30, "tiny", now=now)
    documents = [(f"doc-{n}", *source.document(n, paragraphs=3)) for n in range(2)]
    embedder = make_embedder(settings.embedding)
    from strata_actors.episodic import turn_text

    texts = [turn_text(t) for _, turns in sessions for t in turns]
    rate, vectors = embed_floor(embedder, texts, batch=8)
    assert rate > 0 and vectors.shape == (30, embedder.dim)
    floor = floor_in_memory("tiny", sessions, documents, embedder=embedder, settings=settings, vectors=vectors)
    assert floor.episodic.turn_count == 30 and floor.semantic.stats()["documents"] == 2
    # The floor finds what it indexed: a turn's own words rank that turn first.
    user = sessions[0][1][4]["user"]
    hits = floor.episodic.search(embedder.embed([user])[0], query_text=user, top_k=1)
    assert user in hits[0].text
    result = measure_floor(floor, embedder, source.questions(6), top_k=8, warmup=2)
    for part in ("total", "embed", "episodic", "semantic"):
        row = result[part]
        assert row["calls"] == 6 and 0 < row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
    assert result["total"]["p50_ms"] >= result["embed"]["p50_ms"] and "working" not in result


def test_a_context_floor_also_fits_working_memory_and_assembles_the_context() -> None:
    """The context floor does a context's whole memory work, as /v1/context does it: the
    session's working memory fitted to its share of the budget, the context assembled."""
    settings = load_settings(None)
    source = TextSource(None, seed=5)
    sessions = make_sessions(source, 20, "ctx", now=datetime.now(UTC))
    embedder = make_embedder(settings.embedding)
    floor = floor_in_memory("ctx", sessions, [], embedder=embedder, settings=settings)
    counter = TiktokenCounter(settings.working.encoding)
    floor.working = WorkingMemory(counter=counter)
    for turn in sessions[0][1]:
        floor.working.add("user", turn["user"], now=datetime.now(UTC))
    result = measure_floor(floor, embedder, source.questions(4), top_k=8, warmup=1, context=settings.context)
    for part in ("working", "assemble"):
        assert result[part]["calls"] == 4 and result[part]["p50_ms"] > 0
    assert result["total"]["p50_ms"] >= result["embed"]["p50_ms"] + result["assemble"]["p50_ms"]


def test_memory_of_processes_named_by_a_marker(tmp_path: Path) -> None:
    marker = tmp_path / "head"
    marker.mkdir()
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)")
    parent = subprocess.Popen([sys.executable, "-c", code, f"--temp-dir={marker}"])
    try:
        for _ in range(100):  # until the child exists
            found = sorted(processes_naming(str(marker)))
            if len(found) >= 2:
                break
            __import__("time").sleep(0.05)
        assert parent.pid in found and len(found) == 2  # the named process and its child
        assert processes_naming(str(marker) + "-other") == set()  # a longer path is another marker
        memory = processes_memory(found)
        assert memory["processes"] == 2 and memory["rss_mib"] > 1 and memory["pss_mib"] > 0
        assert processes_memory([os.getpid()])["rss_mib"] > 10
    finally:
        for pid in processes_naming(str(marker)):
            os.kill(pid, 9)
        parent.wait()
