"""The LLM calls of ``strata eval answers``: an OpenAI-compatible endpoint, the answer and judge
prompts, and the reading of the judge's label.

One :class:`ChatEndpoint` per endpoint (the answering model, the judge). Every call sends
``max_tokens`` and ``temperature`` 0, is not retried, and is bounded as a whole by the endpoint's
timeout (the HTTP client's own timeout bounds each read, not the call). A call never raises: its
:class:`Reply` carries either the text or the reason it has none, so the run counts failures
instead of losing questions.

The judge follows the LoCoMo "LLM-as-a-judge" protocol peers publish (mem0's paper, arXiv
2504.19413, and its harness ``evaluation/metrics/llm_judge.py``): a binary CORRECT / WRONG,
generous on paraphrase, on a longer answer that touches the gold topic, and on a date given in
another format or relatively. One change: mem0's judge writes a sentence of reasoning before the
label; here it writes the label alone, so that a judge reply fits a small ``max_tokens``. The
judge is sent the label's schema (:data:`JUDGE_SCHEMA`) in the form the endpoint takes
(:data:`strata.providers.llm.FORMS`: OpenAI's ``json_schema`` first, llama.cpp's ``json_object`` +
schema when that is refused, then none): a 135M model wrote a readable label 1 time in 20 without it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "ANSWER_PROMPT",
    "JUDGE_PROMPT",
    "JUDGE_SCHEMA",
    "ChatEndpoint",
    "Endpoint",
    "Reply",
    "answer_prompt",
    "judge_prompt",
    "parse_label",
]

ANSWER_PROMPT = """\
You answer a question about a long conversation between two people, using memories of that \
conversation that a memory system recalled.

Memories:
{context}

Instructions:
- Answer from the memories only. If they disagree, the most recent memory wins.
- When a memory dates something relatively ("last year", "yesterday"), give the actual date, \
worked out from that memory's own date.
- Answer in at most six words.
{asked}
Question: {question}
Answer:"""

JUDGE_PROMPT = """\
Label an answer to a question as CORRECT or WRONG. You are given a question (one person asking \
another about their earlier conversations), the gold answer, and a generated answer.

The gold answer is usually short and names the topic, for example:
Question: What did I bring back from my last trip to Hawaii?
Gold answer: A shell necklace
The generated answer may be much longer. Be generous: if it touches on the same topic as the \
gold answer, it is CORRECT.

For a question about time, the gold answer is a date, month or year. The generated answer may be \
longer or relative ("last Tuesday", "next month"). Be generous: if it refers to the same date or \
period, it is CORRECT, whatever the format ("May 7th" and "7 May" are the same date).

Question: {question}
Gold answer: {gold}
Generated answer: {answer}

Reply with the label only, as JSON: {{"label": "CORRECT"}} or {{"label": "WRONG"}}."""

_JSON_OBJECT = re.compile(r"\{[^{}]*\}")
_LABEL = re.compile(r"\b(CORRECT|WRONG|INCORRECT)\b")
_BARE = re.compile(r"[\W_]+")


#: The judge's reply: one label.
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["CORRECT", "WRONG"]}},
    "required": ["label"],
}


def answer_prompt(question: str, context: str, asked_on: datetime | None = None) -> str:
    """The answering model's prompt: Strata's context, when the question is asked, the question."""
    asked = f"- The question is asked on {asked_on:%d %B %Y}.\n" if asked_on is not None else ""
    return ANSWER_PROMPT.format(context=context.strip() or "(none)", asked=asked, question=question)


def judge_prompt(question: str, gold: str, answer: str) -> str:
    """The judge's prompt for one answer."""
    return JUDGE_PROMPT.format(question=question, gold=gold, answer=answer)


def _verdict(words: list[str]) -> bool | None:
    found = {w == "CORRECT" for w in words}
    return found.pop() if len(found) == 1 else None


