"""What fitting a context to its budget costs in process (``assemble_context``), with the token
counter fresh for every 60 contexts (as the bench's floor makes it) and kept warm across them (as
the ingress keeps it): p50 ms over five rounds of 60 contexts each.

Each context is a LoCoMo conversation's material as ``/v1/context`` gets it for a planning task
at the default budget (2,000 tokens): 16 episodic hits (turns), 16 semantic passages (runs of 3
to 12 turns in paragraphs, with their source and a matched span), ten working messages; 60
different draws of them.

Run from the repository root::

    python -m strata_bench.scripts.assembly_cost ../shared/bench/locomo10.json

Only Strata's own code: no Ray, no Milvus, no model.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from strata.config import StrataSettings
from strata.context.assemble import assemble_context
from strata.providers.tokens import TiktokenCounter
from strata.schema import ContextItem, MatchedSpan, SourceRef
from strata_bench.stats import median

__all__ = ["main"]

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _turns(dataset: Path) -> list[str]:
    conversation = json.loads(dataset.read_text())[0]["conversation"]
    return [
        turn["text"]
        for key, turns in conversation.items()
        if key.startswith("session_") and not key.endswith("date_time")
        for turn in turns
    ]


def _context(turns: list[str], seed: int) -> dict[str, list[ContextItem]]:
    draw = random.Random(seed)  # noqa: S311  a seeded workload, not a secret
    episodic = [
        ContextItem(layer="episodic", kind="turn", id=f"t{i}", text=turns[i], score=1 - rank * 0.03,
                    relevance=0.6 - rank * 0.01, timestamp=T0 + timedelta(hours=i))
        for rank, i in enumerate(draw.sample(range(len(turns)), 16))
    ]
    semantic = []
    for rank in range(16):
        first, size = draw.randrange(len(turns) - 12), draw.choice([3, 6, 12])
        paragraphs = [" ".join(turns[i : i + 3]) for i in range(first, first + size, 3)]
        text = "\n\n".join(paragraphs)
        child = text.index(paragraphs[-1])
        semantic.append(ContextItem(
            layer="semantic", kind="passage", id=f"p{first}#{size}", text=text, score=1 - rank * 0.03,
            relevance=0.6 - rank * 0.01,
            source=SourceRef(doc_id=f"d{first // 40}", title="Notes", start=0, end=len(text)),
            matched=[MatchedSpan(id=f"p{first}/c", start=child, end=len(text), score=1.0)],
        ))
    return {"episodic": episodic, "semantic": semantic}


def _p50_ms(contexts: list[dict[str, list[ContextItem]]], messages: list[dict[str, str]],
            counter: TiktokenCounter, settings: Any) -> float:
    spent = []
    for items in contexts:
        started = time.perf_counter()
        assemble_context(working_messages=messages, layer_items=items, max_tokens=settings.default_max_tokens,
                         counter=counter, min_relative_score=settings.min_relative_score,
                         min_relevance=settings.min_relevance)
        spent.append((time.perf_counter() - started) * 1000)
    return median(spent)


def main(argv: Iterable[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        raise SystemExit("usage: python -m strata_bench.scripts.assembly_cost LOCOMO.json")
    settings = StrataSettings()
    turns = _turns(Path(args[0]))
    contexts = [_context(turns, seed) for seed in range(60)]
    messages = [{"role": "user" if n % 2 else "assistant", "content": turns[n]} for n in range(10)]
    encoding = settings.working.encoding
    cold = median([_p50_ms(contexts, messages, TiktokenCounter(encoding), settings.context) for _ in range(5)])
    warm_counter = TiktokenCounter(encoding)
    _p50_ms(contexts, messages, warm_counter, settings.context)
    warm = median([_p50_ms(contexts, messages, warm_counter, settings.context) for _ in range(5)])
    print(f"assemble_context, {settings.context.default_max_tokens}-token budget, 16 + 16 candidates, "
          f"10 working messages: p50 {cold:.2f} ms with a fresh counter, {warm:.2f} ms with a warm one")


if __name__ == "__main__":
    main()
