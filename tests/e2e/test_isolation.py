"""Tenant B tries to reach tenant A by every route, with A's ids and with hostile
ids: every attempt is a 4xx or B's own data, and A's content never appears."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.e2e.running import Running

#: One request of tenant B: method, path, and httpx's keyword arguments.
Attempt = tuple[str, str, dict[str, Any]]

ALPHA = "Alpha-Secret-7731"  # only tenant A writes it; tenant B searches for it
HIDDEN = "Quokka-Ledger-5512"  # written by A next to ALPHA, never sent by B: any sight of it is a leak

HOSTILE_IDS = [
    'plans" or 1==1',
    "plans\\\\x",
    "%",
    "%25",
    "..%2F..%2Fetc%2Fpasswd",
    "../../etc/passwd",
    "pl\u0430ns",  # a Cyrillic a (U+0430) that looks like plans
    "\uff50\uff4c\uff41\uff4e\uff53",  # "plans" in full-width letters
    "x" * 300,
    "'; drop collection strata_state; --",
    "*",
    " plans",
    "plans\u0000",
    "tenant == \"demo\"",
]


@pytest.fixture(scope="module")
def stack(agents_stack: Running) -> Running:
    return agents_stack  # the session's default stack (tests/e2e/conftest.py): one start fewer


class Probe:
    """Tenant B's requests; counts cases and records every leak or 5xx."""

    def __init__(self, stack: Running, key: str) -> None:
        self.http = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        self.cases = 0
        self.problems: list[str] = []

    def send(self, method: str, path: str, *, expect_4xx: bool, **kw: Any) -> httpx.Response:
        self.cases += 1
        r = self.http.request(method, path, **kw)
        where = f"{method} {path[:80]} {str(kw)[:80]}"
        if r.status_code >= 500:
            self.problems.append(f"{where}: {r.status_code} {r.text[:200]}")
        elif expect_4xx and not 400 <= r.status_code < 500:
            self.problems.append(f"{where}: expected 4xx, got {r.status_code}")
        sent = f"{path} {kw}".lower()
        # An error may echo B's own words back to B (ALPHA in B's query); never A's data.
        if HIDDEN.lower() in r.text.lower() or (ALPHA.lower() in r.text.lower() and ALPHA.lower() not in sent):
            self.problems.append(f"{where}: LEAK of tenant A's content")
        return r


