"""The service benchmark's JSON document (headline figures with their targets first), its
plain-text report and its chart.
"""

from __future__ import annotations

from typing import Any

from strata_bench.service.floor import BASELINE_EMBEDDER

__all__ = ["TARGETS", "embedder_lines", "format_report", "plot", "summarize"]

TARGETS: dict[str, tuple[str, float]] = {
    "context_p50_ms": ("<=", 40.0),
    "context_p95_ms": ("<=", 80.0),
    "context_p50_over_floor": ("<=", 3.0),
    "one_client_p50_over_floor": ("<=", 1.5),
    "context_cpu_over_floor": ("<=", 2.0),
    "throughput_over_floor": (">=", 0.5),
    "ingest_turns_per_s": (">=", 100.0),
    "embed_floor_over_ingest": ("<=", 2.0),
    "ingest_over_all_cores_floor": (">=", 0.8),
    "hostile_p99_ratio": ("<=", 2.0),
    "hostile_text_turn_cpu_ms": ("<", 1000.0),
    "stack_rss_mib": ("<", 8192.0),
    "cold_tenant_p95_ms": ("<=", 1000.0),
}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _verdict(name: str, value: Any) -> dict[str, Any]:
    op, limit = TARGETS[name]
    met = None if value is None else (value <= limit if op == "<=" else value >= limit if op == ">=" else value < limit)
    return {"value": value, "target": f"{op} {limit:g}", "met": met}


def _calls_per_s_on_cores(cores: int, cpu_ms_per_call: float | None) -> float | None:
    """What ``cores`` could answer at ``cpu_ms_per_call`` of CPU a call: a throughput ceiling."""
    return cores * 1000 / cpu_ms_per_call if cpu_ms_per_call else None


