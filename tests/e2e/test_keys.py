"""API keys end to end: `strata keys` against the stack `strata up` starts, then HTTP with those keys;
and no secret or raw PII in any log or file the stack writes."""

from __future__ import annotations

import os
import re
import secrets
import string
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from strata.access.keys import hash_key
from tests.conftest import free_port
from tests.e2e.running import SHARED_ADMIN_KEY, SHARED_BODY_LIMIT, STRATA, Running

#: The shared stack's auth.admin_key and serve.max_body_bytes (tests/e2e/conftest.py).
CONFIGURED_ADMIN = SHARED_ADMIN_KEY
BODY_LIMIT = SHARED_BODY_LIMIT


@pytest.fixture(scope="module")
def stack(agents_stack: Running) -> Running:
    return agents_stack  # the session's shared stack (tests/e2e/conftest.py): one start fewer


def turn(text: str) -> dict[str, str]:
    return {"user": text}


def test_created_key_works_for_its_tenant_and_sees_no_other_tenant(stack: Running) -> None:
    secret = stack.call("POST", "/v1/sessions/demo-private/turns", stack.key,
                        turn("The heliotrope ledger lives in the blue cabinet."))
    assert secret.status_code == 201, secret.text
    done = stack.cli("keys", "create", "t2", "--name", "second tenant")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    key = lines[-1]
    assert key.startswith("sk-strata-") and "t2" in lines[0] and hash_key(key)[:12] in lines[0]
    assert all(key not in line for line in lines[:-1])
    assert stack.call("POST", "/v1/sessions/t2-chat/turns", key, turn("t2 likes green tea.")).status_code == 201
    query = {"query": "heliotrope ledger blue cabinet", "top_k": 50}
    mine = stack.call("POST", "/v1/search", stack.key, query).json()["hits"]
    assert any("heliotrope" in h["text"] for h in mine)  # it is there, for demo
    theirs = stack.call("POST", "/v1/search", key, query)
    assert theirs.status_code == 200
    assert not any("heliotrope" in h["text"] for h in theirs.json()["hits"])
    working = stack.call("GET", "/v1/sessions/demo-private/working", key)
    assert working.status_code == 200 and working.json()["items"] == []


def test_list_shows_ids_never_secrets(stack: Running) -> None:
    t3 = stack.new_key("create", "t3", "--read-only", "--session", "s1")
    everything = stack.cli("keys", "list")
    assert everything.returncode == 0, everything.stderr
    only_t3 = stack.cli("keys", "list", "t3").stdout
    for key in (stack.key, t3):
        assert key not in everything.stdout and hash_key(key) not in everything.stdout
    assert hash_key(stack.key)[:12] in everything.stdout and hash_key(t3)[:12] in everything.stdout
    assert hash_key(stack.key)[:12] not in only_t3
    row = next(line for line in only_t3.splitlines() if hash_key(t3)[:12] in line)
    assert "t3" in row and "read-only, session s1" in row


def test_a_key_revoked_elsewhere_fails_within_a_second(stack: Running) -> None:
    key = stack.new_key("create", "t4")
    assert stack.call("GET", "/v1/documents", key).status_code == 200
    revoke = stack.cli("keys", "revoke", hash_key(key)[:12])  # the store, not the API: replicas learn it by TTL
    assert revoke.returncode == 0, revoke.stderr
    revoked_at = time.monotonic()
    while (refused := stack.call("GET", "/v1/documents", key)).status_code == 200:
        assert time.monotonic() - revoked_at < 1.5, "auth.key_cache_ttl_s is 1 s"
        time.sleep(0.05)
    assert refused.status_code == 401
    unknown = stack.call("GET", "/v1/documents", "sk-strata-never-issued")
    assert refused.json()["message"] == unknown.json()["message"]  # never says "revoked"
    row = next(line for line in stack.cli("keys", "list", "t4").stdout.splitlines() if hash_key(key)[:12] in line)
    assert not row.endswith("-")  # the REVOKED column has a date


def test_rotate_retires_the_old_key(stack: Running) -> None:
    old = stack.new_key("create", "t5", "--read-only")
    new = stack.new_key("rotate", hash_key(old)[:12])
    assert new != old
    assert stack.call("GET", "/v1/documents", old).status_code == 401
    assert stack.call("GET", "/v1/documents", new).status_code == 200
    # The scope came along: the rotated key is read-only too.
    assert stack.call("POST", "/v1/sessions/s/turns", new, turn("hi")).status_code == 403


