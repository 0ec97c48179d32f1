"""The LLM boundary: one narrow interface, one OpenAI-compatible provider.

LLM output is untrusted. :func:`complete_json` sends the reply's JSON schema, parses
strictly, repairs the usual damage (code fences, prose around the object), asks once
more with the parse error when the call allows a retry, and raises
:class:`~strata.errors.LLMOutputInvalid` if that fails too. Callers keep their input and
fall back; nothing is lost.

Every call is bounded (:class:`LLMCall`): a feature's ``max_tokens``, a timeout cut to the
time left before its deadline, and no retry on a request path. :class:`OpenAIChatLLM`
also bounds the calls a process has in flight (``llm.max_concurrency``) and opens a
breaker per feature after ``llm.breaker_failures`` failed calls in a row, so a feature
falls back at once for ``llm.breaker_cooldown_s`` instead of waiting on a dead endpoint.
What happened is counted per feature (:mod:`strata.providers.llm_meter`), and the tokens per
tenant (:mod:`strata.counting`: the caller says whose work a call is).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from strata.config import LLMSettings
from strata.counting import count_tokens
from strata.errors import LLMBreakerOpen, LLMBusy, LLMError, LLMOutputInvalid, LLMTimedOut
from strata.providers.llm_meter import FEATURES, LLMMeter

if TYPE_CHECKING:
    import openai

__all__ = [
    "FORMS",
    "LLM",
    "METER",
    "LLMCall",
    "LLMUsage",
    "OpenAIChatLLM",
    "complete_json",
    "failure_reason",
    "inline_schema",
    "make_llm",
    "refuses_form",
    "response_format",
]

log = logging.getLogger(__name__)

#: This process's LLM counts (one per process: every provider object records here).
METER = LLMMeter()

#: Below this many seconds left a call is not started: it could not finish.
_MIN_CALL_S = 0.5

#: The structured-output forms, best first (``auto`` walks down on a refusal).
FORMS = ("json_schema", "json_object_schema", "prompt")


def response_format(form: str, name: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``response_format`` that sends ``schema`` in ``form`` (None: send none: ``prompt``);
    without a schema, JSON mode alone."""
    if form == "prompt":
        return None
    if schema is None:
        return {"type": "json_object"}
    if form == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}
    return {"type": "json_object", "schema": schema}


def refuses_form(status: int, said: str) -> bool:
    """Whether an endpoint's error (its status and its words) refuses the structured-output form
    sent: a 400 or 422 naming the response format or the schema, or a 500 naming the response
    format (llama-cpp-python 0.3.36 under FastAPI 0.165 answers its validation error so)."""
    said = said.lower()
    named = "response_format" in said or (status != 500 and "schema" in said)
    return status in (400, 422, 500) and named


@dataclass(frozen=True)
class LLMCall:
    """How one LLM call is bounded.

    Attributes:
        feature: one of :data:`~strata.providers.llm_meter.FEATURES`: its counts, its breaker
            and its ``llm.max_tokens`` entry.
        max_tokens: the most tokens the reply may have; None: the feature's setting.
        schema: the reply's JSON schema (for ``json_mode``), sent in the form the endpoint takes.
        deadline: ``time.monotonic()`` by which the reply must be in; a call on a request
            path has one and is never retried. None: ``llm.timeout_s``, retried per settings.
    """

    feature: str = "other"
    max_tokens: int | None = None
    schema: dict[str, Any] | None = None
    deadline: float | None = None

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


class LLM(Protocol):
    """A chat model that answers one system + user prompt with text."""

    def complete(self, system: str, user: str, *, json_mode: bool = False, call: LLMCall | None = None) -> str:
        """Return the model's reply. Raises :class:`LLMError` on transport, refusal, a
        timeout, no time left, no free slot or an open breaker."""
        ...


