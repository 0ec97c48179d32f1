"""``strata eval answers``: the LoCoMo answer protocol against scripted OpenAI-compatible servers
on loopback (tests/llm_server.py), one answering and one judging.

Strata's side is the episodic layer and the context assembler in-process
(:class:`tests.unit.test_eval_context.LayerClient`), so the whole loop runs without Ray: ingest,
context, answer, judgement, tally. Only the network (the two LLM endpoints) is faked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from strata_bench.evaluation.answers import (
    AnswerRecord,
    AnswerTally,
    evaluate_answers,
    format_answers_table,
    select_questions,
)
from strata_bench.evaluation.chat import Endpoint, parse_label
from strata_bench.evaluation.datasets import Benchmark, EvalConversation, EvalQuestion, EvalSession, EvalTurn
from tests.llm_server import Reply, chat_body, hang, llm_server
from tests.unit.test_eval_context import LayerClient

DAY = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


def _benchmark() -> Benchmark:
    lines = [
        ("Ann", "I adopted a grey cat called Pixel last spring."),
        ("Bob", "I ran the Berlin marathon in three hours and ten minutes."),
        ("Ann", "I started learning the cello in January."),
        ("Bob", "We painted the kitchen a pale yellow last weekend."),
    ]
    turns = tuple(EvalTurn(id=f"D1:{n}", speaker=s, text=t) for n, (s, t) in enumerate(lines, start=1))
    questions = (
        EvalQuestion(id="q1", question="What is the name of Ann's cat?", answer="Pixel",
                     evidence=("D1:1",), category="single-hop"),
        EvalQuestion(id="q2", question="Which marathon did Bob run?", answer="Berlin",
                     evidence=("D1:2",), category="single-hop"),
        EvalQuestion(id="q3", question="When did Ann start the cello?", answer="January 2023",
                     evidence=("D1:3",), category="temporal"),
        EvalQuestion(id="q4", question="What colour is Bob's motorbike?", answer=None,
                     evidence=("D1:4",), category="adversarial"),
        EvalQuestion(id="q5", question="What colour is Bob's kitchen?", answer="pale yellow",
                     evidence=("D1:4",), category="multi-hop"),
    )
    conversation = EvalConversation(id="c1", sessions=(EvalSession(id="s1", date=DAY, turns=turns),),
                                    questions=questions)
    return Benchmark(name="tiny", conversations=(conversation,))


def _answerable() -> Benchmark:
    return select_questions(_benchmark(), categories={"single-hop", "temporal", "multi-hop"})[0]


def _endpoint(url: str, max_tokens: int, *, timeout_s: float = 10.0, model: str | None = "m") -> Endpoint:
    return Endpoint(base_url=url, model=model, api_key="k", max_tokens=max_tokens, timeout_s=timeout_s)


def _run(answers: Callable[[int], Reply], verdicts: Callable[[int], Reply], *, timeout_s: float = 10.0,
         benchmark: Benchmark | None = None) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    with llm_server(answers) as (answer_url, asked), llm_server(verdicts) as (judge_url, judged):
        document = evaluate_answers(
            benchmark or _answerable(), make_client=LayerClient, budget_tokens=512,
            answer=_endpoint(answer_url, 64, timeout_s=timeout_s, model="answerer"),
            judge=_endpoint(judge_url, 16, timeout_s=timeout_s, model="judge"),
        )
    return document, asked, judged


# ----------------------------------------------------------------- the judge's label


@pytest.mark.parametrize(("reply", "verdict"), [
    ('{"label": "CORRECT"}', True),
    ('{"label": "WRONG"}', False),
    ('```json\n{"label": "correct"}\n```', True),
    ('{"Label": "Wrong"}', False),
    ("The answer names the same city. CORRECT", True),
    ('{"label": "CORRECT', True),  # cut by max_tokens: the word is still there
    ("Correct.", True),
    ("wrong", False),
    ("INCORRECT", False),
    ('{"label": "INCORRECT"}', False),
    ("CORRECT or WRONG", None),  # both: unreadable, not WRONG
    ("the answer is correct", None),  # a lower-case word in a sentence is not a label
    ('{"label": "maybe"}', None),
    ("<|im_end|> Paris is the capital", None),
    ("", None),
])
def test_the_judge_reply_is_read_leniently_and_garbage_is_none(reply: str, verdict: bool | None) -> None:
    assert parse_label(reply) is verdict


# ----------------------------------------------------------------- what is asked


def test_select_questions_keeps_categories_with_gold_and_limits_across_conversations() -> None:
    (conversation,) = _benchmark().conversations
    two = Benchmark(name="two", conversations=(conversation, EvalConversation(
        id="c2", sessions=conversation.sessions, questions=conversation.questions)))
    chosen, without_gold = select_questions(two, categories={"single-hop", "adversarial"})
    assert [[q.id for q in c.questions] for c in chosen.conversations] == [["q1", "q2"], ["q1", "q2"]]
    assert without_gold == 2  # q4 of each: adversarial, no gold answer
    chosen, _ = select_questions(two, limit=3)
    assert [[q.id for q in c.questions] for c in chosen.conversations] == [["q1", "q2", "q3"]]
    chosen, _ = select_questions(two, limit=5)
    assert [[q.id for q in c.questions] for c in chosen.conversations] == [["q1", "q2", "q3", "q5"], ["q1"]]


def test_a_failure_is_counted_at_its_stage_and_is_never_correct_or_wrong() -> None:
    def record(correct: bool | None, failure: str | None = None) -> AnswerRecord:
        return AnswerRecord(conversation="c", id="q", category="x", question="?", gold="g", correct=correct,
                            failure=failure)

    tally = AnswerTally([record(True), record(False), record(None, "judge: unparseable reply"),
                         record(None, "answer: HTTP 500"), record(True)])
    assert tally.report() == {"questions": 5, "correct": 2, "wrong": 1, "context_failed": 0, "answer_failed": 1,
                              "judge_failed": 1, "accuracy": 0.4, "judged_accuracy": 0.6667}
    assert AnswerTally().report()["accuracy"] is None


# ----------------------------------------------------------------- the protocol, end to end


def test_every_call_sends_max_tokens_and_accuracy_comes_from_the_judge() -> None:
    verdicts = ['{"label": "CORRECT"}', "WRONG", "I think so, probably fine", '{"label": "correct"}']
    document, asked, judged = _run(lambda n: f"answer {n}", lambda n: verdicts[n])

    assert len(asked) == len(judged) == 4
    for body in asked:
        assert body["max_tokens"] == 64 and body["temperature"] == 0 and body["model"] == "answerer"
    for body in judged:
        assert body["max_tokens"] == 16 and body["temperature"] == 0 and body["model"] == "judge"
        assert body["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"] == ["CORRECT", "WRONG"]
    assert all("response_format" not in body for body in asked)  # an answer is free text
    # The answer is asked from Strata's context, with the day the question is asked.
    first = asked[0]["messages"][0]["content"]
    assert "Pixel" in first and "What is the name of Ann's cat?" in first and "08 May 2023" in first
    # The judge sees the question, the gold answer and the generated one.
    judge_prompt = judged[2]["messages"][0]["content"]
    assert "When did Ann start the cello?" in judge_prompt and "Gold answer: January 2023" in judge_prompt
    assert "Generated answer: answer 2" in judge_prompt

    assert document["overall"] == {"questions": 4, "correct": 2, "wrong": 1, "context_failed": 0,
                                   "answer_failed": 0, "judge_failed": 1, "accuracy": 0.5, "judged_accuracy": 0.6667}
    categories = document["categories"]
    assert categories["single-hop"]["correct"] == 1 and categories["single-hop"]["wrong"] == 1
    assert categories["temporal"]["judge_failed"] == 1 and categories["temporal"]["accuracy"] == 0.0
    assert categories["temporal"]["judged_accuracy"] is None
    assert categories["multi-hop"]["accuracy"] == 1.0
    assert document["failures"] == {"judge: unparseable reply": 1}
    garbage = document["records"][2]
    assert garbage["correct"] is None and garbage["judge_reply"] == "I think so, probably fine"
    # Tokens as the endpoints reported them (the fake's usage: 11 in, 7 out a call).
    assert document["tokens"]["answer"] == {"in": 44, "out": 28, "in_mean": 11, "out_mean": 7,
                                            "calls_without_usage": 0}
    assert document["tokens"]["judge"]["out"] == 28
    assert document["latency"]["answer"]["calls"] == 4 and document["latency"]["answer"]["p50_ms"] is not None
    assert document["answer"]["model"] == "answerer" and "api_key" not in document["answer"]
    table = format_answers_table(document)
    assert "overall" in table and "1 × judge: unparseable reply" in table


def test_failed_answers_and_judgements_are_counted_and_the_timeout_is_honoured() -> None:
    replies: list[Reply] = [
        lambda: (500, {"error": {"message": "overloaded"}}),
        hang(5.0),  # past the 0.5 s timeout
        lambda: (200, chat_body(None)),  # no content
        "pale yellow",
    ]

    def verdicts(n: int) -> Reply:
        return lambda: (503, {"error": {"message": "down"}})

    started = time.perf_counter()
    document, asked, judged = _run(replies.__getitem__, verdicts, timeout_s=0.5)
    assert time.perf_counter() - started < 4.5  # the hung call was given up after 0.5 s, not 5
    assert len(asked) == 4 and len(judged) == 1  # a failed answer is not judged
    assert document["overall"] == {"questions": 4, "correct": 0, "wrong": 0, "context_failed": 0,
                                   "answer_failed": 3, "judge_failed": 1, "accuracy": 0.0, "judged_accuracy": None}
    assert document["failures"] == {"answer: HTTP 500": 1, "answer: timeout after 0.5 s": 1,
                                    "answer: empty reply": 1, "judge: HTTP 503": 1}
    assert document["records"][1]["answer_ms"] < 2000
    # The empty reply still cost tokens; the other failures report none.
    assert document["tokens"]["answer"]["in"] == 22


def test_a_model_not_named_is_asked_of_the_endpoint() -> None:
    # The scripted server answers no GET /models: the run stops before anything is ingested.
    with llm_server(lambda n: "x") as (url, asked), pytest.raises(ValueError, match="--model"):
        evaluate_answers(_answerable(), make_client=LayerClient, answer=_endpoint(url, 64, model=None),
                         judge=_endpoint(url, 16))
    assert asked == []


# ----------------------------------------------------------------- the command


def test_the_command_parses_and_runs_with_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from strata_bench.evaluation import datasets
    from strata_cli import main as cli

    monkeypatch.setattr(datasets, "load_benchmark", lambda path, fmt=None: _benchmark())
    monkeypatch.setattr(cli, "_in_cluster", lambda args: (None, LayerClient))
    monkeypatch.setattr(cli, "_still_up", lambda stack: "stack left running")
    monkeypatch.setenv("STRATA_EVAL_LLM_KEY", "secret-key")
    out = tmp_path / "answers.json"
    with llm_server(lambda n: "Pixel" if n % 2 == 0 else '{"label": "CORRECT"}') as (url, received):
        code = cli.main(["eval", "answers", "--dataset", "locomo.json", "--llm", url, "--model", "tiny",
                         "--limit", "2", "--categories", "all", "--json", str(out)])
    assert code == 0
    # One endpoint for both: answer, judgement, answer, judgement; the judge defaults to the same model.
    assert [b["max_tokens"] for b in received] == [64, 16, 64, 16]
    assert {b["model"] for b in received} == {"tiny"}
    document = json.loads(out.read_text())
    assert document["questions"] == 2 and document["overall"]["accuracy"] == 1.0
    assert document["judge"] == {"base_url": url, "model": "tiny", "max_tokens": 16, "timeout_s": 60.0}
    assert document["questions_without_gold"] == 1  # the adversarial question: no gold, never asked
    assert "secret-key" not in out.read_text()
    assert "overall" in capsys.readouterr().out


def test_with_several_questions_in_flight_every_one_is_counted_in_question_order() -> None:
    with llm_server(lambda n: "an answer") as (answer_url, asked), \
            llm_server(lambda n: '{"label": "WRONG"}') as (judge_url, judged):
        document = evaluate_answers(_answerable(), make_client=LayerClient, concurrency=3,
                                    answer=_endpoint(answer_url, 64), judge=_endpoint(judge_url, 16))
    assert len(asked) == len(judged) == 4
    assert [r["id"] for r in document["records"]] == ["q1", "q2", "q3", "q5"]
    assert document["overall"]["wrong"] == 4 and document["overall"]["accuracy"] == 0.0


def test_an_endpoint_that_is_not_there_is_a_counted_failure() -> None:
    import socket

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}/v1"
    with llm_server(lambda n: "CORRECT") as (judge_url, judged):
        document = evaluate_answers(_answerable(), make_client=LayerClient, answer=_endpoint(url, 64),
                                    judge=_endpoint(judge_url, 16))
    assert judged == []
    assert document["failures"] == {"answer: connection error": 4}
    assert document["overall"]["answer_failed"] == 4 and document["overall"]["accuracy"] == 0.0


def test_a_judge_that_refuses_openais_form_is_sent_llama_cpps_from_then_on() -> None:
    """llama-cpp-python refuses ``json_schema`` (a 422 naming response_format): the judge's next
    request, and every later one, sends ``json_object`` with the schema."""
    refused = {"detail": [{"loc": ["body", "response_format", "type"], "msg": "Input should be 'json_object'"}]}

    def verdict(n: int) -> Any:
        return (lambda: (422, refused)) if n == 0 else '{"label": "CORRECT"}'

    document, _, judged = _run(lambda n: f"answer {n}", verdict)
    assert document["overall"]["correct"] == 4 and document["overall"]["judge_failed"] == 0
    assert judged[0]["response_format"]["type"] == "json_schema"
    assert [body["response_format"]["type"] for body in judged[1:]] == ["json_object"] * 4
    assert all(body["response_format"]["schema"]["required"] == ["label"] for body in judged[1:])