def test_read_only_key_reads_and_may_not_write(stack: Running) -> None:
    key = stack.new_key("create", "t6", "--read-only")
    denied = stack.call("POST", "/v1/sessions/s1/turns", key, turn("write this"))
    assert denied.status_code == 403 and "read-only" in denied.json()["message"]
    assert stack.call("POST", "/v1/documents", key, {"text": "a doc", "doc_id": "d1"}).status_code == 403
    context = stack.call("POST", "/v1/context", key, {"message": "what do I like?", "session_id": "s1"})
    assert context.status_code == 200, context.text
    assert stack.call("POST", "/v1/search", key, {"query": "anything"}).status_code == 200
    assert stack.call("GET", "/v1/sessions/s1/working", key).status_code == 200


def test_session_key_touches_its_own_session_only(stack: Running) -> None:
    key = stack.new_key("create", "t7", "--session", "own")
    other = stack.call("POST", "/v1/sessions/other/turns", key, turn("not mine"))
    assert other.status_code == 403 and "'own'" in other.json()["message"]
    assert stack.call("POST", "/v1/sessions/own/turns", key, turn("mine")).status_code == 201
    assert stack.call("POST", "/v1/context", key, {"message": "x", "session_id": "own"}).status_code == 200
    assert stack.call("POST", "/v1/context", key, {"message": "x", "session_id": "other"}).status_code == 403
    assert stack.call("POST", "/v1/search", key, {"query": "x"}).status_code == 403  # tenant-wide
    assert stack.call("GET", "/v1/documents", key).status_code == 403


def test_admin_api_creates_lists_rotates_and_revokes(stack: Running) -> None:
    admin = stack.new_key("create-admin")
    assert stack.call("GET", "/v1/admin/keys", None).status_code == 401
    assert stack.call("GET", "/v1/admin/keys", "sk-strata-never-issued").status_code == 401
    tenant_key = stack.call("GET", "/v1/admin/keys", stack.key)
    assert tenant_key.status_code == 403 and "admin key" in tenant_key.json()["message"]
    assert stack.call("GET", "/v1/documents", admin).status_code == 403  # an admin key is no tenant key

    made = stack.call("POST", "/v1/admin/keys", admin, {"tenant": "t8", "read_only": True, "name": "viewer"})
    assert made.status_code == 201, made.text
    created = made.json()
    key = created["key"]
    assert created["key_id"] == hash_key(key)[:12] and created["read_only"] and created["tenant"] == "t8"
    assert stack.call("GET", "/v1/documents", key).status_code == 200
    assert stack.call("POST", "/v1/sessions/s/turns", key, turn("hi")).status_code == 403

    listed = stack.call("GET", "/v1/admin/keys", admin, params={"tenant": "t8"})
    assert listed.status_code == 200
    assert [k["key_id"] for k in listed.json()["keys"]] == [created["key_id"]]
    assert key not in listed.text and hash_key(key) not in listed.text and "key" not in listed.json()["keys"][0]

    rotated = stack.call("POST", f"/v1/admin/keys/{created['key_id']}:rotate", admin)
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()["key"]
    assert rotated.json()["name"] == "viewer" and rotated.json()["read_only"]
    assert stack.call("GET", "/v1/documents", key).status_code == 401
    assert stack.call("GET", "/v1/documents", new).status_code == 200

    revoked = stack.call("DELETE", f"/v1/admin/keys/{hash_key(new)[:12]}", CONFIGURED_ADMIN)  # auth.admin_key
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert stack.call("GET", "/v1/documents", new).status_code == 401
    assert stack.call("DELETE", "/v1/admin/keys/ffffffffffff", admin).status_code == 404
    assert stack.call("DELETE", "/v1/admin/keys/not-an-id", admin).status_code == 422


def test_the_system_tenant_is_reserved(stack: Running) -> None:
    admin_api = stack.call("POST", "/v1/admin/keys", CONFIGURED_ADMIN, {"tenant": "system"})
    assert admin_api.status_code == 422 and "reserved" in admin_api.json()["message"]
    cli = stack.cli("keys", "create", "system")
    assert cli.returncode == 2 and "reserved" in cli.stderr and "sk-strata-" not in cli.stdout