@dataclass
class LLMUsage:
    """Counts for cost control; shared by all calls of one provider object."""

    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def failure_reason(exc: BaseException) -> str:
    """A short word for why an LLM use fell back (a metric label)."""
    if isinstance(exc, LLMBreakerOpen):
        return "breaker"
    if isinstance(exc, LLMBusy):
        return "busy"
    if isinstance(exc, LLMTimedOut):
        return "timeout"
    if isinstance(exc, LLMOutputInvalid):
        return "invalid"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "error"


class _Breaker:
    """Consecutive failures per feature; open for a cool-down after ``limit`` of them."""

    def __init__(self, limit: int, cooldown_s: float) -> None:
        self._limit, self._cooldown_s = limit, cooldown_s
        self._failures: dict[str, int] = {}
        self._open_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, feature: str) -> None:
        with self._lock:
            until = self._open_until.get(feature, 0.0)
            now = time.monotonic()
            if now < until:
                raise LLMBreakerOpen(
                    f"the LLM failed {self._failures.get(feature, 0)} times in a row for {feature}: "
                    f"not called for the next {until - now:.0f} s (llm.breaker_cooldown_s)"
                )

    def failed(self, feature: str) -> None:
        with self._lock:
            n = self._failures[feature] = self._failures.get(feature, 0) + 1
            if n >= self._limit:  # and again after each failed try past the cool-down
                self._open_until[feature] = time.monotonic() + self._cooldown_s

    def succeeded(self, feature: str) -> None:
        with self._lock:
            self._failures.pop(feature, None)
            self._open_until.pop(feature, None)


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as it is sent to the endpoint: its ``$ref``s to ``$defs`` replaced by the
    definitions (pydantic puts nested models there; not every server's grammar follows
    references), and without titles, defaults and upper bounds on lengths and counts.

    The bounds stay in the validator, and ``max_tokens`` bounds the reply; sent, they become
    grammar rules repeated as many times: ``maxLength: 4000`` made llama-cpp-python 0.3.36
    segfault in libllama on the first summary (seen here), and even when a server copes
    they cost time on every token."""
    defs = schema.get("$defs", {})
    dropped = ("$defs", "title", "default", "maxLength", "maxItems")

    def walk(node: Any, depth: int) -> Any:
        if depth > 20:
            raise ValueError("the schema nests too deep (a recursive model?)")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]), depth + 1)
            out = {k: walk(v, depth + 1) for k, v in node.items() if k not in dropped and k != "properties"}
            if isinstance(node.get("properties"), dict):  # field names, whatever they are called
                out["properties"] = {name: walk(v, depth + 1) for name, v in node["properties"].items()}
            return out
        if isinstance(node, list):
            return [walk(v, depth + 1) for v in node]
        return node

    inlined: dict[str, Any] = walk(schema, 0)
    return inlined


class OpenAIChatLLM:
    """Any OpenAI-compatible chat completions endpoint (OpenAI, DeepSeek, Qwen, vLLM,
    Ollama, llama.cpp)."""

    def __init__(self, settings: LLMSettings, *, meter: LLMMeter | None = None) -> None:
        from openai import OpenAI

        if not settings.base_url:
            raise ValueError("llm.base_url is not set")
        self._settings = settings
        self._client = OpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "unused",
            timeout=settings.timeout_s,
            max_retries=settings.max_retries,
        )
        self._once = self._client.with_options(max_retries=0)
        self._model = settings.model
        #: Where this provider's calls and its callers' results are counted.
        self.meter = meter or METER
        self._slots = threading.BoundedSemaphore(settings.max_concurrency)
        self._breaker = _Breaker(settings.breaker_failures, settings.breaker_cooldown_s)
        configured = settings.structured_output
        self._form = FORMS[0] if configured == "auto" else configured
        self.usage = LLMUsage()
        self._lock = threading.Lock()

    @property
    def structured_output(self) -> str:
        """The form the schema is sent in now (``auto`` may have stepped down)."""
        return self._form

    def _max_tokens(self, call: LLMCall) -> int:
        budget = getattr(self._settings.max_tokens, call.feature, self._settings.max_tokens.other)
        return min(call.max_tokens, budget) if call.max_tokens else budget

    def complete(self, system: str, user: str, *, json_mode: bool = False, call: LLMCall | None = None) -> str:
        call = call or LLMCall()
        feature = call.feature if call.feature in FEATURES else "other"
        self._breaker.check(feature)
        timeout = self._settings.timeout_s
        left = call.left_s()
        if left is not None:
            timeout = min(timeout, left)
            if timeout < _MIN_CALL_S:
                raise LLMTimedOut(f"no time left for the LLM before the request's deadline ({left:.1f} s)")
        waiting = time.monotonic()
        if not self._slots.acquire(timeout=timeout):
            raise LLMBusy(
                f"{self._settings.max_concurrency} LLM calls stayed in flight for {timeout:.1f} s "
                "(llm.max_concurrency)"
            )
        try:
            remaining = timeout - (time.monotonic() - waiting)
            if left is not None and remaining < _MIN_CALL_S:
                raise LLMTimedOut(f"no time left for the LLM after waiting {timeout - remaining:.1f} s for a free slot")
            return self._request(system, user, json_mode, replace(call, feature=feature), max(remaining, 0.1))
        finally:
            self._slots.release()

    def _request(self, system: str, user: str, json_mode: bool, call: LLMCall, timeout: float) -> str:
        import openai

        client = self._once if call.deadline is not None else self._client
        started = time.monotonic()
        while True:
            form = self._form
            sent_format = response_format(form, call.feature, call.schema) if json_mode else None
            prompt = system
            if json_mode and call.schema is not None and form == "prompt":
                prompt += "\n\nThe reply must be valid against this JSON schema:\n" + json.dumps(call.schema)
            kwargs: dict[str, Any] = {"response_format": sent_format} if sent_format else {}
            left = timeout - (time.monotonic() - started)
            try:
                response = client.chat.completions.create(
                    model=self._model,
                    messages=[{"role": "system", "content": prompt}, {"role": "user", "content": user}],
                    temperature=0,
                    max_tokens=self._max_tokens(call),
                    timeout=max(left, 0.1),
                    **kwargs,
                )
            except openai.APIStatusError as exc:
                if self._step_down(form, exc, sent_format) and (
                    call.deadline is None or timeout - (time.monotonic() - started) > _MIN_CALL_S
                ):
                    self.meter.call(call.feature, seconds=time.monotonic() - started, outcome="rejected")
                    continue
                # The endpoint's own words go to the log only: they may hold its internals (a
                # traceback's file paths, seen from llama-cpp-python), and a fallback's reason
                # reaches API callers (refine_error, a skill job's error).
                log.warning("the LLM endpoint answered %s for %s: %s", exc.status_code, call.feature, _said(exc))
                if exc.status_code < 500:  # ours to fix, not the endpoint's failure: no breaker
                    refused = LLMError(f"LLM request refused: {type(exc).__name__} ({exc.status_code})")
                    raise self._failed(call, started, "rejected", refused) from exc
                failure = LLMError(f"LLM request failed: {type(exc).__name__} ({exc.status_code})")
                raise self._failed(call, started, "error", failure) from exc
            except (openai.APITimeoutError, TimeoutError) as exc:
                raise self._failed(
                    call, started, "timeout", LLMTimedOut(f"the LLM did not answer within {timeout:.1f} s")
                ) from exc
            except openai.OpenAIError as exc:
                failure = LLMError(f"LLM request failed: {type(exc).__name__}")
                raise self._failed(call, started, "error", failure) from exc
            break
        seconds = time.monotonic() - started
        usage = response.usage
        tokens_in = usage.prompt_tokens if usage is not None else 0
        tokens_out = usage.completion_tokens if usage is not None else 0
        self.meter.call(call.feature, seconds=seconds, outcome="ok", tokens_in=tokens_in, tokens_out=tokens_out)
        count_tokens("llm_in", tokens_in)  # for the tenant the caller works for (strata.counting.on_behalf_of)
        count_tokens("llm_out", tokens_out)
        self._breaker.succeeded(call.feature)
        with self._lock:
            self.usage.calls += 1
            self.usage.prompt_tokens += tokens_in
            self.usage.completion_tokens += tokens_out
        choice = response.choices[0] if response.choices else None
        if choice is None or choice.message is None:
            raise LLMError("LLM returned no choices")
        refusal = getattr(choice.message, "refusal", None)
        if refusal:
            raise LLMError("LLM refused the request")
        return choice.message.content or ""

    def _failed(self, call: LLMCall, started: float, outcome: str, error: LLMError) -> LLMError:
        self.meter.call(call.feature, seconds=time.monotonic() - started, outcome=outcome)
        if outcome != "rejected":  # a refused request is ours to fix, not the endpoint's failure
            self._breaker.failed(call.feature)
        with self._lock:
            self.usage.failures += 1
        return error

    def _step_down(self, form: str, exc: openai.APIStatusError, sent_format: dict[str, Any] | None) -> bool:
        """On ``auto``, whether the endpoint refused this structured-output form (:func:`refuses_form`),
        and the next is in use now."""
        if self._settings.structured_output != "auto" or sent_format is None or form == FORMS[-1]:
            return False
        if not refuses_form(exc.status_code, _said(exc)):
            return False
        with self._lock:
            if self._form == form:
                self._form = FORMS[FORMS.index(form) + 1]
                log.warning(
                    "the LLM endpoint refused %s structured output (%s): using %s", form, _said(exc)[:200], self._form
                )
        return True


def _said(exc: Exception) -> str:
    """The endpoint's own words for a refusal, short."""
    body = getattr(exc, "body", None)
    text = json.dumps(body, default=str) if body is not None else str(exc)
    return text[:500]


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
    call: LLMCall | None = None,
    meter: LLMMeter | None = None,
) -> Any:
    """Ask for a JSON object and return ``validate(obj)``; count how the feature's use ended.

    Args:
        validate: turns the parsed object into the caller's type; raises
            ``ValueError`` (or pydantic's ``ValidationError``) when it does not fit.
        retries: further attempts after a reply that does not parse or validate; a
            call with a deadline asks again only while time is left.
        call: the call's bounds (feature, ``max_tokens``, schema, deadline).

    Raises:
        LLMError: the endpoint failed, timed out, refused, had no free slot or its
            feature's breaker is open.
        LLMOutputInvalid: no attempt produced a valid object.
    """
    call = call or LLMCall()
    meter = meter or getattr(llm, "meter", None) or METER
    feature = call.feature if call.feature in FEATURES else "other"
    prompt = user
    problem = ""
    try:
        for attempt in range(retries + 1):
            left = call.left_s()
            if attempt and left is not None and left < _MIN_CALL_S:
                break
            reply = llm.complete(system, prompt, json_mode=True, call=call)
            try:
                value = validate(_parse_object(reply))
            except ValueError as exc:  # pydantic.ValidationError is a ValueError
                problem = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
                prompt = (
                    f"{user}\n\nYour previous reply was not valid ({problem}). "
                    "Reply with one JSON object only, no prose."
                )
                continue
            meter.result(feature, "accepted")
            return value
        raise LLMOutputInvalid(f"LLM output did not validate: {problem}")
    except LLMError as exc:
        meter.result(feature, failure_reason(exc))
        raise


_SHARED: dict[str, OpenAIChatLLM] = {}
_SHARED_LOCK = threading.Lock()


def make_llm(settings: LLMSettings) -> LLM | None:
    """The configured LLM, or None when no endpoint is configured.

    One object per process and settings: its ``llm.max_concurrency`` slots and its
    breakers are shared by every caller in the process."""
    if not settings.enabled:
        return None
    key = settings.model_dump_json()
    with _SHARED_LOCK:
        llm = _SHARED.get(key)
        if llm is None:
            llm = _SHARED[key] = OpenAIChatLLM(settings)
        return llm
