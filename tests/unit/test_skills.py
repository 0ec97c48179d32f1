"""Tests for skill extraction (procedural memory): rules, LLM path, merging.

The rule tests run in microseconds. The LLM tests talk to the OpenAI-compatible
loopback server of ``tests/llm_server.py``, so they exercise the real client,
the real JSON repair and the real retry.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from strata.config import LLMSettings
from strata.errors import LLMError, LLMOutputInvalid
from strata.procedural.extractors import (
    LLMSkillExtractor,
    RuleSkillExtractor,
    SkillDraft,
    make_skill_extractor,
    merge_drafts,
    normalize_step,
    skill_search_text,
)
from strata.providers.llm import OpenAIChatLLM
from tests.llm_server import chat_body, hang, llm_server

rules = RuleSkillExtractor()

DEPLOY_TRACE: list[Any] = [
    {"action": "Build the image", "command": "docker build -t payments:1.2.3 ."},
    {"command": "docker push registry.example.com:5000/payments:1.2.3",
     "error": "Error: unauthorized: authentication required"},
    {"command": "docker login registry.example.com:5000 -u ci"},
    {"command": "docker push registry.example.com:5000/payments:1.2.3"},
    {"tool": "search_logs", "args": {"service": "payments", "since": "10m"}},
    {"command": "kubectl rollout restart deploy/payments -n staging",
     "output": "deployment.apps/payments restarted"},
]
DEPLOY_TASK = "Deploy the payments service to staging"


def draft(**overrides: Any) -> SkillDraft:
    values: dict[str, Any] = {
        "skill_name": "deploy-payments",
        "description": "Deploy payments.",
        "trigger_conditions": ["deploy payments"],
        "steps": ["a", "b", "c"],
        "common_pitfalls": [],
        "success_criteria": ["it runs"],
    }
    values.update(overrides)
    return SkillDraft(**values)


# --- RuleSkillExtractor: placeholders --------------------------------------------


def test_tool_args_become_placeholders_and_name_the_value_elsewhere() -> None:
    d = rules.extract("Look at recent logs", [
        {"tool": "search_logs", "args": {"service": "payments-api", "since": "10m", "limit": 50}},
        {"command": "kubectl logs deploy/payments-api --tail 20"},
        "Read the payments-api errors",
    ])
    assert d.steps == [
        "Call `search_logs` with service={service}, since={since}, limit={limit}",
        "Run `kubectl logs deploy/{service} --tail 20`",
        "Read the {service} errors",
    ]
    assert d.variables == ["service", "since", "limit"]


def test_shell_values_become_placeholders_same_value_same_name() -> None:
    d = rules.extract("Ship the release", [
        "cp /srv/build/app.tar.gz /tmp/app.tar.gz",
        {"command": "curl -fsS -o /tmp/app.tar.gz https://cdn.example.com/app/v2.0.1/app.tar.gz"},
        {"command": "scp /tmp/app.tar.gz ops@10.0.0.7:/opt/app"},
        {"command": "ssh 10.0.0.7 systemctl restart app --port 8443"},
        {"command": "curl http://localhost:8443/health"},
        {"command": "pip install client==1.4 && git checkout 3f2a9c1d"},
        {"command": "git tag -a v2.0.1 -m \"release notes\""},
    ])
    assert d.steps == [
        "cp {path} {path_2}",
        "Run `curl -fsS -o {path_2} {url}`",
        "Run `scp {path_2} ops@{host}:{path_3}`",
        "Run `ssh {host} systemctl restart app --port {port}`",
        "Run `curl {url_2}`",
        "Run `pip install client=={version} && git checkout {id}`",
        "Run `git tag -a {version_2} -m \"{value}\"`",
    ]
    assert d.variables == ["path", "path_2", "url", "host", "path_3", "port", "url_2", "version", "id",
                           "version_2", "value"]


def test_task_words_in_value_positions_only() -> None:
    d = rules.extract(DEPLOY_TASK, [
        {"command": "kubectl rollout restart deploy/payments -n staging"},
        {"command": "kubectl get pods --namespace staging -l app=payments"},
        "Restart the service and check the logs",
    ])
    assert d.steps == [
        "Run `kubectl rollout restart deploy/{payments} -n {staging}`",
        "Run `kubectl get pods --namespace {staging} -l app={payments}`",
        "Restart the service and check the logs",  # ordinary words stay
    ]


def test_long_flag_names_a_task_word() -> None:
    d = rules.extract("restart payments in staging", [
        {"command": "helm upgrade payments ./chart --namespace=staging"},
        {"command": "kubectl -n staging get pods"},
    ])
    assert d.steps == [
        "Run `helm upgrade {payments} {path} --namespace={namespace}`",
        "Run `kubectl -n {namespace} get pods`",
    ]


def test_full_deploy_trace() -> None:
    d = rules.extract(DEPLOY_TASK, DEPLOY_TRACE, outcome="The payments service runs in staging.")
    assert d.skill_name == "deploy-payments-service-staging"
    assert d.description == "Deploy the payments service to staging. Uses docker, search_logs, kubectl."
    assert d.steps == [
        "Build the image: run `docker build -t {service}:{version} .`",
        "Run `docker login {host}:{port} -u ci`",
        "Run `docker push {host}:{port}/{service}:{version}`",
        "Call `search_logs` with service={service}, since={since}",
        "Run `kubectl rollout restart deploy/{service} -n {staging}`",
    ]
    assert d.trigger_conditions == [
        DEPLOY_TASK,
        "when you see: Error: unauthorized: authentication required",
        "tasks that use docker",
        "tasks that use search_logs",
        "tasks that use kubectl",
    ]
    assert d.common_pitfalls == [
        ("Run `docker push {host}:{port}/{service}:{version}` fails with: Error: unauthorized: authentication required"
         " — fix: Run `docker login {host}:{port} -u ci`, then retry")
    ]
    assert d.success_criteria == [
        "The payments service runs in staging.",
        "the last step reports: deployment.apps/payments restarted",
        "completes without the errors listed in the pitfalls",
    ]


# --- RuleSkillExtractor: failures, strings, languages ------------------------------


def test_error_then_fix_is_a_pitfall_and_not_a_step() -> None:
    d = rules.extract("Run the unit tests", [
        {"command": "pytest tests/unit", "status": "error",
         "output": "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "ModuleNotFoundError: No module named 'yaml'"},
        {"command": "pip install pyyaml"},
        {"command": "python -m pytest tests/unit -q", "output": "12 passed in 0.40s"},
    ])
    assert d.steps == ["Run `pip install pyyaml`", "Run `python -m pytest tests/unit -q`"]
    # A traceback's useful line is its last; the fix is the next step with the same head (pip ≠ pytest).
    assert d.common_pitfalls == ["Run `pytest tests/unit` fails with: ModuleNotFoundError: No module named 'yaml'"]
    assert "when you see: ModuleNotFoundError: No module named 'yaml'" in d.trigger_conditions
    assert d.success_criteria == ["the last step reports: 12 passed in 0.40s",
                                  "completes without the errors listed in the pitfalls"]


def test_failed_tool_call_fixed_by_same_tool() -> None:
    d = rules.extract("Query the orders table", [
        {"tool": "sql", "args": {"query": "SELECT * FROM order"}, "error": "relation \"order\" does not exist"},
        {"tool": "sql", "args": {"query": "SELECT * FROM orders"}, "status": "ok"},
    ])
    assert d.steps == ["Call `sql` with query={query_2}"]
    assert d.common_pitfalls == [
        ("Call `sql` with query={query} fails with: relation \"order\" does not exist"
         " — fix: Call `sql` with query={query_2}")
    ]


def test_string_only_trace_error_reports_on_previous_step() -> None:
    d = rules.extract("Install the dependencies", [
        "run npm install",
        "Error: EACCES: permission denied, mkdir '/usr/lib/node_modules'",
        "run sudo npm install",
        "run npm test",
    ])
    assert d.steps == ["run sudo npm install", "run npm test"]
    assert d.common_pitfalls == [
        # Error lines are quoted as they were: they are what the next agent will see.
        ("run npm install fails with: Error: EACCES: permission denied, mkdir '/usr/lib/node_modules'"
         " — fix: run sudo npm install")
    ]


def test_chinese_string_trace() -> None:
    task = "部署支付服务到测试环境"
    trace = [
        "构建镜像", "错误：权限不足", "使用 sudo 构建镜像", "推送镜像到仓库 https://hub.example.cn/pay", "检查服务状态",
    ]
    d = rules.extract(task, trace, outcome="服务运行正常")
    assert d.skill_name == "部署支付服务到测试环境"
    assert d.description == "部署支付服务到测试环境。"
    assert d.steps == ["使用 sudo 构建镜像", "推送镜像到仓库 {url}", "检查服务状态"]
    assert d.common_pitfalls == ["构建镜像 fails with: 错误：权限不足 — fix: 使用 sudo 构建镜像"]
    assert d.trigger_conditions[:2] == [task, "when you see: 错误：权限不足"]
    assert d.success_criteria[0] == "服务运行正常"


@pytest.mark.parametrize("text", ["Traceback (most recent call last):", "failed to connect", "ValueError: bad",
                                  "java.lang.NullPointerException", "报错了", "执行失败"])
def test_error_looking_strings_are_failures(text: str) -> None:
    d = rules.extract("do it", [{"action": "first try", "status": None}, text])
    assert d.steps == []
    assert d.common_pitfalls[0].startswith("first try fails with:")


def test_a_confirmed_step_is_not_blamed_for_the_next_error() -> None:
    d = rules.extract("do it", [{"action": "step one", "status": "ok"}, "Error: boom"])
    assert d.steps == ["step one"]
    assert d.common_pitfalls == ["A step fails with: Error: boom"]


def test_consecutive_identical_steps_collapse() -> None:
    d = rules.extract("poll the job", ["check job status", "check job status", "download the report",
                                       "check job status"])
    assert d.steps == ["check job status", "download the report", "check job status"]


def test_output_only_step_belongs_to_previous() -> None:
    d = rules.extract("print the date", [{"command": "date"}, {"output": "Mon Jun 3 10:00:00 UTC 2024"}])
    assert d.steps == ["Run `date`"]
    assert d.success_criteria == ["the last step reports: Mon Jun 3 10:00:00 UTC 2024"]


def test_success_criteria_fallback_and_failed_outcome() -> None:
    d = rules.extract("tidy  the\nrepo", ["remove build artefacts"], outcome="Failed: disk was read-only")
    assert d.success_criteria == ["the task 'tidy the repo' is done"]
    assert d.common_pitfalls == []  # a failed outcome invents no pitfall


def test_determinism() -> None:
    first = rules.extract(DEPLOY_TASK, DEPLOY_TRACE, outcome="ok")
    again = RuleSkillExtractor().extract(DEPLOY_TASK, json.loads(json.dumps(DEPLOY_TRACE)), outcome="ok")
    assert first == again
    assert first.to_dict() == again.to_dict()


def test_limits() -> None:
    trace: list[Any] = []
    for i in range(120):
        trace.append({"command": f"make target{i} " + "x" * 700})
        trace.append({"tool": f"tool{i}", "error": f"Error: failure number {i}\nsecond line"})
    d = rules.extract("build " + "everything " * 100, trace, outcome="done " * 200)
    assert len(d.steps) == 50
    assert len(d.common_pitfalls) == 20
    assert len(d.trigger_conditions) == 10
    assert len(d.success_criteria) <= 10
    items = [*d.steps, *d.common_pitfalls, *d.trigger_conditions, *d.success_criteria]
    assert max(len(item) for item in items) <= 500
    assert len(d.skill_name) <= 64
    assert "second line" not in " ".join(d.common_pitfalls)


def test_long_trace_with_many_failures_stays_fast() -> None:
    trace: list[Any] = [{"action": f"try variant {i} of the approach", "error": f"Error: {i}"} for i in range(1000)]
    trace += [{"command": f"make target{i} --jobs 4"} for i in range(1000)]
    started = time.monotonic()
    d = rules.extract("do it", trace)
    assert time.monotonic() - started < 2.0
    assert len(d.common_pitfalls) == 20 and len(d.steps) == 50


@pytest.mark.parametrize(
    ("task", "slug"),
    [
        ("Please deploy the FastAPI service on Kubernetes", "deploy-fastapi-service-kubernetes"),
        ("Set up a new Postgres replica for our analytics cluster in eu-west-1 today quickly",
         "set-new-postgres-replica-analytics-cluster"),
        ("to the", "skill"),
        ("请部署支付服务到测试环境", "部署支付服务到测试环境"),
        ("部署 payments 服务到 staging", "部署-payments-服务到-staging"),
        ("Fix the failing test in tests/test_api.py", "fix-failing-test"),
        ("a" + "b" * 100, "a" + "b" * 63),
    ],
)
def test_skill_name_slug(task: str, slug: str) -> None:
    assert rules.extract(task, ["x"]).skill_name == slug


def test_invalid_input_raises_value_error() -> None:
    with pytest.raises(ValueError):
        rules.extract("  ", ["x"])
    with pytest.raises(ValueError):
        rules.extract("task", "not a list")  # a str is a Sequence to the type checker, not to extract
    with pytest.raises(ValueError, match="step 1"):
        rules.extract("task", ["ok", 42])  # type: ignore[list-item]  # a step of the wrong type, on purpose


# --- normalize_step, variables, SkillDraft ----------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Run `docker build -t {image} .`", "run  `docker build -t {tag} .`"),
        ("Restart the pod.", "restart the pod"),
        ("检查服务状态。", "检查服务状态"),
        ("Call `x` with a={a}!", "call `x` with a={b}"),
    ],
)
def test_normalize_step_equal(a: str, b: str) -> None:
    assert normalize_step(a) == normalize_step(b)


def test_normalize_step_keeps_real_differences() -> None:
    assert normalize_step("Run `make build`") != normalize_step("Run `make test`")
    assert normalize_step("  Use {x}\n now ") == "use {} now"


def test_variables_first_use_order_dedup() -> None:
    d = draft(steps=["copy {src} to {dst}", "echo ${HOME} {src}", "open {url_2} with {{literal}}", "{url_2}"])
    assert d.variables == ["src", "dst", "url_2", "literal"]


def test_from_dict_round_trip_and_ignores_extra_keys() -> None:
    d = draft(common_pitfalls=["p"])
    assert SkillDraft.from_dict({**d.to_dict(), "variables": ["x"], "version": 3}) == d


@pytest.mark.parametrize(
    "change",
    [
        {"skill_name": None},
        {"skill_name": ""},
        {"skill_name": 5},
        {"description": ["x"]},
        {"steps": "a step"},
        {"steps": ["ok", 3]},
        {"trigger_conditions": None},
        {"success_criteria": {"a": 1}},
    ],
)
def test_from_dict_is_strict(change: dict[str, Any]) -> None:
    data = {**draft().to_dict(), **change}
    with pytest.raises(ValueError):
        SkillDraft.from_dict(data)


@pytest.mark.parametrize("missing", ["skill_name", "description", "trigger_conditions", "steps",
                                     "common_pitfalls", "success_criteria"])
def test_from_dict_missing_key(missing: str) -> None:
    data = draft().to_dict()
    del data[missing]
    with pytest.raises(ValueError, match=missing):
        SkillDraft.from_dict(data)


def test_skill_search_text() -> None:
    text = skill_search_text(draft(trigger_conditions=["deploy payments", "when you see: ImagePullBackOff"]))
    assert text == "deploy payments\nDeploy payments.\ndeploy payments\nwhen you see: ImagePullBackOff"
    assert "a" not in text.split("\n")  # steps are not embedded


# --- merge_drafts -------------------------------------------------------------------


def test_merge_inserts_new_step_between_known_steps() -> None:
    merged = merge_drafts(draft(steps=["a", "b", "c"]), draft(steps=["A.", "x", "c", "y"]))
    assert merged.steps == ["a", "x", "b", "c", "y"]


def test_merge_new_steps_before_first_known_and_unrelated() -> None:
    assert merge_drafts(draft(steps=["a", "b"]), draft(steps=["p", "q", "b", "r"])).steps == ["a", "p", "q", "b", "r"]
    assert merge_drafts(draft(steps=["a", "b"]), draft(steps=["p", "q"])).steps == ["a", "b", "p", "q"]


def test_merge_dedups_by_normalized_step_and_placeholders() -> None:
    existing = draft(steps=["Run `docker build -t {image} .`", "Run `docker push {image}`"])
    new = draft(steps=["run `docker build -t {tag} .`", "Run `docker push {tag}`."])
    assert merge_drafts(existing, new).steps == existing.steps


def test_merge_lists_names_and_description() -> None:
    existing = draft(skill_name="old-name", description="", trigger_conditions=["t1"],
                     common_pitfalls=["p1"], success_criteria=["s1"])
    new = draft(skill_name="new-name", description="New words.", trigger_conditions=["T1.", "t2"],
                common_pitfalls=["p2", "p1"], success_criteria=["s1", "s2"])
    merged = merge_drafts(existing, new)
    assert merged.skill_name == "old-name"
    assert merged.description == "New words."
    assert merged.trigger_conditions == ["t1", "t2"]
    assert merged.common_pitfalls == ["p1", "p2"]
    assert merged.success_criteria == ["s1", "s2"]
    assert merge_drafts(draft(description="Kept."), new).description == "Kept."
    assert merge_drafts(existing, new) == merged  # deterministic


def test_merge_respects_limits_and_keeps_existing() -> None:
    existing = draft(steps=[f"s{i}" for i in range(48)], common_pitfalls=[f"p{i}" for i in range(19)])
    new = draft(steps=["s0", "n1", "n2", "n3", "s1"], common_pitfalls=["q1", "q2"])
    merged = merge_drafts(existing, new)
    assert merged.steps[:3] == ["s0", "n1", "n2"] and len(merged.steps) == 50
    assert set(existing.steps) <= set(merged.steps)
    assert merged.common_pitfalls[-1] == "q1" and len(merged.common_pitfalls) == 20


def test_merge_of_rule_drafts_from_two_traces() -> None:
    first = rules.extract(DEPLOY_TASK, DEPLOY_TRACE)
    second = rules.extract(DEPLOY_TASK, [*DEPLOY_TRACE[:4], {"command": "helm lint ./chart"}, *DEPLOY_TRACE[4:]])
    merged = merge_drafts(first, second)
    assert merged.steps == [*first.steps[:3], "Run `helm lint {path}`", *first.steps[3:]]


def test_make_skill_extractor() -> None:
    assert isinstance(make_skill_extractor(None), RuleSkillExtractor)
    llm = OpenAIChatLLM(LLMSettings(base_url="http://127.0.0.1:9/v1"))
    extractor = make_skill_extractor(llm)
    assert isinstance(extractor, LLMSkillExtractor) and extractor.llm is llm


# --- LLMSkillExtractor against the loopback server ---------------------------------

GOOD = {
    "skill_name": "Deploy FastAPI service to Kubernetes",
    "description": "Build, push and roll out a FastAPI service on Kubernetes.",
    "trigger_conditions": ["deploy a FastAPI service", "when you see: ImagePullBackOff"],
    "steps": ["Run `docker build -t {image} .`", "Run `kubectl rollout restart deploy/{service} -n {namespace}`"],
    "common_pitfalls": ["pushing without docker login fails with: unauthorized"],
    "success_criteria": ["the rollout completes"],
}


class Script:
    """Replies for the module's one server (each server costs ~0.5 s to shut down).
    The last reply repeats, so "invalid twice" needs one entry."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, n: int) -> Any:
        with self.lock:
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


