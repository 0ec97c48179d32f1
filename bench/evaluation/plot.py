"""Charts of evaluation results: retrieval recall per category (a grouped bar chart), and the
context evaluation's recall against tokens."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["plot_context", "plot_k", "plot_results"]

_RECALL_KEY = re.compile(r"recall@(\d+)")


def plot_k(results: Mapping[str, Any]) -> int:
    """The k :func:`plot_results` shows: 10 if reported, else the largest k ≤ 10, else the largest k.

    Raises:
        ValueError: If no retriever reports any ``recall@<k>``.
    """
    ks: set[int] = set()
    for report in results.get("retrievers", {}).values():
        for section in [report.get("overall", {}), *report.get("categories", {}).values()]:
            ks.update(int(m[1]) for key in section if (m := _RECALL_KEY.fullmatch(key)))
    if not ks:
        raise ValueError("no recall@<k> figures to plot")
    small = [k for k in ks if k <= 10]
    return max(small) if small else max(ks)


def plot_results(results: Mapping[str, Any], out_path: str | os.PathLike[str]) -> None:
    """Write a PNG of recall@k per category and overall, one bar per retriever, values labelled.

    Args:
        results: ``{"retrievers": {name: {"overall": {...}, "categories": {...}}}}``,
            each report as :meth:`~strata_bench.evaluation.metrics.Scoreboard.report` returns it.
        out_path: Where to write the image; its suffix picks the format.

    Raises:
        ValueError: If there are no retrievers or no recall figures.
    """
    # Figure + Agg canvas directly: no pyplot, so no global backend state and no display.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    retrievers: Mapping[str, Any] = results.get("retrievers", {})
    if not retrievers:
        raise ValueError("no retrievers to plot")
    k = plot_k(results)
    key = f"recall@{k}"
    categories = sorted({c for report in retrievers.values() for c in report.get("categories", {})})
    groups = [*categories, "overall"]

    def section(report: Mapping[str, Any], group: str) -> Mapping[str, Any]:
        found: Mapping[str, Any] = (
            report.get("overall", {}) if group == "overall" else report.get("categories", {}).get(group, {})
        )
        return found

    def label(group: str) -> str:
        counts = {section(r, group).get("questions") for r in retrievers.values()} - {None}
        return f"{group}\n(n={counts.pop()})" if len(counts) == 1 else group

    width = 0.8 / len(retrievers)
    figure = Figure(figsize=(max(6.0, 1.0 + len(groups) * (0.5 + 0.35 * len(retrievers))), 4.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for offset, (name, report) in enumerate(retrievers.items()):
        values = [float(section(report, g).get(key, math.nan)) for g in groups]
        xs = [i - 0.4 + width * (offset + 0.5) for i in range(len(groups))]
        bars = axes.bar(xs, [0.0 if math.isnan(v) else v for v in values], width, label=name)
        axes.bar_label(bars, labels=["–" if math.isnan(v) else f"{v:.2f}" for v in values], fontsize=7, padding=2)
    axes.set_xticks(range(len(groups)), [label(g) for g in groups], fontsize=8)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel(key)
    axes.set_title(f"Turn-level {key} by category")
    axes.legend(fontsize=8, loc="upper left")
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(os.fspath(out_path), dpi=120)


def plot_context(results: Mapping[str, Any], out_path: str | os.PathLike[str]) -> None:
    """Write a PNG of evidence recall against mean tokens returned, one line per method,
    each point labelled with its budget.

    Args:
        results: The document :func:`~strata_bench.evaluation.context.evaluate_context` returns.
        out_path: Where to write the image; its suffix picks the format.

    Raises:
        ValueError: If there are no methods.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    methods: Mapping[str, Any] = results.get("methods", {})
    if not methods:
        raise ValueError("no methods to plot")
    figure = Figure(figsize=(6.5, 4.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for name, report in methods.items():
        rows = report["budgets"]
        xs, ys = [r["tokens_mean"] for r in rows], [r["recall"] for r in rows]
        axes.plot(xs, ys, marker="o", label=name)
        for row, x, y in zip(rows, xs, ys, strict=True):
            axes.annotate(f"{row['budget_tokens']:,}", (x, y), fontsize=7, textcoords="offset points", xytext=(3, -9))
    history = results.get("history_tokens", {}).get("mean")
    axes.set_xscale("log", base=2)
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("tokens returned (mean per question; labels: the budget)")
    axes.set_ylabel("evidence recall in the context")
    axes.set_title(f"Context: recall against tokens (full history: {history:,.0f} tokens)" if history
                   else "Context: recall against tokens", fontsize=10)
    axes.legend(fontsize=8, loc="lower right")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(os.fspath(out_path), dpi=120)
