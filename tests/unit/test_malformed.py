"""Malformed headers, query parameters and bodies are 4xx with a message, never a 500; and the
500 for anything unexpected logs no word of the request."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from strata.access.audit import AuditLog
from strata.access.audit import entry as audit_entry
from strata.errors import InvalidInput, NotFound
from strata.schema import ContextRequest, DocumentIn, InteractionIn, SearchRequest, SkillExtractIn, TurnIn
from strata.store.records import InMemoryRecordStore
from strata_serve.errors import install_handlers, validation_response
from strata_serve.guards import Internal
from strata_serve.routes.common import expected_version

SECRET = "Zebra-Cipher-90210"


@pytest.mark.parametrize("value", ["²", '"²"', "٣", "1_000", "1" * 19, "9" * 5000, "", "-1", "+3", "3.0", " "])
def test_if_match_takes_ascii_digits_only(value: str) -> None:
    """``"²".isdigit()`` is True and ``int("²")`` raises: the route answered 500."""
    with pytest.raises(InvalidInput, match="If-Match must be a version"):
        expected_version(value)


def test_if_match_reads_a_version() -> None:
    assert [expected_version(v) for v in ("3", '"3"', 'W/"17"', None)] == [3, 3, 17, None]


def test_audit_since_without_a_zone_is_utc() -> None:
    """``GET /v1/audit?since=2026-01-01T00:00:00`` compared a naive time with aware ones: 500."""
    store = InMemoryRecordStore()
    store.ensure_collection("state", dim=2)
    log = AuditLog(store, "state")
    log.append("t", [audit_entry("record_turns", "episodic", "s1", key_id="k", version=1)])
    assert len(log.read("t", since=datetime(2000, 1, 1))) == 1
    assert log.read("t", since=datetime(2999, 1, 1)) == []
    assert len(log.read("t", since=datetime(2000, 1, 1, tzinfo=UTC))) == 1


@pytest.mark.parametrize(
    "weights", ['{"dense": NaN, "lexical": 1}', '{"dense": Infinity}', '{"graph": -Infinity, "dense": 1}']
)
def test_search_weights_must_be_finite(weights: str) -> None:
    """NaN weights were accepted and gave NaN scores."""
    with pytest.raises(ValidationError, match="finite"):
        SearchRequest.model_validate(json.loads(f'{{"query": "x", "weights": {weights}}}'))


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (TurnIn, {"user": "hello \ud800"}),
        (TurnIn, {"user": "x", "metadata": {"k\udfff": 1}}),
        (SearchRequest, {"query": "\udc80 vault"}),
        (ContextRequest, {"message": "\ud800", "session_id": "s1"}),
        (DocumentIn, {"text": "# T\n\n\ud83d alone"}),
        (SkillExtractIn, {"task": "t", "trace": [{"tool": "x", "args": {"a": ["\ud800"]}}]}),
        (InteractionIn, {"session_id": "s1", "user": "x", "trace": ["\udfff"]}),
    ],
)
def test_lone_surrogates_are_refused_at_the_edge(model: type, body: dict[str, object]) -> None:
    """JSON may spell "\\ud800"; the embedder raised TypeError on it (500) and no store can encode it."""
    with pytest.raises(ValidationError, match="lone surrogate"):
        model.model_validate(body)  # type: ignore[attr-defined]


def test_a_validation_answer_naming_a_surrogate_field_can_be_encoded() -> None:
    from fastapi.exceptions import RequestValidationError

    problem = {"loc": ("body", "k\ud800"), "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
    response = validation_response(RequestValidationError([problem]))
    assert response.status_code == 422 and b"\\ud800" in bytes(response.body)


def app_that_fails() -> FastAPI:
    app = FastAPI()
    install_handlers(app)
    app.add_middleware(Internal)

    @app.post("/v1/things/{thing_id}")
    async def fail(thing_id: str, body: dict[str, str]) -> None:
        raise ValueError(f"invalid literal for int() with base 10: {body['v']!r} ({thing_id})")

    @app.get("/v1/missing")
    async def missing() -> None:
        from ray.exceptions import RayTaskError

        raise RayTaskError("fn", "traceback", NotFound("no such thing"))  # type: ignore[no-untyped-call]  # Ray leaves it unannotated

    return app


async def test_a_500_logs_what_and_where_but_no_word_of_the_request(caplog: pytest.LogCaptureFixture) -> None:
    transport = httpx.ASGITransport(app=app_that_fails(), raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with caplog.at_level(logging.DEBUG):
            failed = await client.post(
                f"/v1/things/{SECRET}?q={SECRET}", json={"v": SECRET}, headers={"X-Note": SECRET}
            )
            wrapped = await client.get("/v1/missing")
    assert failed.status_code == 500 and failed.json()["error"] == "InternalError" and SECRET not in failed.text
    assert wrapped.status_code == 404 and wrapped.json()["error"] == "NotFound"  # a Strata error behind Ray's
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records if r.name != "httpx")
    assert "500 on POST /v1/things/{thing_id}: builtins.ValueError at " in logged and "fail" in logged
    assert SECRET not in logged