Endpoint = tuple[str, list[dict[str, Any]], Script]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    with pytest.MonkeyPatch.context() as patch:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            patch.delenv(name, raising=False)
        script = Script()
        with llm_server(script) as (url, received):
            yield url, received, script


def scripted(endpoint: Endpoint, replies: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """Set this test's replies; returns the URL and the (cleared) list of requests."""
    url, received, script = endpoint
    with script.lock:
        script.replies[:] = replies
        received.clear()
    return url, received


def extractor(url: str, timeout_s: float = 5.0, **kw: Any) -> LLMSkillExtractor:
    return LLMSkillExtractor(OpenAIChatLLM(LLMSettings(base_url=url, timeout_s=timeout_s, max_retries=0)), **kw)


def test_llm_valid_reply_and_prompt(endpoint: Endpoint) -> None:
    url, received = scripted(endpoint, [json.dumps(GOOD)])
    d = extractor(url).extract(DEPLOY_TASK, DEPLOY_TRACE, outcome="rolled out")
    assert d.skill_name == "deploy-fastapi-service-kubernetes"  # re-slugged
    assert d.steps == GOOD["steps"]
    assert d.variables == ["image", "service", "namespace"]
    assert d.common_pitfalls == GOOD["common_pitfalls"]
    (body,) = received
    system, user = (m["content"] for m in body["messages"])
    assert body["response_format"]["type"] == "json_schema"
    assert sorted(body["response_format"]["json_schema"]["schema"]["required"]) == sorted(GOOD)
    assert body["max_tokens"] == 768
    for key in GOOD:
        assert key in system
    assert "{placeholder}" in system
    assert f"Task: {DEPLOY_TASK}" in user and "Outcome: rolled out" in user
    assert "kubectl rollout restart deploy/payments -n staging" in user
    assert json.dumps(DEPLOY_TRACE[1], ensure_ascii=False) in user
    assert "truncated" not in user


@pytest.mark.parametrize(
    "content",
    [f"```json\n{json.dumps(GOOD)}\n```", f"Here is the skill:\n{json.dumps(GOOD)}\nHope it helps."],
)
def test_llm_reply_in_fences_or_prose_is_repaired(endpoint: Endpoint, content: str) -> None:
    url, received = scripted(endpoint, [content])
    d = extractor(url).extract("deploy", ["x"])
    assert d.description == GOOD["description"]
    assert len(received) == 1


def test_llm_invalid_then_valid_is_retried(endpoint: Endpoint) -> None:
    url, received = scripted(endpoint, ["{not json", json.dumps(GOOD)])
    d = extractor(url).extract("deploy", ["x"])
    assert d.steps == GOOD["steps"]
    assert len(received) == 2
    assert "previous reply was not valid" in received[1]["messages"][1]["content"]


def test_llm_invalid_twice_raises_output_invalid(endpoint: Endpoint) -> None:
    url, received = scripted(endpoint, ["nope", "still nope"])
    with pytest.raises(LLMOutputInvalid):
        extractor(url).extract("deploy", ["x"])
    assert len(received) == 2


def test_llm_retries_zero_makes_one_request(endpoint: Endpoint) -> None:
    url, received = scripted(endpoint, ["nope", json.dumps(GOOD)])
    with pytest.raises(LLMOutputInvalid):
        extractor(url, retries=0).extract("deploy", ["x"])
    assert len(received) == 1


@pytest.mark.parametrize(
    "bad",
    [
        {k: v for k, v in GOOD.items() if k != "success_criteria"},
        {**GOOD, "steps": "one step"},
        {**GOOD, "steps": []},
        {**GOOD, "steps": ["ok", 3]},
        {**GOOD, "description": "   "},
        {**GOOD, "skill_name": "x" * 81},
        {**GOOD, "common_pitfalls": ["y" * 501]},
        {**GOOD, "trigger_conditions": ["t"] * 31},
    ],
)
def test_llm_wrong_shape_is_retried_then_invalid(endpoint: Endpoint, bad: dict[str, Any]) -> None:
    url, received = scripted(endpoint, [json.dumps(bad)])
    with pytest.raises(LLMOutputInvalid):
        extractor(url).extract("deploy", ["x"])
    assert len(received) == 2


def test_llm_missing_key_then_valid(endpoint: Endpoint) -> None:
    bad = {k: v for k, v in GOOD.items() if k != "steps"}
    url, received = scripted(endpoint, [json.dumps(bad), json.dumps({**GOOD, "extra": "ignored"})])
    d = extractor(url).extract("deploy", ["x"])
    assert d.steps == GOOD["steps"] and len(received) == 2


def test_llm_empty_criteria_get_the_fallback_and_names_stay_slugs(endpoint: Endpoint) -> None:
    reply = {**GOOD, "skill_name": "The To And", "success_criteria": [], "steps": ["  do {x}  "]}
    url, _ = scripted(endpoint, [json.dumps(reply)])
    d = extractor(url).extract("Rotate the API keys", ["x"])
    assert d.skill_name == "rotate-api-keys"
    assert d.steps == ["do {x}"]
    assert d.success_criteria == ["the task 'Rotate the API keys' is done"]


def test_llm_http_500_raises_llm_error(endpoint: Endpoint) -> None:
    url, received = scripted(endpoint, [lambda: (500, {"error": {"message": "boom"}})])
    with pytest.raises(LLMError) as info:
        extractor(url).extract("deploy", ["x"])
    assert not isinstance(info.value, LLMOutputInvalid)
    assert len(received) == 1


def test_llm_hanging_server_times_out_quickly(endpoint: Endpoint) -> None:
    url, _ = scripted(endpoint, [hang(5)])
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        extractor(url, timeout_s=0.5).extract("deploy", ["x"])
    elapsed = time.monotonic() - started
    assert "did not answer" in info.value.message
    assert elapsed < 2.5


def test_llm_refusal_raises_llm_error(endpoint: Endpoint) -> None:
    url, _ = scripted(endpoint, [lambda: (200, chat_body(None, refusal="no"))])
    with pytest.raises(LLMError, match="refused"):
        extractor(url).extract("deploy", ["x"])


def test_llm_long_trace_is_truncated_with_a_note(endpoint: Endpoint) -> None:
    trace: list[Any] = [{"command": f"step-{i:03d}", "output": "o" * 300} for i in range(200)]
    trace.insert(0, {"command": "first", "output": "z" * 50_000})
    url, received = scripted(endpoint, [json.dumps(GOOD)])
    extractor(url, max_trace_chars=4000).extract("long job", trace, outcome=None)
    user = received[0]["messages"][1]["content"]
    assert "Outcome: not given" in user
    assert "truncated" in user
    assert len(user) < 4000 + 600
    assert '"command": "first"' in user and "step-199" in user  # the start and the end survive
    assert "step-100" not in user
    assert "z" * 2000 not in user  # one huge output is cut


def test_llm_extractor_rejects_bad_settings() -> None:
    llm = OpenAIChatLLM(LLMSettings(base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(ValueError):
        LLMSkillExtractor(llm, retries=-1)
    with pytest.raises(ValueError):
        LLMSkillExtractor(llm, max_trace_chars=10)
