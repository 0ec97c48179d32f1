"""The four LLM features against a real model: SmolLM2-135M-Instruct behind llama-cpp-python's
server (``python -m strata_bench.scripts.real_llm``), not in the default run.

    python -m pytest -m real_llm                                  # starts the server (built once, ~10 min)
    STRATA_REAL_LLM_URL=http://127.0.0.1:8088/v1 python -m pytest -m real_llm   # one already running

A model this small is wrong often; what must hold is Strata's side: every feature ends within
its bound, accepted or with its fallback named, and nothing the caller gave is lost. The
acceptance rates are ``strata bench llm``'s to report (docs/llm.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from strata.config import LLMSettings
from strata.context.refine import refine_items
from strata.episodic.summarize import LLMSummarizer, SummaryInput
from strata.errors import LLMError
from strata.procedural.llm_extractor import LLMSkillExtractor
from strata.providers.llm import OpenAIChatLLM
from strata.providers.llm_meter import LLMMeter
from strata.providers.tokens import TiktokenCounter
from strata.retrieval.entities.llm import LLMExtractor
from strata.schema import ContextItem

pytestmark = pytest.mark.timeout(1800)  # a first run builds llama-cpp-python

TURNS = [
    SummaryInput("user", "I moved to Lisbon in March and started at the bakery on Rua Augusta."),
    SummaryInput("assistant", "Congratulations! How is the new job going?"),
    SummaryInput("user", "Good, but I need to renew my residence permit before 14 June."),
    SummaryInput("assistant", "I can remind you about the permit two weeks before."),
]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    given = os.environ.get("STRATA_REAL_LLM_URL")
    if given:
        yield given
        return
    port = "8089"
    server = subprocess.Popen(
        [sys.executable, "-m", "strata_bench.scripts.real_llm", "--port", port],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()  # the URL, once the server answers
        assert line.startswith("http"), f"the model server did not start (exit {server.poll()})"
        yield line
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def llm(url: str) -> OpenAIChatLLM:
    return OpenAIChatLLM(LLMSettings(base_url=url, model="smollm2", max_concurrency=1), meter=LLMMeter())


def test_a_summary_is_made_within_its_bound(llm: OpenAIChatLLM) -> None:
    started = time.monotonic()
    summary = LLMSummarizer(llm).summarize(TURNS)
    assert time.monotonic() - started < LLMSettings().timeout_s * 2 + 5  # one repair at most
    assert summary.summary
    assert summary.method == "llm" or summary.fallback_reason


def test_entities_are_the_models_or_the_rules(llm: OpenAIChatLLM) -> None:
    extractor = LLMExtractor(llm)
    extraction = extractor.extract("Caroline maintains the Strata runtime in Lisbon; Strata depends on Milvus.")
    assert extraction.entities
    assert extractor.stats.calls == 1


def test_a_direct_skill_extraction_keeps_its_deadline(llm: OpenAIChatLLM) -> None:
    started = time.monotonic()
    try:
        draft = LLMSkillExtractor(llm).extract(
            "restart the api", ["kubectl rollout restart deploy/api", "kubectl rollout status deploy/api"],
            deadline=time.monotonic() + 8.0,
        )
    except LLMError:
        pass  # the caller keeps the trace (a job) and the rules learn it
    else:
        assert draft.steps
    assert time.monotonic() - started < 10.0


def test_condensing_keeps_the_requests_deadline(llm: OpenAIChatLLM) -> None:
    items = [ContextItem(layer="episodic", kind="turn", id=f"t{n}", score=1.0,
                         text=f"On day {n} the deploy of service {n} used port {8000 + n}.") for n in range(40)]
    started = time.monotonic()
    try:
        text = refine_items(llm, message="Which port did service 7 use?", items=items, budget_tokens=60,
                            counter=TiktokenCounter("cl100k_base"), deadline=time.monotonic() + 8.0)
    except LLMError:
        pass  # the caller trims by score
    else:
        assert text
    assert time.monotonic() - started < 10.0