def summarize(raw: dict[str, Any], *, machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document: the headline figures first, with targets, then everything measured."""
    lat, floor, ingest, scale = raw["latency"], raw["floor"], raw["ingest"], raw["scale"]
    memories = [m["rss_mib"] for m in (scale.get("memory_loaded"), scale.get("memory_after_answers"),
                                        scale.get("memory_after_cold_pass"), raw.get("memory_one_tenant")) if m]
    ingest_rate, floor_rate = ingest["turns_per_s"], raw["embed_floor"]["turns_per_s"]
    waited = ingest.get("summaries_wait_s")
    hostile = (raw.get("hostile") or {}).get("context") or {}
    text_cpu = (raw.get("hostile") or {}).get("text_write_cpu_ms") or {}
    doc: dict[str, Any] = {
        "context_p50_ms": lat["context"]["p50_ms"],
        "context_p95_ms": lat["context"]["p95_ms"],
        "context_p99_ms": lat["context"]["p99_ms"],
        "search_p50_ms": lat["search"]["p50_ms"],
        "search_p95_ms": lat["search"]["p95_ms"],
        "search_p99_ms": lat["search"]["p99_ms"],
        "floor_p50_ms": floor["context"]["total"]["p50_ms"],
        "search_floor_p50_ms": floor["search"]["total"]["p50_ms"],
        "one_client_context_p50_ms": lat["one_client"]["context"]["p50_ms"],
        # CPU per context call summed over every process of the stack (from /proc), against what
        # the same call costs in one process with no Ray, Serve or HTTP.
        "context_cpu_ms_per_call": lat["context"].get("stack_cpu_ms_per_call"),
        "one_client_cpu_ms_per_call": lat["one_client"]["context"].get("stack_cpu_ms_per_call"),
        "floor_cpu_ms_per_call": floor["context"].get("cpu_ms_per_call"),
        "context_calls_per_s": lat["context"]["calls_per_s"],
        "ingest_turns_per_s": ingest_rate,
        "ingest_with_summaries_turns_per_s": (
            round(ingest["turns"] / (ingest["seconds"] + waited), 1) if waited is not None else None
        ),
        "embed_floor_turns_per_s": floor_rate,
        "embed_one_thread_turns_per_s": raw["embed_floor"].get("one_thread_turns_per_s"),
        "embed_all_cores_turns_per_s": raw["embed_floor"].get("all_cores_turns_per_s"),
        # The same context calls as context_p*_ms, while one more client sends worst-case inputs.
        "hostile_context_p50_ms": hostile.get("p50_ms"),
        "hostile_context_p95_ms": hostile.get("p95_ms"),
        "hostile_context_p99_ms": hostile.get("p99_ms"),
        "hostile_context_calls_per_s": hostile.get("calls_per_s"),
        # CPU to write the costliest 16,000-character turn of any script, English worst cases included.
        "hostile_text_turn_cpu_ms": max((row["turn_ms"] for row in text_cpu.values()), default=None),
        "read_your_writes": bool(raw["read_your_writes"]["ok"]),
        "tenants": int(scale.get("tenants", 0)),
        "tenants_answered": scale.get("resident", {}).get("answered"),
        "stack_rss_mib": max(memories) if memories else None,
        "cold_tenant_p95_ms": scale.get("cold", {}).get("p95_ms"),
        "warm_tenant_p95_ms": scale.get("warm", {}).get("p95_ms"),
        # Each local embedding model's ingest and query latency, to choose one (none from a run before them).
        "embedders": raw.get("embedders"),
    }
    cores = (machine or {}).get("cpu_count") or 1
    floor_cpu = doc["floor_cpu_ms_per_call"]
    # What the machine's cores could answer at the floor's CPU cost per call: the throughput ceiling.
    ceiling = _calls_per_s_on_cores(cores, floor_cpu)
    doc["floor_calls_per_s_on_cores"] = round(ceiling, 1) if ceiling else None
    doc["targets"] = {
        "context_p50_ms": _verdict("context_p50_ms", doc["context_p50_ms"]),
        "context_p95_ms": _verdict("context_p95_ms", doc["context_p95_ms"]),
        "context_p50_over_floor": _verdict("context_p50_over_floor",
                                           _ratio(doc["context_p50_ms"], doc["floor_p50_ms"])),
        "one_client_p50_over_floor": _verdict(
            "one_client_p50_over_floor", _ratio(doc["one_client_context_p50_ms"], doc["floor_p50_ms"])),
        "context_cpu_over_floor": _verdict("context_cpu_over_floor", _ratio(doc["context_cpu_ms_per_call"], floor_cpu)),
        "throughput_over_floor": _verdict(
            "throughput_over_floor", _ratio(doc["context_calls_per_s"], doc["floor_calls_per_s_on_cores"])),
        "ingest_turns_per_s": _verdict("ingest_turns_per_s", ingest_rate),
        "embed_floor_over_ingest": _verdict("embed_floor_over_ingest", _ratio(floor_rate, ingest_rate)),
        "ingest_over_all_cores_floor": _verdict(
            "ingest_over_all_cores_floor", _ratio(ingest_rate, doc["embed_all_cores_turns_per_s"])),
        "hostile_p99_ratio": _verdict(
            "hostile_p99_ratio", _ratio(doc["hostile_context_p99_ms"], doc["context_p99_ms"])),
        "hostile_text_turn_cpu_ms": _verdict("hostile_text_turn_cpu_ms", doc["hostile_text_turn_cpu_ms"]),
        "read_your_writes": {"value": doc["read_your_writes"], "target": "true", "met": doc["read_your_writes"]},
        "stack_rss_mib": _verdict("stack_rss_mib", doc["stack_rss_mib"]),
        "cold_tenant_p95_ms": _verdict("cold_tenant_p95_ms", doc["cold_tenant_p95_ms"]),
    }
    doc["search_p50_over_floor"] = _ratio(doc["search_p50_ms"], doc["search_floor_p50_ms"])
    # The floor measured again after the clients (none in a run before it): how far the machine's
    # speed moved between the ratios' two sides, and the speed ratios against that second floor.
    again = (raw.get("floor_again") or {}).get("context")
    if again:
        cpu_again = again.get("cpu_ms_per_call")
        doc["floor_again"] = {
            "p50_ms": again["total"]["p50_ms"], "cpu_ms_per_call": cpu_again,
            "p50_over_first": _ratio(again["total"]["p50_ms"], doc["floor_p50_ms"]),
            "cpu_over_first": _ratio(cpu_again, floor_cpu),
            "one_client_p50_over_it": _ratio(doc["one_client_context_p50_ms"], again["total"]["p50_ms"]),
            "throughput_over_it": _ratio(doc["context_calls_per_s"], _calls_per_s_on_cores(cores, cpu_again)),
        }
    doc["machine"] = machine or {}
    doc["detail"] = raw
    return doc


def _f(v: float | None) -> str:
    """A figure as printed: "-" when it was not measured."""
    return "-" if v is None else f"{v:g}"


def _mark(verdict: dict[str, Any]) -> str:
    met = verdict["met"]
    state = "not measured" if met is None else "met" if met else "MISSED"
    return f"target {verdict['target']}: {state}"


def _cpu_by_process_lines(lat: dict[str, Any]) -> list[str]:
    """Where a context call's CPU goes: ms per call by kind of stack process, one client and many."""
    one = lat["one_client"]["context"].get("cpu_ms_per_call_by_process") or {}
    many = lat["context"].get("cpu_ms_per_call_by_process") or {}
    if not one and not many:
        return []
    header = f"CPU ms per context call by process{'':22}{'one client':>11}{str(lat['clients']) + ' clients':>11}"
    names = sorted({*one, *many}, key=lambda n: -(one.get(n) or many.get(n) or 0.0))
    return [header, *(f"  {name:54}{_f(one.get(name)):>11}{_f(many.get(name)):>11}" for name in names)]


def _ingest_cpu_lines(ingest: dict[str, Any]) -> list[str]:
    """Where a turn's CPU goes in batch ingest: ms per turn by kind of stack process."""
    by_process = ingest.get("cpu_ms_per_turn_by_process") or {}
    if not by_process:
        return []
    lines = [f"CPU ms per ingested turn, every stack process: {_f(ingest.get('stack_cpu_ms_per_turn'))}; by process"]
    lines += [f"  {name:54}{_f(ms):>11}" for name, ms in by_process.items()]
    return lines


def _against_baseline(row: dict[str, Any]) -> str:
    """How much slower (or faster) a model is than the baseline: ingest as a factor, a query in ms."""
    slowdown, extra = row.get("ingest_slowdown"), row.get("query_extra_ms")
    parts = []
    if slowdown:
        parts.append(f"{slowdown:.1f}x slower ingest" if slowdown >= 1 else f"{1 / slowdown:.1f}x faster ingest")
    if extra is not None:
        parts.append(f"{extra:+.1f} ms per query")
    return ", ".join(parts) or "-"


def embedder_lines(embedders: dict[str, dict[str, Any]] | None) -> list[str]:
    """The table of local embedding models (:func:`~strata_bench.service.floor.compare_embedders`):
    passages/s on one thread and on all cores, one query's p50 / p95 ms, and the slowdown against
    the baseline; the configured model marked ``*``. No lines for a run that did not measure them."""
    if not embedders:
        return []
    cores = next((r["all_cores_threads"] for r in embedders.values() if "all_cores_threads" in r), "all")
    lines = [f"{'model':38}{'passages/s':>12}{'passages/s':>12}{'query ms':>15}   against {BASELINE_EMBEDDER}",
             f"{'':38}{'1 thread':>12}{f'{cores} cores':>12}{'p50 / p95':>15}"]
    for provider, row in embedders.items():
        label = f"{provider} ({row['model']}){' *' if row.get('configured') else ''}"
        if "not_installed" in row:
            lines.append(f"{label:38}  not installed ({row['not_installed']})")
            continue
        query = " / ".join("-" if v is None else f"{v:.1f}" for v in (row["query_p50_ms"], row["query_p95_ms"]))
        versus = "baseline" if provider == BASELINE_EMBEDDER else _against_baseline(row)
        lines.append(f"{label:38}{_f(row['one_thread_passages_per_s']):>12}{_f(row['all_cores_passages_per_s']):>12}"
                     f"{query:>15}   {versus}")
    measured = next((r for r in embedders.values() if "texts" in r), None)
    if measured:
        lines.append(f"({measured['texts']} turn texts embedded as stored text; {measured['queries']} queries, one per "
                     f"call, on {measured['query_threads']} thread(s); * the configured model)")
    return lines


def _floor_again_lines(doc: dict[str, Any]) -> list[str]:
    again = doc.get("floor_again")
    if not again:
        return []
    return [(f"the floor again after the clients: p50 {_f(again['p50_ms'])} ms, CPU {_f(again['cpu_ms_per_call'])} ms "
             f"a call ({_f(again['p50_over_first'])}x and {_f(again['cpu_over_first'])}x the first: how far the "
             f"machine's speed moved between the two sides); "
             f"against it one client {_f(again['one_client_p50_over_it'])}x, "
             f"throughput {_f(again['throughput_over_it'])}x")]


def format_report(doc: dict[str, Any]) -> str:
    raw, t = doc["detail"], doc["targets"]
    sizes, lat, floor = raw["sizes"], raw["latency"], raw["floor"]
    one = lat["one_client"]

    ingest = raw["ingest"]
    lines = [
        (f"\n== latency: one tenant, {sizes['turns']} turns and {sizes['documents']} documents; "
         f"{lat['clients']} concurrent HTTP clients =="),
        f"{'':26}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'calls':>7}",
    ]
    rows = (
        (f"/v1/context, {lat['clients']} clients", lat["context"]), ("/v1/context, one client", one["context"]),
        (f"/v1/search, {lat['clients']} clients", lat["search"]), ("/v1/search, one client", one["search"]),
        ("floor (context query)", floor["context"]["total"]), ("floor (search query)", floor["search"]["total"]),
    )
    for label, row in rows:
        lines.append(f"{label:26}{_f(row['p50_ms']):>8}{_f(row['p95_ms']):>8}{_f(row['p99_ms']):>8}{row['calls']:>7}")
    parts = floor["context"]
    lines += [
        (f"floor = embed {_f(parts['embed']['p50_ms'])} + episodic {_f(parts['episodic']['p50_ms'])} + semantic "
         f"{_f(parts['semantic']['p50_ms'])}"
         + "".join(f" + {part} {_f(parts[part]['p50_ms'])}" for part in ("working", "assemble") if part in parts)
         + f" ms (p50s), in this process over {raw['floor_source']}"),
        (f"context p50 {_f(doc['context_p50_ms'])} ms: {_mark(t['context_p50_ms'])}; "
         f"p95 {_f(doc['context_p95_ms'])} ms: {_mark(t['context_p95_ms'])}"),
        (f"context p50 / floor p50 = {_f(t['context_p50_over_floor']['value'])}x: {_mark(t['context_p50_over_floor'])}"
         f" (search: {_f(doc['search_p50_over_floor'])}x)"),
        (f"one-client context p50 / floor p50 = {_f(t['one_client_p50_over_floor']['value'])}x: "
         f"{_mark(t['one_client_p50_over_floor'])}"),
        (f"contexts with a layer missing: {lat['context']['calls_with_missing_layers']} of {lat['context']['calls']}; "
         f"throughput {lat['context']['calls_per_s']} contexts/s, {lat['search']['calls_per_s']} searches/s"),
        (f"CPU per context call, every stack process: {_f(doc['context_cpu_ms_per_call'])} ms with "
         f"{lat['clients']} clients, {_f(doc['one_client_cpu_ms_per_call'])} ms with one; the floor "
         f"{_f(doc['floor_cpu_ms_per_call'])} ms; ratio {_f(t['context_cpu_over_floor']['value'])}x: "
         f"{_mark(t['context_cpu_over_floor'])}"),
        (f"{lat['clients']}-client throughput {_f(doc['context_calls_per_s'])} contexts/s against the floor's "
         f"{_f(doc['floor_calls_per_s_on_cores'])} on {(doc.get('machine') or {}).get('cpu_count', '?')} cores "
         f"(cores / floor CPU per call): {_f(t['throughput_over_floor']['value'])}x: "
         f"{_mark(t['throughput_over_floor'])}"),
        *_floor_again_lines(doc),
        *_cpu_by_process_lines(lat),
        *_hostile_lines(doc),
        "\n== ingest ==",
        (f"batch endpoint: {_f(doc['ingest_turns_per_s'])} turns/s sustained ({ingest['turns']} turns in "
         f"{ingest['seconds']} s, batches of {ingest['batch_turns']}, {ingest['writers']} writers): "
         f"{_mark(t['ingest_turns_per_s'])}"),
        (f"embedder floor: {_f(doc['embed_floor_turns_per_s'])} turns/s in this process "
         f"({raw['embed_floor'].get('threads', '?')} thread(s), as configured); floor / ingest = "
         f"{_f(t['embed_floor_over_ingest']['value'])}x: {_mark(t['embed_floor_over_ingest'])}"),
        (f"embedder on one thread {_f(doc['embed_one_thread_turns_per_s'])} turns/s, on all "
         f"{raw['embed_floor'].get('all_cores_threads', '?')} cores {_f(doc['embed_all_cores_turns_per_s'])} turns/s; "
         f"ingest / all-cores embedder = {_f(t['ingest_over_all_cores_floor']['value'])}x: "
         f"{_mark(t['ingest_over_all_cores_floor'])}"),
        *_ingest_cpu_lines(ingest),
        (f"counting the background summaries (waited {_f(ingest.get('summaries_wait_s'))} s after the last batch): "
         f"{_f(doc['ingest_with_summaries_turns_per_s'])} turns/s; {ingest['documents']} documents in "
         f"{ingest['documents_seconds']} s"),
        (f"read-your-writes (a turn with a unique marker ranked first by the very next search, "
         f"{len(raw['read_your_writes']['trials'])} trials): {str(doc['read_your_writes']).lower()} (ranks "
         f"{', '.join(str(o.get('rank')) for o in raw['read_your_writes']['trials'])})"),
        *(f"  above the turn of {o['sentence'][:60]!r}: {a['kind']} score {a['score']} relevance {a['relevance']}: "
          f"{a['text'][:100]!r}" for o in raw["read_your_writes"]["trials"] for a in o.get("above", [])),
        *(["\n== embedding models: ingest and query latency, in this process ==", *embedder_lines(raw["embedders"])]
          if raw.get("embedders") else []),
        "\n== scale ==",
    ]
    scale = raw["scale"]
    if scale.get("skipped"):
        lines.append(f"skipped: {scale['skipped']}")
    else:
        lines.append(f"{doc['tenants']} tenants ingested in {scale['ingest_seconds']} s "
                     f"({len(scale.get('ingest_retries') or [])} writes retried); "
                     f"stack memory {_f(doc['stack_rss_mib'])} MiB RSS: {_mark(t['stack_rss_mib'])}")
        for when, name in (("after ingest", "memory_loaded"), ("after every tenant's context", "memory_after_answers")):
            loaded = scale.get(name)
            if loaded:
                lines.append(f"  {when}: RSS {loaded['rss_mib']} MiB, PSS {loaded['pss_mib']} MiB over "
                             f"{loaded['processes']} processes; largest: "
                             + ", ".join(f"{p['process']} {p['rss_mib']}" for p in loaded["largest"][:4]))
        for when, name in (("after ingest", "tenants_in_memory_after_ingest"),
                           ("after every tenant's context", "tenants_in_memory_after_answers")):
            if scale.get(name):
                lines.append(f"  tenants in memory per shard {when}: "
                             + "; ".join(f"{layer} {'/'.join(map(str, n))}" for layer, n in scale[name].items()))
        resident = scale.get("resident")
        if resident:
            gaps = ", ".join(f"{layer} {n}" for layer, n in sorted(resident["first_calls_missing_layer"].items()))
            lines.append(f"  context answered for {resident['answered']} of {doc['tenants']} tenants, 4 at a time "
                         f"({resident['complete']} with every layer{'; a layer missing: ' + gaps if gaps else ''}); "
                         f"p50 {_f(resident['calls'][0]['p50_ms'])} ms, p95 {_f(resident['calls'][0]['p95_ms'])} ms")
        if "cold_sample" in scale:
            gaps = ", ".join(f"{layer} {n}" for layer, n in sorted(scale["cold_calls_missing_layer"].items()))
            lines.append(f"  {scale['cold_sample']} tenants, one at a time, after restarting the layer actors "
                         f"({scale['restart_s']} s): {scale['cold_complete']} cold contexts with every layer"
                         f"{'; a layer missing: ' + gaps if gaps else ''}")
            lines.append(f"  cold tenant p95 {_f(doc['cold_tenant_p95_ms'])} ms (p50 {_f(scale['cold']['p50_ms'])}): "
                         f"{_mark(t['cold_tenant_p95_ms'])}; warm p95 {_f(doc['warm_tenant_p95_ms'])} ms "
                         f"(p50 {_f(scale['warm']['p50_ms'])})")
        else:
            lines.append(f"  cold tenants: {scale['cold']['skipped']}")
    lookups = raw.get("key_lookup_ms") or {}
    if any(v is not None for v in lookups.values()):
        lines.append("API-key store read (a replica reads each key at most about once a second, "
                     "refreshed ahead of use): "
                     f"{_f(lookups.get('after_one_tenant'))} ms after the latency tenant, "
                     f"{_f(lookups.get('after_scale'))} ms after the scale tenants (median, from this process)")
    lines.append("phases (s): " + ", ".join(f"{k} {v:g}" for k, v in raw["phase_seconds"].items()))
    return "\n".join(lines)


def _hostile_lines(doc: dict[str, Any]) -> list[str]:
    """The hostile-neighbour phase: the clients' context latency without it and with it, and what
    the neighbour sent and got back."""
    raw, lat = doc["detail"], doc["detail"]["latency"]
    hostile = raw.get("hostile") or {"skipped": "not run"}
    head = (f"\n== hostile neighbour: {lat['clients']} clients' /v1/context while one more client sends "
            "worst-case inputs ==")
    if "skipped" in hostile:
        return [head, f"skipped: {hostile['skipped']}"]

    lines = [head, f"{'':26}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'calls':>7}{'calls/s':>9}"]
    for label, row in (("without (latency phase)", lat["context"]), ("with the neighbour", hostile["context"])):
        lines.append(f"{label:26}{_f(row['p50_ms']):>8}{_f(row['p95_ms']):>8}{_f(row['p99_ms']):>8}{row['calls']:>7}"
                     f"{_f(row.get('calls_per_s')):>9}")
    verdict = doc["targets"]["hostile_p99_ratio"]
    errors = ", ".join(f"{name} {n}" for name, n in hostile["context"].get("errors", {}).items()) or "none"
    lines.append(f"p99 with / without = {_f(verdict['value'])}x: {_mark(verdict)}; the clients' failed calls: "
                 f"{errors}; contexts with a layer missing: {hostile['context'].get('calls_with_missing_layers', 0)}")
    with_cpu, without_cpu = hostile["context"].get("stack_cpu_ms_per_call"), lat["context"].get("stack_cpu_ms_per_call")
    if with_cpu is not None and without_cpu is not None:
        by_process = hostile["context"].get("cpu_ms_per_call_by_process", {})
        top = ", ".join(f"{name} {ms}" for name, ms in list(by_process.items())[:4])
        extra = (with_cpu - without_cpu) * hostile["context"]["calls"]
        lines.append(f"the stack's CPU per client call: {_f(with_cpu)} ms with the neighbour, "
                     f"{_f(without_cpu)} without "
                     f"(the neighbour's share over the phase: {extra / 1000:.2f} s); by process: {top}")
    sent = hostile["neighbour"]
    what = {"search": f"/v1/search, {sent['query_chars']}-character queries, the bench's key",
            "bad_keys": f"/v1/context, random wrong keys, {sent['flood']} at once",
            "maximal_body": f"/v1/documents, {sent['body_bytes']:,}-byte body, a wrong key"}
    lines.append(f"the neighbour (source address {sent.get('source_address', '?')}; {sent['rounds_completed']} rounds "
                 f"completed; queries: {', '.join(sent['queries'])}):")
    for kind, label in what.items():
        row = sent[kind]
        statuses = ", ".join(f"{status} x{n}" for status, n in row["statuses"].items()) or "none answered"
        lines.append(f"  {label}: {row['calls']} completed, p50 {_f(row['p50_ms'])} ms, "
                     f"p99 {_f(row['p99_ms'])} ms; {statuses}")
    return lines + _text_write_lines(doc)


def _text_write_lines(doc: dict[str, Any]) -> list[str]:
    """CPU to write each hostile text in this process, other scripts beside the English worst cases."""
    texts = (doc["detail"].get("hostile") or {}).get("text_write_cpu_ms")
    if not texts:
        return []
    lines = [("writing each hostile text in this process, CPU ms (turn: redacted, embedded, entities, indexed, in "
              "working memory; document: its text work, the embedder aside):"),
             f"  {'':30}{'chars':>7}{'turn':>8}{'document':>10}{'children':>10}"]
    for name, row in texts.items():
        lines.append(f"  {name:30}{row['chars']:>7}{_f(row['turn_ms']):>8}{_f(row['document_ms']):>10}"
                     f"{row['document_children']:>10}")
    verdict = doc["targets"]["hostile_text_turn_cpu_ms"]
    lines.append(f"  the costliest turn: {_f(verdict['value'])} ms, {_mark(verdict)}")
    return lines


def plot(doc: dict[str, Any], path: str) -> None:
    """Latency percentiles against the floor, and ingest against the embedder floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat, ing) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [2, 1]})
    endpoints = ("context", "search")
    for n, (name, colour) in enumerate((("p50", "#4c72b0"), ("p95", "#55a868"), ("p99", "#c44e52"))):
        values = [doc[f"{e}_{name}_ms"] or 0 for e in endpoints]
        lat.bar([i + (n - 1.5) * 0.2 for i in range(2)], values, 0.2, label=f"HTTP {name}", color=colour)
    floors = [doc["floor_p50_ms"] or 0, doc["search_floor_p50_ms"] or 0]
    lat.bar([i + 1.5 * 0.2 for i in range(2)], floors, 0.2, label="in-process floor p50", color="#999999")
    lat.axhline(40, color="#4c72b0", ls="--", lw=1, label="context p50 target")
    lat.axhline(80, color="#55a868", ls="--", lw=1, label="context p95 target")
    lat.set_xticks(range(2), [f"/v1/{e}" for e in endpoints])
    lat.set_yscale("log")  # the floor is often two orders below the HTTP figures
    highest = max([doc[f"{e}_{n}_ms"] or 0 for e in endpoints for n in ("p50", "p95", "p99")] + [100])
    lat.set_ylim(top=highest * 8)  # room for the legend above the bars
    lat.set_ylabel("ms (log scale)")
    lat.set_title(f"latency, {doc['detail']['latency']['clients']} concurrent clients")
    lat.legend(fontsize=7, loc="upper center", ncols=3)
    ing.bar(["HTTP batch", "embedder,\nas set", "embedder,\nall cores"],
            [doc["ingest_turns_per_s"], doc["embed_floor_turns_per_s"], doc.get("embed_all_cores_turns_per_s") or 0],
            color=["#4c72b0", "#999999", "#666666"])
    ing.axhline(100, color="#c44e52", ls="--", lw=1, label="target")
    ing.set_ylabel("turns / s")
    ing.set_title("ingest")
    ing.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
