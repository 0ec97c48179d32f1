"""The semantic benchmark's figures as plain-text tables."""

from __future__ import annotations

from typing import Any

from strata_bench.semantic.measure import SEARCH_PATHS

__all__ = ["format_report"]

def _latency_table(search: dict[str, Any]) -> list[str]:
    lines = [
        (
            f"(after {search.get('waited_for_idle_server_s', 0):.0f} s waiting for milvus-lite to go idle; "
            "hits: mean results returned)"
        ),
        f"{'':26}{'without query embedding':>24}   {'with query embedding':>24}",
        f"{'path':26}{'p50':>8}{'p95':>8}{'p99':>8}   {'p50':>8}{'p95':>8}{'p99':>8}   hits",
    ]
    for key, _, _ in SEARCH_PATHS:
        row = search[key]
        ex = row["excluding_embedding"]
        inc = row.get("including_embedding")
        with_embedding = "".join(f"{inc[p]:8.2f}" for p in ("p50_ms", "p95_ms", "p99_ms")) if inc else f"{'-':>8}" * 3
        lines.append(
            f"{row['label']:26}"
            + "".join(f"{ex[p]:8.2f}" for p in ("p50_ms", "p95_ms", "p99_ms"))
            + "   "
            + with_embedding
            + f"   {row['mean_hits']:.1f}"
        )
    q = search["query_embedding"]
    lines.append(f"{'query embedding alone':26}" + "".join(f"{q[p]:8.2f}" for p in ("p50_ms", "p95_ms", "p99_ms")))
    return lines


def format_report(result: dict[str, Any]) -> str:
    """The figures of :func:`run` as plain-text tables."""
    s, big = result["small"], result["large"]
    n = s["children"]
    out = [
        (
            f"== 1. Index throughput: {n:,} children ({s['documents']} documents, {s['parents']} parents, "
            f"~{s['child_tokens_mean']:.0f} tokens a child), one tenant =="
        ),
        f"{'stage':34}{'seconds':>9}{'children/s':>12}{'share':>8}",
    ]
    total = s["end_to_end"]["seconds"]
    labels = {
        "chunk": "chunk",
        "extract": "extract entities",
        "prepare_other": "prepare, other",
        "embed": "embed (slices of 64)",
        "write": "write (Milvus, durable)",
        "index": "index (in memory)",
    }
    for key, label in labels.items():
        st = s["stages"][key]
        out.append(f"{label:34}{st['seconds']:9.2f}{st['children_per_s']:12.1f}{100 * st['seconds'] / total:7.1f}%")
    e2e, floor = s["end_to_end"], s["embedder_floor"]
    out.append(f"{'end to end':34}{e2e['seconds']:9.2f}{e2e['children_per_s']:12.1f}")
    out.append(f"{'embedder floor (one call, same)':34}{floor['seconds']:9.2f}{floor['children_per_s']:12.1f}")
    out += [
        "",
        (
            f"== 2. Search latency at {n:,} children: {s['search']['queries']} queries, "
            f"top_k {s['search']['top_k']}, ms =="
        ),
        *_latency_table(s["search"]),
    ]
    pool, mem = big["pool"], big["memory"]
    reuse = big["children"] / max(pool["children"], 1)
    out += [
        "",
        (
            f"== 3. {big['children']:,} children ({big['documents']:,} documents, {big['parents']:,} parents, "
            f"{big['entities']:,} entities), one tenant =="
        ),
        (
            f"built from a pool of {pool['children']:,} real children ({pool['distinct_texts']:,} distinct texts, "
            f"{pool['documents']} documents) with their real vectors, each used ~{reuse:.1f}x under new document ids"
        ),
        f"({pool['embedded_now']:,} pool children embedded after stage 1 in {pool['embed_s']:.1f} s, "
        "not counted below)",
        f"{'step':34}{'seconds':>9}{'children/s':>12}",
    ]
    w, ix, ld = big["write"], big["index"], big["load"]
    out.append(
        f"{'write (Milvus, durable)':34}{w['seconds']:9.2f}{w['children_per_s']:12.1f}   "
        f"{w['rows_per_s']:.0f} rows/s, p50 {w['per_document_p50_ms']:.1f} ms a document"
    )
    out.append(
        f"{'index (in memory)':34}{ix['seconds']:9.2f}{ix['children_per_s']:12.1f}   "
        f"p50 {ix['per_document_p50_ms']:.2f} ms a document"
    )
    out.append(
        f"{'load (fresh SemanticMemory.load)':34}{ld['seconds']:9.2f}{ld['children_per_s']:12.1f}   "
        f"scan {ld['scan_s']:.2f} s + rebuild {ld['rebuild_s']:.2f} s "
        f"(after {ld['waited_for_idle_server_s']:.0f} s waiting for the server to go idle)"
    )
    server = mem["milvus_server_rss_mib"]
    out.append(
        f"memory: RSS {mem['rss_before_index_mib']:.0f} MiB before indexing; +{mem['rss_index_delta_mib']:.0f} MiB "
        "for the indexed tenant (its copies share the pool's texts and entities); "
        f"+{mem['rss_load_delta_mib']:.0f} MiB after loading a copy (peak +{mem['rss_load_peak_delta_mib']:.0f} MiB "
        "during the load)"
    )
    out.append(
        f"memory: the loaded tenant's objects hold {mem['retained_by_loaded_tenant_mib']:.0f} MiB (sys.getsizeof "
        "over everything it reaches: the in-memory cost of a tenant)"
        + (f"; milvus-lite server RSS {server:.0f} MiB" if server is not None else "")
    )
    out += [
        "",
        (
            f"== Search latency at {big['children']:,} children (the loaded copy): {big['search']['queries']} "
            f"queries, top_k {big['search']['top_k']}, ms =="
        ),
        *_latency_table(big["search"]),
    ]
    return "\n".join(out)
