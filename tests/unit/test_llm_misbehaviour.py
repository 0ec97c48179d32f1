"""Every LLM feature against a model that misbehaves as a small local one did (tests/llm_server.py's
:class:`SmallModel`): runaway generation, truncated JSON, missing keys, one reply at a time and
generating on after the client left. Each call must be bounded and carry its schema, and each
failure must end in the feature's fallback, counted, within the call's time."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from strata.config import LLMSettings
from strata.context.refine import refine_items
from strata.episodic.summarize import LLMSummarizer, SummaryInput
from strata.errors import LLMBreakerOpen, LLMBusy, LLMError, LLMOutputInvalid, LLMTimedOut
from strata.procedural.llm_extractor import LLMSkillExtractor
from strata.providers.llm import LLMCall, OpenAIChatLLM, complete_json
from strata.providers.llm_meter import LLMMeter, MeterCounts, prometheus_text
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.entities.llm import LLMExtractor
from strata.schema import ContextItem
from tests.llm_server import SmallModel, llm_server

pytestmark = pytest.mark.unit

COUNTER = TiktokenCounter("cl100k_base")
TURNS = [SummaryInput("user", "We walked along the river to the old mill on Sunday."),
         SummaryInput("assistant", "That sounds lovely; the mill dates from 1820.")]
ITEMS = [
    ContextItem(layer="episodic", kind="turn", id=f"t{n}", text=f"Fact {n}: the deploy uses port 80{n:02d}.", score=1.0)
    for n in range(30)
]


def meant(body: dict[str, Any]) -> dict[str, Any]:
    """What a well-behaved model would answer each feature, by the keys of its schema."""
    fmt = body.get("response_format") or {}
    schema = fmt.get("schema") or fmt.get("json_schema", {}).get("schema") or {}
    keys = set(schema.get("properties", {}))
    if "context" in keys:
        return {"context": "The deploy uses port 8000."}
    if "entities" in keys:
        return {"entities": [{"name": "Mill", "type": "place", "aliases": []}], "relations": []}
    if "skill_name" in keys:
        return {"skill_name": "walk-to-the-mill", "description": "Walk to the mill.",
                "trigger_conditions": ["a walk"], "steps": ["go along the river"],
                "common_pitfalls": [], "success_criteria": ["at the mill"]}
    return {"summary": "A walk to the old mill on Sunday.", "key_topics": ["walk", "mill"],
            "action_items": [], "user_preferences": []}


def llm(url: str, meter: LLMMeter, **settings: Any) -> OpenAIChatLLM:
    return OpenAIChatLLM(LLMSettings(base_url=url, timeout_s=5.0, max_retries=0, **settings), meter=meter)


def test_every_feature_sends_max_tokens_and_its_schema_and_is_accepted() -> None:
    model = SmallModel(meant)
    meter = LLMMeter()
    with model.serving() as url:
        client = llm(url, meter)
        summary = LLMSummarizer(client).summarize(TURNS)
        entities = LLMExtractor(client).extract("We walked to the Mill.")
        skill = LLMSkillExtractor(client).extract("walk to the mill", ["go along the river"])
        refined = refine_items(client, message="which port?", items=ITEMS, budget_tokens=50, counter=COUNTER)
    assert summary.method == "llm" and [e.name for e in entities.entities] == ["Mill"]
    assert skill.steps == ["go along the river"] and refined == "The deploy uses port 8000."
    # The first request tried OpenAI's form and was refused (422); from then on llama.cpp's form.
    assert model.requests[0]["response_format"]["type"] == "json_schema"
    assert client.structured_output == "json_object_schema"
    for body in model.requests[1:]:
        assert body["response_format"]["type"] == "json_object" and body["response_format"]["schema"]["required"]
    assert all(isinstance(body.get("max_tokens"), int) for body in model.requests)
    assert [body["max_tokens"] for body in model.requests[1:]] == [384, 384, 768, 50 * 2 + 32]
    counts = meter.snapshot()
    for feature in ("summary", "entities", "skills", "refine"):
        assert counts.get("results", feature, "accepted") == 1
    assert counts.get("calls", "summary", "rejected") == 1  # the 422, counted, not a breaker failure


@pytest.mark.parametrize("status", [400, 422, 500])
def test_auto_steps_down_once_when_the_endpoint_refuses_a_form(status: int) -> None:
    model = SmallModel(meant, refusal_status=status)
    meter = LLMMeter()
    with model.serving() as url:
        client = llm(url, meter)
        for _ in range(3):
            assert LLMSummarizer(client).summarize(TURNS).method == "llm"
    assert [body["response_format"]["type"] for body in model.requests] == ["json_schema"] + ["json_object"] * 3
    assert meter.snapshot().get("calls", "summary", "rejected") == 1


def test_a_server_error_that_names_no_form_is_a_failure_not_a_step_down() -> None:
    with llm_server(lambda n: lambda: (500, {"error": {"message": "out of memory"}})) as (url, received):
        client = llm(url, LLMMeter())
        with pytest.raises(LLMError, match="500"):
            client.complete("s", "u", json_mode=True, call=LLMCall(feature="summary", schema={"type": "object"}))
    assert client.structured_output == "json_schema" and len(received) == 1


def test_a_reply_cut_by_max_tokens_falls_back_to_the_extractive_summary() -> None:
    model = SmallModel(lambda body: {**meant(body), "summary": "walked " * 400})
    meter = LLMMeter()
    with model.serving() as url:
        summary = LLMSummarizer(llm(url, meter, structured_output="json_object_schema")).summarize(TURNS)
    assert summary.method == "extractive" and "did not validate" in (summary.fallback_reason or "")
    assert summary.summary  # the turns still have their summary
    assert len(model.requests) == 2  # a background call is asked once more, then falls back
    assert all(body["max_tokens"] == 384 for body in model.requests)
    assert meter.snapshot().get("results", "summary", "invalid") == 1


def test_without_a_schema_keys_go_missing_and_the_rules_take_over() -> None:
    """``prompt``: the schema goes in the system prompt only, and this model ignores it."""
    model = SmallModel(meant)
    meter = LLMMeter()
    with model.serving() as url:
        client = llm(url, meter, structured_output="prompt")
        with pytest.raises(LLMOutputInvalid):
            LLMSkillExtractor(client).extract("walk to the mill", ["go along the river"])
    assert "response_format" not in model.requests[0]
    assert "JSON schema" in model.requests[0]["messages"][0]["content"]
    assert meter.snapshot().get("results", "skills", "invalid") == 1


def test_a_request_path_call_keeps_its_deadline_behind_a_busy_serial_model() -> None:
    """One reply at a time, and generating on after its client left: a caller with a 1-s
    deadline behind a 3-s background reply falls back after ~1 s, with no retry."""
    model = SmallModel(meant, per_token_s=3.0 / 40)  # a summary reply is ~40 tokens: ~3 s
    meter = LLMMeter()
    with model.serving() as url:
        client = llm(url, meter, structured_output="json_object_schema")
        background = threading.Thread(target=LLMSummarizer(client).summarize, args=(TURNS,))
        background.start()
        time.sleep(0.3)
        started = time.monotonic()
        with pytest.raises(LLMTimedOut):
            refine_items(client, message="which port?", items=ITEMS, budget_tokens=50, counter=COUNTER,
                         deadline=time.monotonic() + 1.0)
        waited = time.monotonic() - started
        background.join()
    assert waited < 2.0
    assert len(model.requests) == 2  # the refine was sent once: no retry on a request path
    assert meter.snapshot().get("results", "refine", "timeout") == 1


def test_max_concurrency_makes_a_caller_wait_or_fall_back_as_busy() -> None:
    model = SmallModel(meant, per_token_s=0.05)  # ~2 s a reply
    meter = LLMMeter()
    with model.serving() as url:
        client = llm(url, meter, structured_output="json_object_schema", max_concurrency=1)
        first = threading.Thread(target=LLMSummarizer(client).summarize, args=(TURNS,))
        first.start()
        time.sleep(0.3)
        with pytest.raises(LLMBusy, match="max_concurrency"):
            client.complete("s", "u", json_mode=True, call=LLMCall(feature="refine", deadline=time.monotonic() + 1.0))
        first.join()
    assert len(model.requests) == 1  # the busy call never reached the server


def test_the_breaker_opens_after_failures_in_a_row_and_closes_after_its_cooldown() -> None:
    model = SmallModel(meant, per_token_s=0.1)  # every reply takes ~4 s: past a 0.5-s timeout
    meter = LLMMeter()
    with model.serving() as url:
        client = OpenAIChatLLM(
            LLMSettings(base_url=url, timeout_s=0.5, max_retries=0, structured_output="json_object_schema",
                        breaker_failures=2, breaker_cooldown_s=1.0),
            meter=meter,
        )
        call = LLMCall(feature="entities")
        for _ in range(2):
            with pytest.raises(LLMTimedOut):
                client.complete("s", "u", json_mode=True, call=call)
        started = time.monotonic()
        with pytest.raises(LLMBreakerOpen, match="breaker_cooldown_s"):
            client.complete("s", "u", json_mode=True, call=call)
        assert time.monotonic() - started < 0.1  # at once, without a request
        assert len(model.requests) == 2
        with pytest.raises(LLMTimedOut):  # another feature has its own breaker: still called
            client.complete("s", "u", json_mode=True, call=LLMCall(feature="summary"))
        time.sleep(1.1)
        with pytest.raises(LLMTimedOut):  # tried again after the cool-down
            client.complete("s", "u", json_mode=True, call=call)
    assert len(model.requests) == 4


def test_an_entity_extraction_that_fails_is_the_rules_and_counted() -> None:
    model = SmallModel(meant, per_token_s=0.2)
    meter = LLMMeter()
    with model.serving() as url:
        client = OpenAIChatLLM(
            LLMSettings(base_url=url, timeout_s=0.3, max_retries=0, structured_output="json_object_schema"), meter=meter
        )
        extraction = LLMExtractor(client).extract("Caroline moved to Lisbon with Strata.")
    assert extraction.entities  # the rule extractor's
    counts = meter.snapshot()
    assert counts.total("results", "entities") == 1 and counts.get("results", "entities", "accepted") == 0


def test_complete_json_counts_an_open_breaker_and_asks_no_more_after_the_deadline() -> None:
    meter = LLMMeter()

    class Slow:
        calls = 0

        def complete(self, system: str, user: str, *, json_mode: bool = False, call: LLMCall | None = None) -> str:
            self.calls += 1
            time.sleep(0.6)
            return "not json"

    slow = Slow()
    with pytest.raises(LLMOutputInvalid):
        complete_json(slow, "s", "u", validate=dict, retries=3,
                      call=LLMCall(feature="refine", deadline=time.monotonic() + 0.8), meter=meter)
    assert slow.calls == 1  # no time left for a second ask
    assert meter.snapshot().get("results", "refine", "invalid") == 1


def test_prometheus_text_has_every_count() -> None:
    meter = LLMMeter()
    meter.call("summary", seconds=1.5, outcome="ok", tokens_in=100, tokens_out=20)
    meter.call("summary", seconds=40.0, outcome="timeout")
    meter.result("summary", "accepted")
    meter.result("summary", "timeout")
    text = prometheus_text(meter.snapshot())
    assert 'strata_llm_calls_total{feature="summary",outcome="ok"} 1' in text
    assert 'strata_llm_tokens_total{feature="summary",direction="out"} 20' in text
    assert 'strata_llm_results_total{feature="summary",result="timeout"} 1' in text
    assert 'strata_llm_latency_seconds_bucket{feature="summary",le="2"} 1' in text
    assert 'strata_llm_latency_seconds_bucket{feature="summary",le="+Inf"} 2' in text
    assert 'strata_llm_latency_seconds_count{feature="summary"} 2' in text
    merged = MeterCounts()
    merged.merge(meter.snapshot())
    merged.merge(meter.snapshot())
    assert merged.get("calls", "summary", "ok") == 2


def test_a_sink_that_fails_never_fails_the_call() -> None:
    meter = LLMMeter()

    def broken(deltas: dict[Any, float]) -> None:
        raise RuntimeError("collector down")

    meter.sink = broken
    meter.result("refine", "accepted")
    assert meter.snapshot().get("results", "refine", "accepted") == 1


def test_an_error_that_is_not_a_timeout_is_an_llm_error() -> None:
    model = SmallModel(meant)
    with model.serving() as url:
        client = llm(url, LLMMeter(), structured_output="json_schema")  # pinned: no step down
        with pytest.raises(LLMError, match="refused"):
            client.complete("s", "u", json_mode=True, call=LLMCall(feature="summary", schema={"type": "object"}))


def test_the_schema_sent_has_no_references_titles_or_upper_bounds_but_keeps_field_names() -> None:
    from pydantic import BaseModel, Field

    from strata.providers.llm import inline_schema

    class Inner(BaseModel):
        title: str = Field(max_length=4000)  # a field named like a schema keyword
        default: list[str] = Field(default_factory=list, max_length=20)

    class Outer(BaseModel):
        items: list[Inner] = Field(min_length=1)

    sent = inline_schema(Outer.model_json_schema())
    text = json.dumps(sent)
    for keyword in ("$ref", "$defs", "maxLength", "maxItems", '"title": "'):
        assert keyword not in text
    inner = sent["properties"]["items"]["items"]
    assert set(inner["properties"]) == {"title", "default"} and inner["required"] == ["title"]
    assert sent["properties"]["items"]["minItems"] == 1
