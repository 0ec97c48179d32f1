"""Fitting what the layers returned into one context of at most ``max_tokens``.

Working memory comes first in importance but last in the text (it is the
most recent). The budget it leaves is shared among the other layers in
proportion to their weights, because their scores are not comparable: the
episodic and semantic layers return fused rank scores, the procedural layer
a cosine-based score in [0, 1]. Each layer fills its share best score first;
what a layer leaves unused goes to the remaining items of all layers, ranked
by *normalised* score (score / the layer's best, times its weight). Items are
shown chronologically. The result is counted with the same tokenizer as
working memory, and is never over the budget.

When items are left out and an LLM is configured, the caller may condense
them instead (:func:`strata.context.refine.refine_items`) and render the condensed
text with :func:`render_refined`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from strata.memo import BoundedMemo
from strata.providers.tokens import CountMemo, TokenCounter
from strata.schema import ContextItem, ContextSection

__all__ = ["LAYER_TITLES", "AssembledContext", "assemble_context", "refined_budget", "render_refined"]

LAYER_TITLES = {
    "episodic": "Earlier conversations (episodic memory)",
    "semantic": "Knowledge (semantic memory)",
    "procedural": "Procedures that worked before (procedural memory)",
    "refined": "Relevant memory (condensed)",
    "working": "Current session (working memory)",
}

# Bounds the joins an estimate cannot see ("- " of the refined line, a BPE
# merge across a line break); render_refined checks the exact count anyway.
_REFINED_SLACK_TOKENS = 4


@dataclass(frozen=True)
class AssembledContext:
    """A rendered context and what went into it.

    ``dropped`` holds the items above the relevance floor that were left out
    for lack of budget, best (normalised score) first; an item replaced by a
    matched child is in, not dropped. ``budgets`` is the share of tokens each
    layer had reserved before leftovers were passed on (0 for a layer with no
    candidates or weight 0).
    """

    text: str
    sections: list[ContextSection]
    messages: list[dict[str, str]]
    tokens: int
    dropped: list[ContextItem] = field(default_factory=list)
    budgets: dict[str, int] = field(default_factory=dict)
    #: Items that went in only as a smaller part of themselves (a passage as its matched child), as they were.
    narrowed: list[ContextItem] = field(default_factory=list)

    @property
    def cut(self) -> bool:
        """Whether anything relevant was left out or cut down to fit."""
        return bool(self.dropped or self.narrowed)


@dataclass(frozen=True)
class _Candidate:
    layer: str
    rank: int  # position in its layer, best score first
    item: ContextItem
    norm: float

    @property
    def order(self) -> tuple[float, float, str, int]:
        """Sort key, best first; equal normalised scores fall back to the raw score."""
        return (-self.norm, -self.item.score, self.layer, self.rank)


#: Texts under this many characters are made one line each time (about a microsecond).
_REMEMBERED_LINE_CHARS = 256
#: Long texts made one line, remembered: a passage of a few thousand characters took ~40 us to
#: collapse, every time it came back (16 per context). At most 4 Mi characters are kept (texts
#: and their lines: at most 16 MiB), the least recently used forgotten first.
_one_lines = BoundedMemo[str, str](max_weight=2**22, weight=lambda text, line: len(text) + len(line))


def _one_line(text: str) -> str:
    """``text`` with every run of whitespace made one space."""
    if len(text) < _REMEMBERED_LINE_CHARS:
        return " ".join(text.split())
    return _one_lines.get(text, lambda: " ".join(text.split()))


def _days(start: datetime, end: datetime) -> str:
    """``[start, end)`` of whole days as a reader says it: one day, or the first and the last."""
    last = end - timedelta(days=1)
    if last <= start:
        return start.strftime("%Y-%m-%d")
    return f"{start:%Y-%m-%d} to {last:%Y-%m-%d}"


def _same_day(said: datetime | None, start: datetime, end: datetime) -> bool:
    """Whether ``[start, end)`` is just the day ``said`` falls on ("today": nothing to add)."""
    return isinstance(said, datetime) and end - start <= timedelta(days=1) and start <= said < end


def _item_line(item: ContextItem) -> str:
    when = item.timestamp.strftime("%Y-%m-%d %H:%M") if isinstance(item.timestamp, datetime) else ""
    prefix = f"[{when}] " if when else ""
    if item.kind == "summary":
        prefix += "(summary) "
    told = item.speaks_of
    if told is not None and told.start and told.end and not _same_day(item.timestamp, told.start, told.end):
        prefix += f"(of {_days(told.start, told.end)}) "
    if item.superseded_by:
        prefix += "(earlier; a later turn covers this) "
    if item.source is not None:
        prefix += f"[{item.source.title or item.source.doc_id}] "
    return "- " + prefix + _one_line(item.text)


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


def _versions(item: ContextItem) -> Iterator[ContextItem]:
    """The item, then its narrower stand-ins, made only if the item does not fit."""
    yield item
    yield from _narrower(item)


class _Rendering:
    """One assembly's item lines and token counts, each made once: a line is rendered for its
    cost, again for every candidate text and for its section; the working block is counted
    when fitted, for the budget left, and for its section."""

    def __init__(self, counter: TokenCounter) -> None:
        self.count = CountMemo(counter).count
        self._lines: dict[int, tuple[ContextItem, str]] = {}  # the item is kept: its id stays its own

    def line(self, item: ContextItem) -> str:
        found = self._lines.get(id(item))
        if found is None:
            found = self._lines[id(item)] = (item, _item_line(item))
        return found[1]


def _render(
    sections: Sequence[tuple[str, Sequence[ContextItem]]],
    messages: Sequence[dict[str, str]],
    line: Callable[[ContextItem], str] = _item_line,
) -> str:
    blocks = []
    for layer, items in sections:
        if items:
            ordered = sorted(items, key=lambda i: (i.timestamp is None, i.timestamp or datetime.min))
            blocks.append(f"## {LAYER_TITLES.get(layer, layer)}\n" + "\n".join(line(i) for i in ordered))
    if messages:
        lines = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        blocks.append(f"## {LAYER_TITLES['working']}\n{lines}")
    return "\n\n".join(blocks)


def _working_section(messages: Sequence[dict[str, str]], count: Callable[[str], int]) -> ContextSection:
    return ContextSection(
        layer="working",
        items=[
            ContextItem(layer="working", kind=m["role"], id=str(n), text=m["content"], score=1.0)
            for n, m in enumerate(messages)
        ],
        tokens=count(_render([], messages)),
    )


def _fit_messages(
    messages: list[dict[str, str]],
    sections: Sequence[tuple[str, Sequence[ContextItem]]],
    max_tokens: int,
    count: Callable[[str], int],
) -> None:
    """Drop the oldest messages until ``sections`` plus the messages fit (in place)."""
    while messages and count(_render(sections, messages)) > max_tokens:
        messages.pop(0)


def _check_budget(max_tokens: int) -> None:
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")


def _layer_weights(layers: Sequence[str], layer_weights: Mapping[str, float] | None) -> dict[str, float]:
    weights = {layer: float((layer_weights or {}).get(layer, 1.0)) for layer in layers}
    for layer, weight in weights.items():
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"layer weight of {layer!r} must be a finite number >= 0, got {weight}")
    return weights


def _normalised(score: float, best: float, weight: float) -> float:
    # A layer whose best score is <= 0 has no scale to divide by; rank its best
    # item at 0, below the positive items of every other layer.
    return weight * (score / best if best > 0 else score - best)


def assemble_context(
    *,
    working_messages: Sequence[dict[str, str]],
    layer_items: Mapping[str, Sequence[ContextItem]],
    max_tokens: int,
    counter: TokenCounter,
    min_relative_score: float = 0.0,
    min_relevance: float = 0.0,
    layer_weights: Mapping[str, float] | None = None,
) -> AssembledContext:
    """Select and render items so the rendered text has at most ``max_tokens`` tokens.

    An item whose relevance (comparable across queries, :mod:`strata.retrieval.relevance`)
    is below ``min_relevance``, or whose score is below ``min_relative_score`` × its
    layer's best score, is left out even when it would fit: a spare budget is no
    reason to pad the context with what barely relates to the message. Items that
    carry no relevance are judged by score alone.

    Working messages are kept newest first; only when they alone exceed the
    budget is the oldest dropped. The rest is split among the layers that
    have candidates, in proportion to ``layer_weights``; each layer fills its
    share best score first (a passage too big for it gives way to its matched
    children). Unused shares go to the remaining items of all layers by
    normalised score. When the exact count is over, the item with the lowest
    normalised score goes first.

    Args:
        layer_weights: weight per layer; ``None`` or a missing layer means 1.0.
            A layer of weight 0 has no reserved share but may use leftovers.

    Raises:
        ValueError: ``max_tokens`` is negative or a weight is negative or not finite.
    """
    _check_budget(max_tokens)
    weights = _layer_weights(list(layer_items), layer_weights)
    messages = list(working_messages)
    per_layer: dict[str, list[_Candidate]] = {}
    for layer, items in layer_items.items():
        best = max((i.score for i in items), default=0.0)
        # Cosine scores may be negative: a floor relative to them means nothing.
        floor = min_relative_score * best if min_relative_score > 0 and best > 0 else float("-inf")
        relevant = (p for p in enumerate(items) if p[1].relevance is None or p[1].relevance >= min_relevance)
        ranked = sorted((p for p in relevant if p[1].score >= floor), key=lambda p: (-p[1].score, p[0]))
        top = ranked[0][1].score if ranked else 0.0
        per_layer[layer] = [
            _Candidate(layer, rank, item, _normalised(item.score, top, weights[layer]))
            for rank, (_, item) in enumerate(ranked)
        ]
    chosen: dict[str, list[tuple[_Candidate, ContextItem]]] = {layer: [] for layer in layer_items}
    made = _Rendering(counter)

    def rendered() -> str:
        return _render([(layer, [v for _, v in picks]) for layer, picks in chosen.items()], messages, made.line)

    _fit_messages(messages, [], max_tokens, made.count)
    left = max_tokens - made.count(_render([], messages))

    # Per-line costs keep selection linear; the exact count below settles the
    # few tokens that joining lines may add or save.
    def take(candidate: _Candidate, limit: int) -> int:
        """Add the candidate (or a narrower stand-in) if it costs at most ``limit``; return its cost or 0."""
        picks = chosen[candidate.layer]
        header = made.count(LAYER_TITLES.get(candidate.layer, candidate.layer)) + 4 if not picks else 0
        for version in _versions(candidate.item):
            # The line with its line break: the piece the rendered text is counted by (count_lines).
            cost = made.count(made.line(version) + "\n") + header
            if cost <= limit:
                picks.append((candidate, version))
                return cost
        return 0

    active = [layer for layer, candidates in per_layer.items() if candidates]
    total_weight = sum(weights[layer] for layer in active)
    budgets = {
        layer: int(max(left, 0) * weights[layer] / total_weight) if layer in active and total_weight > 0 else 0
        for layer in layer_items
    }
    taken: set[tuple[str, int]] = set()
    for layer in active:
        share = budgets[layer]
        for candidate in per_layer[layer]:
            cost = take(candidate, share)
            if cost:
                share -= cost
                left -= cost
                taken.add((layer, candidate.rank))
    rest = sorted(
        (c for candidates in per_layer.values() for c in candidates if (c.layer, c.rank) not in taken),
        key=lambda c: c.order,
    )
    for candidate in rest:
        cost = take(candidate, left)
        if cost:
            left -= cost

    text = rendered()
    tokens = made.count(text)
    while tokens > max_tokens:
        picked = [(c, layer, n) for layer, picks in chosen.items() for n, (c, _) in enumerate(picks)]
        if not picked:
            break
        _, layer, n = max(picked, key=lambda p: p[0].order)
        chosen[layer].pop(n)
        text = rendered()
        tokens = made.count(text)

    kept = {(c.layer, c.rank) for picks in chosen.values() for c, _ in picks}
    dropped = sorted(
        (c for candidates in per_layer.values() for c in candidates if (c.layer, c.rank) not in kept),
        key=lambda c: c.order,
    )
    sections = []
    for layer, picks in chosen.items():
        items = [v for _, v in sorted(picks, key=lambda p: p[0].rank)]
        sections.append(
            ContextSection(layer=layer, items=items, tokens=made.count(_render([(layer, items)], [], made.line)))
        )
    sections.append(_working_section(messages, made.count))
    return AssembledContext(
        text=text,
        sections=sections,
        messages=messages,
        tokens=tokens,
        dropped=[c.item for c in dropped],
        budgets=budgets,
        narrowed=[
            c.item for picks in chosen.values() for c, v in sorted(picks, key=lambda p: p[0].order) if v is not c.item
        ],
    )


def _refined_item(text: str) -> ContextItem:
    return ContextItem(layer="refined", kind="refined", id="refined", text=text, score=1.0)


def refined_budget(*, working_messages: Sequence[dict[str, str]], max_tokens: int, counter: TokenCounter) -> int:
    """Tokens a condensed text may have so that :func:`render_refined` keeps all ``working_messages``.

    Pass it as ``budget_tokens`` to :func:`strata.context.refine.refine_items`; at or
    below 0 there is no room, and refining is pointless.
    """
    frame = counter.count(_render([("refined", [_refined_item("")])], working_messages))
    return max_tokens - frame - _REFINED_SLACK_TOKENS


def render_refined(
    *,
    working_messages: Sequence[dict[str, str]],
    refined_text: str,
    max_tokens: int,
    counter: TokenCounter,
) -> AssembledContext | None:
    """Render a condensed text (one "refined" section) before the working messages.

    The section is rendered like any layer item (one line, whitespace
    collapsed) and is never cut: the oldest working messages are dropped
    until it fits with them.

    Returns:
        The context, with an exact token count of at most ``max_tokens``; None
        when the text is blank or the section alone does not fit.

    Raises:
        ValueError: ``max_tokens`` is negative.
    """
    _check_budget(max_tokens)
    if not refined_text.strip():
        return None
    refined = [("refined", [_refined_item(refined_text)])]
    if counter.count(_render(refined, [])) > max_tokens:
        return None
    messages = list(working_messages)
    _fit_messages(messages, refined, max_tokens, counter.count)
    text = _render(refined, messages)
    section = ContextSection(layer="refined", items=refined[0][1], tokens=counter.count(_render(refined, [])))
    return AssembledContext(
        text=text,
        sections=[section, _working_section(messages, counter.count)],
        messages=messages,
        tokens=counter.count(text),
    )
