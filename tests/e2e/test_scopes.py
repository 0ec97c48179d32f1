"""Every route with every kind of key, against the stack as `strata up` starts it: the scope
table of tests/unit/test_scopes.py over HTTP, the findings it came from, idempotency at the
edge of a scope, and no request content in the Serve logs after a 500."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from strata.access.idempotency import IdempotencyStore
from strata.store.ttl import EXPIRES
from tests.e2e.running import Running
from tests.unit.test_scopes import EXPECTED

DOC = "Ocelot-Harbor-3391"  # only in the tenant's document and skill: a session key must never see it
KINDS: dict[str, dict[str, object]] = {  # the keys of tests/unit/test_scopes.py, in its order (admin made separately)
    "tenant": {},
    "read-only": {"read_only": True},
    "session": {"session_id": "own"},
    "session read-only": {"session_id": "own", "read_only": True},
    "session shared": {"session_id": "own", "shared": True},
    "tenant unshared": {"shared": False},
}


@pytest.fixture(scope="module")
def stack(agents_stack: Running) -> Running:
    return agents_stack  # the session's default stack (tests/e2e/conftest.py): one start fewer


@pytest.fixture(scope="module")
def world(stack: Running) -> dict[str, Any]:
    admin = stack.new_key("create-admin")
    keys = {"admin": admin}
    for kind, scope in KINDS.items():
        made = stack.call("POST", "/v1/admin/keys", admin, {"tenant": "acme", "name": kind, **scope})
        assert made.status_code == 201, made.text
        keys[kind] = made.json()["key"]
    full = keys["tenant"]
    doc = stack.call(
        "POST", "/v1/documents", full, {"doc_id": "d1", "text": f"# Plans\n\n{DOC} Industries uses Kafka."}
    )
    assert doc.status_code == 201, doc.text
    skill = stack.call(
        "POST", "/v1/skills:extract", full, {"task": f"Rotate the {DOC} keys", "trace": ["vault rotate"]}
    )
    assert skill.status_code == 201, skill.text
    job = stack.call(
        "POST",
        "/v1/interactions",
        full,
        {
            "session_id": "own",
            "user": f"deploy {DOC}",
            "agent": "done",
            "task_type": "deployment",
            "success": True,
            "trace": ["make deploy"],
        },
    )
    assert job.status_code == 201 and job.json()["skill_job"], job.text
    return {"keys": keys, "skill": skill.json()["skill_id"], "job": job.json()["skill_job"]["job_id"]}


def send(stack: Running, method: str, path: str, key: str, body: Any = None, **headers: str) -> httpx.Response:
    """``stack.call`` with more headers."""
    return httpx.request(
        method, stack.url + path, json=body, timeout=60, headers={"Authorization": f"Bearer {key}", **headers}
    )


def requests(skill: str, job: str, kind: str) -> dict[str, tuple[str, str, Any, dict[str, str]]]:
    """One request per route (deletions and forgetting last; stale If-Match: nothing is lost)."""
    stale = {"If-Match": '"999"'}
    return {
        "record_turn": ("POST", "/v1/sessions/own/turns", {"user": "hi"}, {}),
        "record_turns": ("POST", "/v1/sessions/own/turns/batch", {"turns": [{"user": "hi"}]}, {}),
        "get_working": ("GET", "/v1/sessions/own/working", None, {}),
        "list_sessions": ("GET", "/v1/sessions", None, {}),
        "list_turns": ("GET", "/v1/sessions/own/turns", None, {}),
        "add_working_items": (
            "POST",
            "/v1/sessions/own/working/items",
            {"items": [{"role": "user", "content": "x"}]},
            {},
        ),
        "post_interaction": ("POST", "/v1/interactions", {"session_id": "own", "user": "x", "agent": "y"}, {}),
        "build_context": ("POST", "/v1/context", {"message": "plans", "session_id": "own"}, {}),
        "search": ("POST", "/v1/search", {"query": "plans", "session_id": "own"}, {}),
        "index_document": ("POST", "/v1/documents", {"doc_id": f"d-{kind.replace(' ', '-')}", "text": "# x\n\ny"}, {}),
        "list_documents": ("GET", "/v1/documents", None, {}),
        "get_document": ("GET", "/v1/documents/d1", None, {}),
        "entity": ("GET", "/v1/entities?name=Kafka", None, {}),
        "extract_skill": ("POST", "/v1/skills:extract", {"task": "list files", "trace": ["ls"]}, {}),
        "find_skills": ("GET", "/v1/skills", None, {}),
        "get_skill": ("GET", f"/v1/skills/{skill}", None, {}),
        "record_outcome": ("POST", f"/v1/skills/{skill}/outcomes", {"success": True}, {}),
        "update_skill": ("PATCH", f"/v1/skills/{skill}", {"description": "d"}, stale),
        "skill_history": ("GET", f"/v1/skills/{skill}/history", None, {}),
        "skill_job": ("GET", f"/v1/skill-jobs/{job}", None, {}),
        "audit": ("GET", "/v1/audit", None, {}),
        "export": ("GET", "/v1/export", None, {}),
        "usage": ("GET", "/v1/usage", None, {}),
        "delete_skill": ("DELETE", f"/v1/skills/{skill}", None, stale),
        "delete_document": ("DELETE", "/v1/documents/never-made", None, {}),
        "forget_turn": ("DELETE", "/v1/sessions/own/turns/never-made", None, {}),
        "forget_session": ("DELETE", "/v1/sessions/never-made", None, {}),
    }


def test_every_route_with_every_kind_of_key(stack: Running, world: dict[str, Any]) -> None:
    order = ["admin", *KINDS]
    problems = []
    calls = 0
    for kind in order:
        key = world["keys"][kind]
        for route, (method, path, body, headers) in requests(world["skill"], world["job"], kind).items():
            if route == "forget_session" and "session" in kind:
                path = "/v1/sessions/own"  # its own session: allowed, and the last call it makes
            allowed = EXPECTED[route][order.index(kind)]
            r = send(stack, method, path, key, body, **headers)
            calls += 1
            ok = (r.status_code != 403 and r.status_code < 500) if allowed else r.status_code == 403
            if not ok or (r.status_code == 403 and not r.json().get("message")):
                problems.append(f"{kind:18} {route:18} {method} {path}: {r.status_code} {r.text[:160]}")
            if not allowed and DOC in r.text:
                problems.append(f"{kind:18} {route:18}: LEAK of the tenant's document or skill")
    assert not problems, "\n".join(problems)
    assert calls == len(order) * len(EXPECTED)


def test_a_session_key_sees_no_documents_or_skills_unless_shared(stack: Running, world: dict[str, Any]) -> None:
    """Seen on a running stack: a session key's search with its own session_id and
    layers ["semantic"] answered 200 with the document's text."""
    keys = world["keys"]
    for layers in (["semantic"], ["procedural"], ["episodic", "semantic"]):
        body: dict[str, object] = {"query": f"{DOC} plans", "session_id": "own", "layers": layers}
        refused = stack.call("POST", "/v1/search", keys["session"], body)
        assert refused.status_code == 403 and DOC not in refused.text, refused.text
        assert "may not read" in refused.json()["message"]
    for route, ask in (
        ("/v1/search", {"query": f"{DOC} plans", "session_id": "own", "top_k": 100}),
        ("/v1/context", {"message": f"{DOC} plans", "session_id": "own", "task_type": "deployment"}),
    ):
        answer = stack.call("POST", route, keys["session"], ask)
        assert answer.status_code == 200, answer.text
        seen = {h["layer"] for h in answer.json().get("hits", [])} | {
            s["layer"] for s in answer.json().get("sections", [])
        }
        assert not seen & {"semantic", "procedural"}, (route, seen)
    refused = stack.call(
        "POST", "/v1/context", keys["session"], {"message": "plans", "session_id": "own", "layers": ["semantic"]}
    )
    assert refused.status_code == 403
    shared = stack.call(
        "POST",
        "/v1/search",
        keys["session shared"],
        {"query": f"{DOC} plans", "session_id": "own", "layers": ["semantic"]},
    )
    assert shared.status_code == 200 and DOC in shared.text