def parse_label(text: str) -> bool | None:
    """The judge's verdict: True for CORRECT, False for WRONG, None when the reply says neither.

    Read leniently, in order: a JSON object with a ``label`` key (any case); the reply being
    one word alone (``Correct.``); the upper-case words CORRECT or WRONG (INCORRECT reads as
    WRONG) anywhere in it. A reply that holds both labels, or none, is None: a judge failure,
    never a WRONG.
    """
    for match in _JSON_OBJECT.finditer(text):
        try:
            obj = json.loads(match.group())
        except ValueError:
            continue
        if isinstance(obj, dict):
            label = next((v for k, v in obj.items() if str(k).lower() == "label"), None)
            if isinstance(label, str) and (verdict := _verdict(_LABEL.findall(label.upper()))) is not None:
                return verdict
    bare = _BARE.sub("", text).upper()
    if bare in ("CORRECT", "WRONG", "INCORRECT"):
        return bare == "CORRECT"
    return _verdict(_LABEL.findall(text))


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint and how it is called."""

    #: The base URL, e.g. ``http://127.0.0.1:8080/v1``.
    base_url: str
    #: The model name; None: the first one the endpoint's ``/models`` lists.
    model: str | None
    #: Sent as the bearer token (local servers ignore it).
    api_key: str
    #: Sent with every call.
    max_tokens: int
    #: The whole call, connection to last byte.
    timeout_s: float

    def describe(self) -> dict[str, Any]:
        """The endpoint for a report: everything but the key."""
        return {"base_url": self.base_url, "model": self.model, "max_tokens": self.max_tokens,
                "timeout_s": self.timeout_s}


@dataclass(frozen=True)
class Reply:
    """One call's outcome: ``text``, or the ``error`` that stands in for it."""

    text: str | None
    error: str | None
    latency_ms: float
    #: As the endpoint reports them (``usage``); None when it does not.
    tokens_in: int | None = None
    tokens_out: int | None = None


class ChatEndpoint:
    """Calls one :class:`Endpoint` (``openai``'s async client, no retries).

    Args:
        endpoint: where and how to call.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        from openai import AsyncOpenAI

        self.endpoint = endpoint
        self._client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key,
                                   timeout=endpoint.timeout_s, max_retries=0)
        #: The structured-output form this endpoint takes (:data:`strata.providers.llm.FORMS`).
        self._form = "json_schema"

    async def resolve_model(self) -> str:
        """The endpoint's model name: the one given, else the first ``/models`` lists.

        Raises:
            ValueError: If no model was given and the endpoint lists none (or cannot list them).
        """
        if self.endpoint.model:
            return self.endpoint.model
        import openai

        try:
            models = await asyncio.wait_for(self._client.models.list(), self.endpoint.timeout_s)
        except (openai.OpenAIError, TimeoutError) as exc:
            raise ValueError(f"{self.endpoint.base_url}: cannot list its models ({_reason(exc)}); "
                             "name one with --model") from None
        if not models.data:
            raise ValueError(f"{self.endpoint.base_url} lists no model; name one with --model")
        return models.data[0].id

    async def complete(self, prompt: str, *, model: str, schema: dict[str, Any] | None = None) -> Reply:
        """Send ``prompt`` as one user message; never raises (a failure is the reply's ``error``).
        ``schema``: the reply's JSON schema, sent in the first form the endpoint takes."""
        import openai

        from strata.providers.llm import FORMS, refuses_form, response_format

        started = time.perf_counter()

        def failed(error: str) -> Reply:
            return Reply(None, error, (time.perf_counter() - started) * 1000)

        while True:
            form = self._form
            sent = response_format(form, "reply", schema) if schema is not None else None
            extra: dict[str, Any] = {"response_format": sent} if sent else {}
            try:
                response = await asyncio.wait_for(
                    self._client.chat.completions.create(
                        model=model, messages=[{"role": "user", "content": prompt}],
                        max_tokens=self.endpoint.max_tokens, temperature=0.0, **extra,
                    ),
                    self.endpoint.timeout_s,
                )
            except openai.APIStatusError as exc:
                if sent is not None and form == self._form and refuses_form(exc.status_code, str(exc.body or exc)):
                    self._form = FORMS[FORMS.index(form) + 1]  # from now on; "prompt" sends none
                    continue
                return failed(_reason(exc, self.endpoint.timeout_s))
            except (openai.OpenAIError, TimeoutError) as exc:
                return failed(_reason(exc, self.endpoint.timeout_s))
            except Exception as exc:  # a body the client cannot read: one failed call, not a failed run
                return failed(type(exc).__name__)
            break
        latency_ms = (time.perf_counter() - started) * 1000
        usage = getattr(response, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None)
        tokens_out = getattr(usage, "completion_tokens", None)
        choices = getattr(response, "choices", None) or []
        content = choices[0].message.content if choices else None
        if not isinstance(content, str) or not content.strip():
            return Reply(None, "empty reply", latency_ms, tokens_in, tokens_out)
        return Reply(content.strip(), None, latency_ms, tokens_in, tokens_out)

    async def aclose(self) -> None:
        await self._client.close()


def _reason(exc: BaseException, timeout_s: float | None = None) -> str:
    """A failure's reason, short enough to count by: ``timeout``, ``HTTP 500``, ``connection error``."""
    import openai

    if isinstance(exc, TimeoutError | openai.APITimeoutError):
        return "timeout" if timeout_s is None else f"timeout after {timeout_s:g} s"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, openai.APIConnectionError):
        return "connection error"
    return type(exc).__name__