def test_keys_cli_without_a_running_store_says_so(stack: Running, tmp_path: Path) -> None:
    env = {**stack.env, "STRATA_MILVUS__PORT": str(free_port())}
    done = subprocess.run([*STRATA, "keys", "list", "--data-dir", str(tmp_path / "none")], check=False, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "strata up" in done.stderr and "Traceback" not in done.stderr


def test_admin_forgets_a_tenant_and_its_keys(stack: Running) -> None:
    key = stack.new_key("create", "t-gone")
    kept = {"Idempotency-Key": "quartz-1"}
    lantern = turn("The quartz lantern is in the attic.")
    assert stack.post("/v1/sessions/s1/turns", lantern, key=key, headers=kept).status_code == 201
    assert stack.call("DELETE", "/v1/admin/tenants/t-gone", key).status_code == 403  # a tenant key cannot
    gone = stack.call("DELETE", "/v1/admin/tenants/t-gone", CONFIGURED_ADMIN)
    assert gone.status_code == 200, gone.text
    assert gone.json()["keys_revoked"] == [hash_key(key)[:12]] and gone.json()["removed"]["episodic"] >= 1
    assert stack.call("POST", "/v1/search", key, {"query": "quartz lantern"}).status_code == 401
    fresh = stack.new_key("create", "t-gone")  # the tenant id may be used again, and it is empty
    hits = stack.call("POST", "/v1/search", fresh, {"query": "quartz lantern attic"}).json()["hits"]
    assert all("quartz" not in h["text"] for h in hits)
    # The answers kept for idempotent writes went with the tenant: the same request is applied anew.
    again = stack.post("/v1/sessions/s1/turns", turn("The quartz lantern is in the attic."), key=fresh, headers=kept)
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers, again.headers
    system = stack.call("DELETE", "/v1/admin/tenants/system", CONFIGURED_ADMIN)
    assert system.status_code == 422 and "system" in system.json()["message"]
    audit = stack.call("GET", "/v1/audit", fresh).json()["entries"]
    assert [e["op"] for e in audit][:2] == ["record_turns", "forget_tenant"] and audit[1]["key_id"] == "admin"


def test_a_body_over_serve_max_body_bytes_gets_413(stack: Running) -> None:
    big = {"text": "x" * BODY_LIMIT}
    declared = stack.post("/v1/documents", big)
    assert declared.status_code == 413, declared.text
    assert declared.json()["error"] == "BodyTooLarge" and declared.json()["max_body_bytes"] == BODY_LIMIT
    assert "1,048,576 bytes (1 MiB)" in declared.json()["message"]
    assert "serve.max_body_bytes" in declared.json()["message"]

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit is hit while the body arrives
        yield b'{"text": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    streamed = httpx.post(stack.url + "/v1/documents", content=chunked(), timeout=30,
                          headers={"Authorization": f"Bearer {stack.key}", "content-type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["error"] == "BodyTooLarge", streamed.text
    # Just under the limit, the body reaches validation (a bad doc_id, so nothing is indexed).
    under = stack.post("/v1/documents", {"doc_id": "not an id!", "text": "x" * (BODY_LIMIT - 100)})
    assert under.status_code == 422 and "doc_id" in under.json()["message"], under.text


def test_bodies_that_are_not_the_model_get_422(stack: Running) -> None:
    headers = {"Authorization": f"Bearer {stack.key}", "content-type": "application/json"}
    for body in (b"not json", b'[{"user": "hi"}]', b'"hi"', b"", b'{"user": "\xff"}', b'{"user": 3}'):
        bad = httpx.post(stack.url + "/v1/sessions/s1/turns", content=body, headers=headers, timeout=30)
        assert bad.status_code == 422 and bad.json()["error"] == "InvalidInput", (body, bad.text)
    missing = stack.call("GET", "/v1/nowhere", stack.key)
    assert missing.status_code == 404 and missing.json()["error"] == "NotFound"


# -- no secret or raw PII in the logs or the data dir ---------------------------------------------

#: Files of the data dir that hold a secret by design (0600, written by `strata up`), and the one
#: each may hold. Nothing else may: the stores keep keys as SHA-256 hashes and text redacted, so
#: milvus-lite's files are read like the logs.
BY_DESIGN = {
    "dev-api-key": "the development key",  # stack.key, handed to the user
    "pii-hash-key": "the PII hash key",  # the HMAC secret of the `hash` policy's pseudonyms
    "ray-auth-token": "the Ray auth token",  # Ray's token authentication for the embedded head
}
#: Secrets in the settings `strata up` records in DATA_DIR/stack.json (0600): `strata keys` and
#: `strata down` read them back (test_stack_json_is_owner_only).
STACK_JSON_KNOWN = ("the configured admin key", "the PII hash key")


def grep(roots: Iterable[Path], needles: Mapping[str, str]) -> tuple[list[tuple[str, Path]], dict[Path, int]]:
    """Each ``(needle name, file)`` where a needle occurs in a regular file under ``roots``, and the
    bytes read from each file. Symlinks are not followed (Ray's ``session_latest`` points into the tree)."""
    found: list[tuple[str, Path]] = []
    read: dict[Path, int] = {}
    for root in roots:
        for parent, _, names in os.walk(root):
            for path in (Path(parent) / name for name in names):
                if path.is_symlink() or not path.is_file():
                    continue
                blob = path.read_bytes()
                read[path] = len(blob)
                found += [(name, path) for name, value in needles.items() if value.encode() in blob]
    return found, read


def _pii_forms(raw: Mapping[str, str]) -> dict[str, str]:
    """Each raw value as written, and without its spaces and dashes."""
    return {f"raw {kind} ({form!r})": form for kind, value in raw.items()
            for form in {value, value.replace(" ", ""), re.sub(r"[ \-]", "", value)}}


def test_no_secret_or_raw_pii_in_the_logs_or_the_data_dir(stack: Running) -> None:
    token = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(24))
    raw = {
        "email": "jonas.becker@example.net",
        "card": "4111 1111 1111 1111",
        "phone": "+1 415-555-0134",
        "secret": "sk_live_" + token,
    }
    marker = "logmarker" + uuid.uuid4().hex[:12]  # plain text, sent in a header and a turn: the grep must see it
    pii = f"{marker} mail {raw['email']}, card {raw['card']}, call {raw['phone']}, key {raw['secret']}"

    # Keys: a tenant key, a read-only one, admin keys (CLI and API), one rotated, one revoked.
    tenant = stack.new_key("create", "t-logs", "--name", "logs")
    reader = stack.new_key("create", "t-logs", "--read-only")
    admin = stack.new_key("create-admin")
    made = stack.call("POST", "/v1/admin/keys", admin, {"tenant": "t-logs", "name": "to rotate"})
    assert made.status_code == 201, made.text
    rotated = stack.call("POST", f"/v1/admin/keys/{made.json()['key_id']}:rotate", CONFIGURED_ADMIN)
    assert rotated.status_code == 201, rotated.text
    revoked = stack.new_key("create", "t-logs")
    assert stack.call("DELETE", f"/v1/admin/keys/{hash_key(revoked)[:12]}", admin).status_code == 200
    never_issued = "sk-strata-" + secrets.token_urlsafe(24)
    keys = {"a tenant key": tenant, "a read-only key": reader, "an admin key": admin,
            "the configured admin key": CONFIGURED_ADMIN, "a key made by the admin API": made.json()["key"],
            "a rotated key": rotated.json()["key"], "a revoked key": revoked, "a key never issued": never_issued}

    # Successful calls, with PII in what they write and ask.
    turn = stack.post("/v1/sessions/logs-1/turns", {"user": pii, "agent": f"I will mail {raw['email']}"}, key=tenant,
                      headers={"X-Request-ID": marker})  # Serve logs the request id: the marker in its logs
    assert turn.status_code == 201 and set(turn.json()["redacted"]) == set(raw), turn.text
    batch = stack.call("POST", "/v1/sessions/logs-1/turns/batch", tenant, {"turns": [{"user": pii}, {"agent": pii}]})
    assert batch.status_code == 201, batch.text
    document = stack.call("POST", "/v1/documents", tenant, {"doc_id": "logs-doc", "text": f"# Contacts\n\n{pii}"})
    assert document.status_code == 201, document.text
    interaction = stack.call("POST", "/v1/interactions", tenant, {"session_id": "logs-2", "user": pii, "agent": "ok"})
    assert interaction.status_code == 201, interaction.text
    assert stack.call("POST", "/v1/search", reader, {"query": f"mail {raw['email']}"}).status_code == 200
    assert stack.call("POST", "/v1/context", reader, {"message": pii, "session_id": "logs-1"}).status_code == 200
    assert stack.call("GET", "/v1/admin/keys", admin, params={"tenant": "t-logs"}).status_code == 200
    # Refused ones: wrong, revoked and retired keys (401), a read-only write (403), bad bodies
    # carrying a key and PII (422), PII and a key in the URL, a body over the limit (413).
    for key in (never_issued, revoked, made.json()["key"], "not-even-a-key " + raw["secret"]):
        assert stack.call("POST", "/v1/sessions/logs-1/turns", key, {"user": pii}).status_code == 401
    assert stack.call("POST", "/v1/sessions/logs-1/turns", reader, {"user": pii}).status_code == 403
    invalid = [
        ("/v1/sessions/logs-1/turns", {"user": pii, "api_key": tenant}),  # an unknown field
        ("/v1/sessions/logs-1/turns", {"user": pii, "timestamp": f"when {raw['email']} says", "speaker": tenant}),
        ("/v1/context", {"message": pii, "session_id": f"{raw['email']} {tenant}"}),
        ("/v1/admin/keys", {"tenant": raw["email"], "name": tenant}),
    ]
    for path, body in invalid:
        answer = stack.call("POST", path, admin if "admin" in path else tenant, body)
        assert answer.status_code == 422, (path, answer.text)
    truncated = httpx.post(stack.url + "/v1/search", content=f'{{"query": "{pii} {tenant}'.encode(), timeout=30,
                           headers={"Authorization": f"Bearer {tenant}", "content-type": "application/json"})
    assert truncated.status_code == 422, truncated.text
    in_url = stack.call("GET", f"/v1/sessions/{raw['email']}/working", tenant, params={"after": tenant})
    assert in_url.status_code == 422, in_url.text
    assert stack.call("GET", "/v1/documents", tenant, params={"after": raw["secret"] + tenant}).status_code == 200
    too_big = stack.call("POST", "/v1/documents", tenant, {"text": (pii + " " + tenant + " ") * (BODY_LIMIT // 100)})
    assert too_big.status_code == 413, too_big.text

    ray_dir = stack.ray_dir
    by_design = {name: (stack.data_dir / name).read_text().strip() for name in BY_DESIGN}
    needles = {**keys, **{BY_DESIGN[name]: value for name, value in by_design.items()}, **_pii_forms(raw)}
    deadline = time.monotonic() + 15
    while True:  # until the marker's log lines are written
        markers, _ = grep([ray_dir / "session_latest" / "logs"], {"marker": marker})
        if any("serve" in path.parts for _, path in markers) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    found, read = grep([ray_dir, stack.data_dir], {**needles, "marker": marker})

    # The grep read what the stack wrote: Serve's logs show the marker (the request id), the
    # stores' files the marker written in plain text, and the logs are not empty.
    shown = {path for name, path in found if name == "marker"}
    assert any(ray_dir in path.parents and "serve" in path.parts for path in shown), "Serve's logs were not read"
    assert any(stack.data_dir / "milvus" in path.parents for path in shown), "the stores' files were not read"
    log_bytes = sum(n for path, n in read.items() if "logs" in path.parts)
    assert log_bytes > 100_000 and sum(1 for path in read if path.suffix in (".log", ".err", ".out")) > 20
    stack_json = stack.data_dir / "stack.json"
    leaks = sorted(f"{name} in {path}" for name, path in found if name != "marker"
                   and not (path.parent == stack.data_dir and by_design.get(path.name) == needles[name])
                   and not (path == stack_json and name in STACK_JSON_KNOWN))
    assert not leaks, "\n".join(leaks)


def test_stack_json_is_owner_only(stack: Running) -> None:
    """It records the settings, secrets included, like the key files beside it."""
    for name in ("stack.json", *BY_DESIGN):
        assert (stack.data_dir / name).stat().st_mode & 0o077 == 0, name


def test_metrics_are_for_the_admin_key_only_and_in_prometheus_text(stack: Running) -> None:
    """``GET /metrics`` (the LLM's counts, docs/llm.md): the admin key reads it; a tenant's key
    is refused, and no key at all is a 401. The shared stack has no LLM: the families are there,
    without samples."""
    answer = stack.call("GET", "/metrics", CONFIGURED_ADMIN)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    for family in ("strata_llm_calls_total", "strata_llm_results_total", "strata_llm_latency_seconds"):
        assert f"# TYPE {family} " in answer.text
    assert stack.call("GET", "/metrics", stack.key).status_code == 403
    assert stack.call("GET", "/metrics", None).status_code == 401
