"""The LLM boundary: one narrow interface, one OpenAI-compatible provider.

LLM output is untrusted. :func:`complete_json` parses strictly, repairs the
usual damage (code fences, prose around the object), asks once more with the
parse error, and raises :class:`~strata.errors.LLMOutputInvalid` if that
fails too. Callers keep their input and fall back; nothing is lost.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from strata.config import LLMSettings
from strata.errors import LLMError, LLMOutputInvalid

__all__ = ["LLM", "LLMUsage", "OpenAIChatLLM", "complete_json", "make_llm"]


class LLM(Protocol):
    """A chat model that answers one system + user prompt with text."""

    def complete(self, system: str, user: str, *, json_mode: bool = False) -> str:
        """Return the model's reply. Raises :class:`LLMError` on transport or refusal."""
        ...


@dataclass
class LLMUsage:
    """Counts for cost control; shared by all calls of one provider object."""

    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class OpenAIChatLLM:
    """Any OpenAI-compatible chat completions endpoint (OpenAI, DeepSeek, Qwen, vLLM, Ollama)."""

    def __init__(self, settings: LLMSettings) -> None:
        from openai import OpenAI

        if not settings.base_url:
            raise ValueError("llm.base_url is not set")
        self._client = OpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "unused",
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
        )
        self._model = settings.model
        self.usage = LLMUsage()
        self._lock = threading.Lock()

    def complete(self, system: str, user: str, *, json_mode: bool = False) -> str:
        import openai

        kwargs: dict[str, Any] = {}
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        try:
            response = self._client.chat.completions.create(
                model=self._model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                temperature=0,
                **kwargs,
            )
        except openai.OpenAIError as exc:
            with self._lock:
                self.usage.failures += 1
            raise LLMError(f"LLM request failed: {type(exc).__name__}") from exc
        with self._lock:
            self.usage.calls += 1
            if response.usage is not None:
                self.usage.prompt_tokens += response.usage.prompt_tokens
                self.usage.completion_tokens += response.usage.completion_tokens
        choice = response.choices[0] if response.choices else None
        if choice is None or choice.message is None:
            raise LLMError("LLM returned no choices")
        refusal = getattr(choice.message, "refusal", None)
        if refusal:
            raise LLMError("LLM refused the request")
        return choice.message.content or ""


def _unfence(text: str) -> str:
    """``text`` without a Markdown code fence around it (```` ```json ... ``` ````).

    String operations, not a pattern: ``\\s*```\\s*$`` retried the whitespace run at
    each of its positions, quadratic in a long run of spaces."""
    inner = text.strip()
    if inner.startswith("```"):
        inner = inner[3:]
        if inner[:4].lower() == "json":
            inner = inner[4:]
    inner = inner.removesuffix("```")
    return inner.strip()


def _parse_object(text: str) -> dict[str, Any]:
    """Parse a JSON object, repairing code fences and surrounding prose."""
    candidates = [text, _unfence(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    last_error: Exception | None = None
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError as exc:
            last_error = exc
            continue
        if isinstance(value, dict):
            return value
        last_error = ValueError("the reply is JSON but not an object")
    raise ValueError(str(last_error))


def complete_json(
    llm: LLM,
    system: str,
    user: str,
    *,
    validate: Callable[[dict[str, Any]], Any],
    retries: int = 1,
) -> Any:
    """Ask for a JSON object and return ``validate(obj)``.

    Args:
        validate: turns the parsed object into the caller's type; raises
            ``ValueError`` (or pydantic's ``ValidationError``) when it does not fit.
        retries: further attempts after a reply that does not parse or validate.

    Raises:
        LLMError: the endpoint failed, timed out or refused.
        LLMOutputInvalid: no attempt produced a valid object.
    """
    prompt = user
    problem = ""
    for _ in range(retries + 1):
        reply = llm.complete(system, prompt, json_mode=True)
        try:
            return validate(_parse_object(reply))
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            problem = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            prompt = (
                f"{user}\n\nYour previous reply was not valid ({problem}). "
                "Reply with one JSON object only, no prose."
            )
    raise LLMOutputInvalid(f"LLM output did not validate: {problem}")


def make_llm(settings: LLMSettings) -> LLM | None:
    """The configured LLM, or None when no endpoint is configured."""
    return OpenAIChatLLM(settings) if settings.enabled else None