def test_no_route_crosses_tenants(stack: Running) -> None:
    a = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.key}"}, timeout=60)
    created = stack.cli("keys", "create", "bob")
    assert created.returncode == 0, created.stdout + created.stderr
    b = Probe(stack, created.stdout.strip().splitlines()[-1])

    # Tenant A writes under ids tenant B will also use, and under ids only A has.
    vault = {"user": f"My vault code is {ALPHA}, ledger {HIDDEN}."}
    assert a.post("/v1/sessions/shared/turns", json=vault).status_code == 201
    here_too = {"user": f"{ALPHA} lives here too, with {HIDDEN}."}
    assert a.post("/v1/sessions/a-only/turns", json=here_too).status_code == 201
    in_mind = {"items": [{"role": "user", "content": f"Keep {ALPHA} and {HIDDEN} in mind"}]}
    assert a.post("/v1/sessions/shared/working/items", json=in_mind).status_code == 200
    for doc_id in ("plans", "a-only-doc"):
        text = f"# Plans\n\n{ALPHA} Industries uses Kafka for billing; ledger {HIDDEN}."
        r = a.post("/v1/documents", json={"doc_id": doc_id, "title": f"{ALPHA} plans", "text": text})
        assert r.status_code == 201, r.text
    skill = a.post(
        "/v1/skills:extract", json={"task": f"Rotate the {ALPHA} keys", "trace": ["vault rotate"]}
    ).json()
    job = a.post("/v1/interactions", json={"session_id": "a-only", "user": f"deploy {ALPHA}", "agent": "done",
                                           "task_type": "deployment", "success": True,
                                           "trace": ["make deploy"]}).json()["skill_job"]
    # Tenant B has a session and a document of the same names.
    own = b.send("POST", "/v1/sessions/shared/turns", expect_4xx=False, json={"user": "Bob's own note."})
    assert own.status_code == 201
    assert b.send("POST", "/v1/documents", expect_4xx=False,
                  json={"doc_id": "plans", "text": "# Bob\n\nBob's plans."}).status_code == 201

    # Reading A's ids.
    for method, path in [
        ("GET", "/v1/documents/a-only-doc"),
        ("GET", f"/v1/skills/{skill['skill_id']}"),
        ("GET", f"/v1/skills/{skill['skill_id']}/history"),
        ("GET", f"/v1/skill-jobs/{job['job_id']}"),
        ("GET", "/v1/entities?name=" + quote(f"{ALPHA} Industries")),
    ]:
        b.send(method, path, expect_4xx=True)
    # Same-named ids are B's own, never A's.
    assert "Bob" in b.send("GET", "/v1/documents/plans?include_text=true", expect_4xx=False).text
    b.send("GET", "/v1/sessions/shared/working", expect_4xx=False)
    b.send("GET", "/v1/sessions/a-only/working", expect_4xx=False)  # empty for B
    # Searching and building context, every layer and path, with A's ids as filters.
    for body in (
        {"query": ALPHA, "top_k": 100},
        {"query": f"vault code {ALPHA}", "layers": ["episodic"], "session_id": "a-only"},
        {"query": ALPHA, "layers": ["semantic"], "doc_ids": ["a-only-doc", "plans"], "weights": {"lexical": 1}},
        {"query": ALPHA, "layers": ["semantic"], "weights": {"graph": 1}},
        {"query": ALPHA, "layers": ["procedural"]},
        {"query": ALPHA, "layers": ["working"], "session_id": "shared"},
    ):
        b.send("POST", "/v1/search", expect_4xx=False, json=body)
    for task_type in ("general", "planning", "deployment"):
        b.send("POST", "/v1/context", expect_4xx=False,
               json={"message": f"what is {ALPHA}?", "session_id": "shared", "task_type": task_type})
    for path in ("/v1/documents", "/v1/skills", "/v1/skills?task=" + quote(ALPHA), "/v1/audit"):
        b.send("GET", path, expect_4xx=False)
    # Changing and deleting A's ids.
    sid = skill["skill_id"]
    changes: list[Attempt] = [
        ("DELETE", "/v1/documents/a-only-doc", {}),
        ("DELETE", "/v1/sessions/a-only", {}),
        ("DELETE", f"/v1/skills/{sid}", {}),
        ("PATCH", f"/v1/skills/{sid}", {"json": {"description": "pwned"}, "headers": {"If-Match": '"1"'}}),
        ("POST", f"/v1/skills/{sid}/outcomes", {"json": {"success": False}}),
        ("DELETE", "/v1/admin/tenants/demo", {}),
        ("GET", "/v1/admin/keys", {}),
    ]
    for method, path, kw in changes:
        b.send(method, path, expect_4xx=True, **kw)
    # Hostile ids in every id position.
    for hostile in HOSTILE_IDS:
        raw = quote(hostile, safe="")
        attempts: list[Attempt] = [
            ("GET", f"/v1/documents/{raw}", {}),
            ("DELETE", f"/v1/documents/{raw}", {}),
            ("GET", f"/v1/skills/{raw}", {}),
            ("POST", f"/v1/skills/{raw}/outcomes", {"json": {"success": True}}),
            ("GET", f"/v1/sessions/{raw}/working", {}),
            ("POST", f"/v1/sessions/{raw}/turns", {"json": {"user": "x"}}),
            ("DELETE", f"/v1/sessions/{raw}", {}),
            ("GET", f"/v1/skill-jobs/{raw}", {}),
            ("POST", "/v1/search", {"json": {"query": "x", "session_id": hostile}}),
            ("POST", "/v1/search", {"json": {"query": "x", "doc_ids": [hostile]}}),
            ("POST", "/v1/context", {"json": {"message": "x", "session_id": hostile}}),
            ("POST", "/v1/documents", {"json": {"doc_id": hostile, "text": "x"}}),
            ("GET", f"/v1/documents?after={raw}", {}),
        ]
        for method, path, kw in attempts:
            b.send(method, path, expect_4xx=True, **kw)
    # Path traversal that an HTTP client would normalise: sent as raw bytes.
    for raw_path in ("/v1/documents/../sessions/a-only/working", "/v1/documents/%2e%2e%2fsessions"):
        b.cases += 1
        r = b.http.send(b.http.build_request("GET", httpx.URL(stack.url + raw_path)))
        if r.status_code >= 500 or ALPHA.lower() in r.text.lower() or HIDDEN.lower() in r.text.lower():
            b.problems.append(f"raw {raw_path}: {r.status_code}")

    assert b.problems == [], "\n".join(b.problems)
    # Nothing B did reached A: A's memory is whole.
    assert a.get("/v1/documents/a-only-doc").status_code == 200
    assert a.get(f"/v1/skills/{sid}").json()["description"] != "pwned"
    assert ALPHA in a.post("/v1/search", json={"query": ALPHA, "layers": ["episodic"], "session_id": "a-only"}).text
    print(f"isolation: {b.cases} cross-tenant cases, 0 leaks, 0 server errors")
    assert b.cases >= 200