def test_a_session_key_interaction_teaches_no_skill(stack: Running, world: dict[str, Any]) -> None:
    """Its /v1/skills:extract is 403; its /v1/interactions created or merged tenant-wide skills."""
    keys = world["keys"]
    before = stack.call("GET", "/v1/skills", keys["tenant"]).json()["total"]
    for kind in ("session", "session shared"):
        r = stack.call(
            "POST",
            "/v1/interactions",
            keys[kind],
            {
                "session_id": "own",
                "user": "deploy the billing service",
                "agent": "done",
                "task_type": "deployment",
                "success": True,
                "trace": ["kubectl apply -f billing.yaml", "kubectl rollout status deploy/billing"],
            },
        )
        assert r.status_code == 201 and r.json()["skill_job"] is None, r.text
        assert "may not write skills" in r.json()["learning"]
    assert stack.call("GET", "/v1/skills", keys["tenant"]).json()["total"] == before


def test_read_routes_and_read_only_keys_keep_no_idempotent_answer(stack: Running, world: dict[str, Any]) -> None:
    keys = world["keys"]
    for key, path, body in (
        (keys["tenant"], "/v1/search", {"query": "plans"}),
        (keys["tenant"], "/v1/context", {"message": "plans", "session_id": "own"}),
        (keys["read-only"], "/v1/search", {"query": "plans"}),
    ):
        idem = {"Idempotency-Key": f"read-{uuid.uuid4().hex}"}
        answers = [send(stack, "POST", path, key, body, **idem) for _ in range(2)]
        assert [a.status_code for a in answers] == [200, 200]
        assert all("idempotent-replayed" not in a.headers for a in answers), path
    idem = {"Idempotency-Key": "write-1"}
    first = send(stack, "POST", "/v1/documents", keys["tenant"], {"doc_id": "idem", "text": "# i\n\nj"}, **idem)
    assert first.status_code == 201
    for kind in ("read-only", "session", "tenant unshared"):
        other = send(stack, "POST", "/v1/documents", keys[kind], {"doc_id": "idem", "text": "# i\n\nj"}, **idem)
        assert other.status_code == 403 and "idempotent-replayed" not in other.headers, (kind, other.text)


