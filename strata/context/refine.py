"""Condensing memory items with the LLM when they do not all fit the context.

:func:`~strata.context.assemble.assemble_context` trims by score; with an LLM
configured, the caller may instead ask it to keep what the message needs out
of all the items, in the same budget. The answer is untrusted: it must be a
JSON object whose ``context`` is non-empty and within the budget (counted with
the caller's tokenizer), or it is asked for once more and then given up on.

The caller falls back to the score-trimmed context on any error raised here
(:class:`~strata.errors.LLMError`, including its subclass
:class:`~strata.errors.LLMOutputInvalid`); nothing is lost but the condensing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from strata.providers.llm import LLM, LLMCall, complete_json
from strata.providers.tokens import TokenCounter
from strata.schema import ContextItem

__all__ = ["refine_items"]

# English runs ~0.75 words per cl100k token; a CJK character is about one token.
_WORDS_PER_TOKEN = 0.75
_CJK_CHARS_PER_TOKEN = 0.8
# Room kept in the user prompt for the note that items were left out.
_NOTE_CHARS = 80

_SYSTEM = """\
You condense an AI agent's memory for its next reply. You get the user's \
message and memory items (most relevant first). Keep only the facts, steps \
and passages that help answer the message; leave out what does not relate \
to it, and never add anything the items do not say.

Rules:
- At most {budget} tokens: roughly {words} English words, or {cjk} Chinese or \
Japanese characters. Shorter is fine.
- Keep dates, times, names, ids, numbers, file paths and commands exactly as \
written.
- Write in the language of the items. Plain sentences, no Markdown headings.
- Say when something happened if the item gives a time.

Reply with one JSON object and nothing else: {{"context": "<the condensed memory>"}}"""


def _when(item: ContextItem) -> str:
    return item.timestamp.strftime("%Y-%m-%d %H:%M") if isinstance(item.timestamp, datetime) else "undated"


def _item_line(n: int, item: ContextItem) -> str:
    label = f"{item.layer}, {_when(item)}"
    if item.kind == "summary":
        label += ", summary"
    if item.source is not None:
        label += f", from {item.source.title or item.source.doc_id}"
    return f"[{n}] ({label}) " + " ".join(item.text.split())


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max(max_chars - 1, 0)] + "…"


def _user_prompt(message: str, items: Sequence[ContextItem], max_input_chars: int) -> str:
    """The message (at most a quarter of the room) and as many items as fit, in order."""
    head = f"User message:\n{_cut(message.strip(), max_input_chars // 4)}\n\nMemory items, most relevant first:\n"
    room = max_input_chars - len(head) - _NOTE_CHARS
    lines: list[str] = []
    for n, item in enumerate(items, 1):
        line = _item_line(n, item)
        if len(line) + 1 > room:
            if room > _NOTE_CHARS:  # a useful part of it still fits
                lines.append(_cut(line, room - 1))
            break
        lines.append(line)
        room -= len(line) + 1
    left_out = len(items) - len(lines)
    note = f"\n({left_out} less relevant items left out for length.)" if left_out else ""
    return head + "\n".join(lines) + note


def refine_items(
    llm: LLM,
    *,
    message: str,
    items: Sequence[ContextItem],
    budget_tokens: int,
    counter: TokenCounter,
    max_input_chars: int = 24000,
    deadline: float | None = None,
) -> str:
    """Ask the LLM to condense ``items`` into what ``message`` needs, in at most ``budget_tokens``.

    Args:
        message: the user's message the context is for.
        items: the candidates, most relevant first (e.g. what the context kept,
            then :attr:`~strata.context.assemble.AssembledContext.dropped`); shown with
            their layer and time. Items past ``max_input_chars`` are left out.
        budget_tokens: the most tokens the condensed text may have, counted
            with ``counter``; :func:`strata.context.assemble.refined_budget` gives the
            room left beside the working messages.
        max_input_chars: bound on the user prompt (message and items).
        deadline: ``time.monotonic()`` by which the reply must be in (a request path:
            one attempt, no retry); None: ``llm.timeout_s`` and one repair attempt.

    Returns:
        The condensed text, stripped, non-empty, and of at most ``budget_tokens``
        tokens. Render it with :func:`strata.context.assemble.render_refined`.

    Raises:
        ValueError: ``items`` is empty or ``budget_tokens`` < 1 (check before calling).
        LLMError: the endpoint failed, timed out or refused.
        LLMOutputInvalid: the reply (both, when a second was asked for) was not valid
            JSON, had no ``context`` or was over the budget.
    """
    if not items:
        raise ValueError("no items to refine")
    if budget_tokens < 1:
        raise ValueError(f"budget_tokens must be >= 1, got {budget_tokens}")
    words = max(1, int(budget_tokens * _WORDS_PER_TOKEN))
    system = _SYSTEM.format(budget=budget_tokens, words=words, cjk=max(1, int(budget_tokens * _CJK_CHARS_PER_TOKEN)))
    user = _user_prompt(message, items, max_input_chars)

    def validate(obj: dict[str, Any]) -> str:
        text = obj.get("context")
        if not isinstance(text, str) or not text.strip():
            raise ValueError('"context" must be a non-empty string')
        text = text.strip()
        tokens = counter.count(text)
        if tokens > budget_tokens:
            # complete_json shows this line to the model when it asks again.
            raise ValueError(
                f'"context" has {tokens} tokens but the limit is {budget_tokens}: '
                f"condense it to at most about {words} words"
            )
        return text

    call = LLMCall(feature="refine", max_tokens=_reply_tokens(budget_tokens), schema=_SCHEMA, deadline=deadline)
    refined: str = complete_json(llm, system, user, validate=validate, call=call, retries=0 if deadline else 1)
    return refined


#: The reply's schema: one non-empty string.
_SCHEMA = {
    "type": "object",
    "properties": {"context": {"type": "string", "minLength": 1}},
    "required": ["context"],
}


def _reply_tokens(budget_tokens: int) -> int:
    """The reply's ``max_tokens``: the budget in the model's tokens (which may be twice as
    many as cl100k's for the same text) and the JSON around it."""
    return budget_tokens * 2 + 32
