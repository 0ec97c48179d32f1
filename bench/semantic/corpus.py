"""The semantic benchmark's corpus: LoCoMo as one Markdown document per session, and its questions."""

from __future__ import annotations

import os
import re
from pathlib import Path

from strata.ids import ID_CHARS
from strata.semantic.documents import DocumentInput

__all__ = ["DEFAULT_DATASET", "locomo_corpus"]

DEFAULT_DATASET = Path("../shared/bench/locomo10.json")
_SLUG = re.compile(rf"[^{ID_CHARS}]+")


def locomo_corpus(path: str | os.PathLike[str]) -> tuple[list[DocumentInput], list[str]]:
    """LoCoMo as documents (one Markdown document per session) and its questions."""
    from strata_bench.evaluation.datasets import load_locomo

    benchmark = load_locomo(path)
    documents: list[DocumentInput] = []
    for conversation in benchmark.conversations:
        speakers = " and ".join(dict.fromkeys(t.speaker for t in conversation.turns))
        for session in conversation.sessions:
            when = f", {session.date:%d %B %Y}" if session.date else ""
            title = f"{speakers}: {session.id.replace('_', ' ')}{when}"
            lines = [f"# {title}"]
            for turn in session.turns:
                caption = f" [shares an image: {turn.image_caption}]" if turn.image_caption else ""
                lines.append(f"**{turn.speaker}**: {turn.text}{caption}")
            documents.append(
                DocumentInput(
                    text="\n\n".join(lines),
                    doc_id=_SLUG.sub("-", f"{conversation.id}-{session.id}"),
                    title=title,
                    metadata={"conversation": conversation.id, "session": session.id},
                )
            )
    # Round-robin over conversations, so any prefix asks about every one of them.
    by_conversation = [[q.question for q in c.questions] for c in benchmark.conversations]
    queries: list[str] = []
    for i in range(max(map(len, by_conversation), default=0)):
        queries += [qs[i] for qs in by_conversation if i < len(qs)]
    return documents, queries