# -- a 500 leaves no word of the request in the logs ---------------------------------------------


def _grep(roots: list[Path], needle: str) -> list[Path]:
    return [
        p
        for root in roots
        if root.exists()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and needle.encode() in p.read_bytes()
    ]


def test_no_request_content_in_the_logs_after_a_500(stack: Running) -> None:
    """A kept answer whose row is damaged makes the Idempotent middleware fail unexpectedly
    (``int()`` of a status that is no number): a real 500 path. The request carries a secret
    in its body, query, path and Idempotency-Key; the Serve logs must show the failure (our
    500 line) and not the secret."""
    from strata.store.layout import open_store
    from strata.store.records import Record
    from strata_cli.stack import Stack

    secret = "Lynx-Quarry-" + uuid.uuid4().hex[:10]
    key = stack.new_key("create", "t-500")
    recorded = Stack.recorded(stack.data_dir, say=lambda _: None)
    assert recorded is not None
    store, names = open_store(recorded.settings)
    answers = IdempotencyStore(store, names.state, ttl_s=3600)
    row = answers._pk("t-500", secret, 0)
    store.upsert(
        names.state,
        [
            Record(
                pk=row,
                tenant="t-500",
                session="idempotency",
                kind="idem",
                ts_ms=0,
                text="",
                payload={EXPIRES: 2**62, "fingerprint": "f", "status": "damaged", "chunks": 1, "headers": {}},
            )
        ],
    )
    failed = send(
        stack,
        "POST",
        f"/v1/documents?wait=true&note={secret}",
        key,
        {"doc_id": "d500", "text": f"# Secret\n\n{secret}"},
        **{"Idempotency-Key": secret},
    )
    assert failed.status_code == 500 and failed.json()["error"] == "InternalError", failed.text
    assert secret not in failed.text

    ray_dirs = {
        stack.ray_dir,
        Path(getattr(recorded, "ray_temp_dir", "/nonexistent")),
    }  # where `strata up` puts Ray's
    roots = [*(d / "session_latest" / "logs" for d in ray_dirs), stack.data_dir]
    deadline = time.monotonic() + 20
    while not _grep(roots, "500 on POST /v1/documents") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _grep(roots, "500 on POST /v1/documents"), "the Serve log of the 500 was not found"
    assert _grep(roots, "builtins.ValueError at idempotency.py")
    assert _grep(roots, secret) == []
