"""Fitting what the layers returned into one context of at most ``max_tokens``.

Working memory comes first in importance but last in the text (it is the
most recent); the other layers' items are taken by score until the budget
is spent, then shown chronologically. The result is counted with the same
tokenizer as working memory, and is never over the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping, Sequence

from strata.schema import ContextItem, ContextSection
from strata.tokens import TokenCounter

__all__ = ["AssembledContext", "assemble_context", "LAYER_TITLES"]

LAYER_TITLES = {
    "episodic": "Earlier conversations (episodic memory)",
    "semantic": "Knowledge (semantic memory)",
    "procedural": "Procedures that worked before (procedural memory)",
    "working": "Current session (working memory)",
}


@dataclass(frozen=True)
class AssembledContext:
    text: str
    sections: list[ContextSection]
    messages: list[dict[str, str]]
    tokens: int


def _item_line(item: ContextItem) -> str:
    when = item.timestamp.strftime("%Y-%m-%d %H:%M") if isinstance(item.timestamp, datetime) else ""
    prefix = f"[{when}] " if when else ""
    if item.kind == "summary":
        prefix += "(summary) "
    if item.source is not None:
        prefix += f"[{item.source.title or item.source.doc_id}] "
    return "- " + prefix + " ".join(item.text.split())


def _narrower(item: ContextItem) -> list[ContextItem]:
    """Smaller stand-ins for a passage that does not fit: the children that matched,
    best first, cut out of it (a parent is returned for context, but a child is
    what matched, and it is a quarter of the size)."""
    if item.source is None or not item.matched:
        return []
    out = []
    for child in item.matched:
        lo, hi = child.start - item.source.start, child.end - item.source.start
        if 0 <= lo < hi <= len(item.text):
            source = item.source.model_copy(update={"start": child.start, "end": child.end})
            out.append(item.model_copy(update={"text": item.text[lo:hi], "source": source, "matched": []}))
    return out


def _render(sections: Sequence[tuple[str, Sequence[ContextItem]]], messages: Sequence[dict[str, str]]) -> str:
    blocks = []
    for layer, items in sections:
        if items:
            ordered = sorted(items, key=lambda i: (i.timestamp is None, i.timestamp or datetime.min))
            blocks.append(f"## {LAYER_TITLES.get(layer, layer)}\n" + "\n".join(_item_line(i) for i in ordered))
    if messages:
        lines = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        blocks.append(f"## {LAYER_TITLES['working']}\n{lines}")
    return "\n\n".join(blocks)


def assemble_context(
    *,
    working_messages: Sequence[dict[str, str]],
    layer_items: Mapping[str, Sequence[ContextItem]],
    max_tokens: int,
    counter: TokenCounter,
    min_relative_score: float = 0.0,
) -> AssembledContext:
    """Select and render items so the rendered text has at most ``max_tokens`` tokens.

    An item scoring below ``min_relative_score`` × its layer's best score is
    left out even when it would fit: a spare budget is no reason to pad the
    context with what barely relates to the message.

    Items of each layer are taken best score first; working messages are kept
    newest first. When something must go, the lowest-scored layer item goes
    before any working message, and the oldest working message goes next.
    """
    messages = list(working_messages)
    chosen: dict[str, list[ContextItem]] = {layer: [] for layer in layer_items}
    floors: dict[str, float] = {}
    for layer, items in layer_items.items():
        best = max((i.score for i in items), default=0.0)
        # Cosine scores may be negative: a floor relative to them means nothing.
        floors[layer] = min_relative_score * best if min_relative_score > 0 and best > 0 else float("-inf")
    candidates = sorted(
        (
            (item.score, layer, n, item)
            for layer, items in layer_items.items()
            for n, item in enumerate(items)
            if item.score >= floors[layer]
        ),
        key=lambda c: (-c[0], c[1], c[2]),
    )

    def size() -> int:
        return counter.count(_render(list(chosen.items()), messages))

    # Drop the oldest working messages only if they alone exceed the budget.
    while messages and size() > max_tokens:
        messages.pop(0)
    # Per-line costs keep selection linear; the exact count below settles the
    # few tokens that joining lines may add or save.
    left = max_tokens - size()
    for _, layer, _, item in candidates:
        header = counter.count(LAYER_TITLES.get(layer, layer)) + 4 if not chosen[layer] else 0
        for version in (item, *_narrower(item)):
            cost = counter.count(_item_line(version)) + 1 + header
            if cost <= left:
                chosen[layer].append(version)
                left -= cost
                break
    while size() > max_tokens:
        worst = min(
            ((item.score, layer) for layer, items in chosen.items() for item in items), default=None
        )
        if worst is None:
            break
        items = chosen[worst[1]]
        items.pop(min(range(len(items)), key=lambda n: items[n].score))
    text = _render(list(chosen.items()), messages)
    tokens = counter.count(text)
    sections = [
        ContextSection(layer=layer, items=items, tokens=counter.count(_render([(layer, items)], [])))
        for layer, items in chosen.items()
    ]
    sections.append(
        ContextSection(
            layer="working",
            items=[
                ContextItem(layer="working", kind=m["role"], id=str(n), text=m["content"], score=1.0)
                for n, m in enumerate(messages)
            ],
            tokens=counter.count(_render([], messages)),
        )
    )
    return AssembledContext(text=text, sections=sections, messages=messages, tokens=tokens)
