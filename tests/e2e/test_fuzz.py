"""Schemathesis against the running stack's own OpenAPI schema: no input gives a
5xx, and every documented response matches its schema. Bounded examples per
operation, so the run stays within CI time."""

from __future__ import annotations

import os
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.e2e.running import Running

#: Examples per operation; 28 operations, so about 700 requests (50 each: 1,351 cases, all passing).
EXAMPLES = int(os.environ.get("STRATA_FUZZ_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def stack(agents_stack: Running) -> Running:
    return agents_stack  # the session's default stack (tests/e2e/conftest.py): one start fewer


def _fuzz(operation: Any, name: str, cases: dict[str, int], headers: dict[str, str]) -> Any:
    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        derandomize=True,  # the same cases every run: a failure in CI reproduces here
        database=None,
    )
    @hypothesis.given(case=operation.as_strategy())
    def run(case: Any) -> None:
        cases[name] += 1
        # Not the default checks: a valid id that names nothing is a 404 here, not a
        # "rejected positive case", and error statuses are documented once, not per route.
        case.call_and_validate(
            headers=headers, timeout=60,
            checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
        )

    return run


def test_no_input_gives_a_server_error(stack: Running) -> None:
    """Every operation of the live schema, EXAMPLES generated cases each.

    Driven by hand rather than through ``schemathesis.pytest.from_fixture``: its
    lazy loader sets ``node._nodeid``, which pytest 9 no longer has.
    """
    schema = schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
    headers = {"Authorization": f"Bearer {stack.key}"}
    cases: dict[str, int] = {}
    failures: list[str] = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()  # an operation the schema could not describe
        operation = result.ok()
        name = f"{operation.method.upper()} {operation.path}"
        cases[name] = 0

        run = _fuzz(operation, name, cases, headers)
        try:
            run()
        except Exception as exc:
            failures.append(f"{name}: {str(exc)[:600]}")
    print(f"schemathesis: {sum(cases.values())} cases over {len(cases)} operations")
    assert not failures, "\n\n".join(failures)
    assert len(cases) >= 20 and {"POST /v1/context", "POST /v1/skills:extract", "POST /v1/interactions"} <= set(cases)


#: Malformed headers, query parameters and bodies that once answered 500 or were taken as
#: valid, each with the 4xx it must get now: (method, path, headers, raw body, status).
MALFORMED: list[tuple[str, str, dict[str, str], bytes | None, int]] = [
    # "²".isdigit() is True, then int("²") raised: 500.
    ("POST", "/v1/sessions/s1/working/items", {"If-Match": "\u00b2"},
     b'{"items": [{"role": "user", "content": "x"}]}', 422),
    ("POST", "/v1/sessions/s1/turns", {"If-Match": '"1' + "0" * 40 + '"'}, b'{"user": "x"}', 422),
    ("DELETE", "/v1/documents/d1", {"If-Match": "W/\"\u00b3\""}, None, 422),
    # A time without a zone, compared with aware ones: 500. Now read as UTC (200).
    ("GET", "/v1/audit?since=2026-01-01T00:00:00", {}, None, 200),
    ("GET", "/v1/audit?since=not-a-time", {}, None, 422),
    ("GET", "/v1/audit?limit=1e9", {}, None, 422),
    ("GET", "/v1/audit?after=../other/audit/1", {}, None, 422),
    ("GET", "/v1/audit?after=" + "1" * 65, {}, None, 422),
    ("GET", "/v1/audit?after=0-0", {}, None, 200),
    # NaN and infinite weights were accepted and gave NaN scores.
    ("POST", "/v1/search", {}, b'{"query": "x", "weights": {"dense": NaN, "lexical": 1}}', 422),
    ("POST", "/v1/search", {}, b'{"query": "x", "weights": {"dense": Infinity}}', 422),
    ("POST", "/v1/search", {}, b'{"query": "x", "min_cosine": NaN}', 422),
    # A lone surrogate: the embedder raised TypeError (500).
    ("POST", "/v1/search", {}, b'{"query": "vault \\ud800 code"}', 422),
    ("POST", "/v1/sessions/s1/turns", {}, b'{"user": "hi \\udfff"}', 422),
    ("POST", "/v1/documents", {}, b'{"text": "# T\\n\\n\\ud83d", "doc_id": "d-sur"}', 422),
    ("POST", "/v1/sessions/s1/turns", {}, b'{"user": "x", "metadata": {"\\ud800": 1}}', 422),
    ("POST", "/v1/documents", {"Idempotency-Key": "has spaces"}, b'{"text": "x"}', 422),
]


def test_malformed_inputs_get_a_4xx_with_a_message(stack: Running) -> None:
    problems = []
    for method, path, headers, body, status in MALFORMED:
        # Header bytes as sent: "\u00b2" is the one byte 0xb2, which the server reads as "²" (latin-1).
        raw = {name.encode(): value.encode("latin-1") for name, value in headers.items()}
        sent = {b"Authorization": f"Bearer {stack.key}".encode(), b"content-type": b"application/json", **raw}
        r = httpx.request(method, stack.url + path, content=body, headers=sent, timeout=60)
        is_json = r.headers.get("content-type", "").startswith("application/json")
        message = r.json().get("message", "") if is_json else ""
        if r.status_code != status or (status >= 400 and not message):
            problems.append(f"{method} {path} {headers} {body!r}: {r.status_code} {r.text[:200]}")
    assert not problems, "\n".join(problems)
