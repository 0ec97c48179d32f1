"""API keys end to end: `strata keys` against the stack `strata up` starts, then HTTP with those keys."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata.keys import hash_key
from tests.conftest import free_port
from tests.e2e.running import STRATA, Running, started

CONFIGURED_ADMIN = "sk-strata-configured-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with started(tmp_path_factory, "keys", STRATA_AUTH__ADMIN_KEY=CONFIGURED_ADMIN) as running:
        yield running


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


def test_revoked_key_fails_on_the_very_next_request(stack: Running) -> None:
    key = stack.new_key("create", "t4")
    assert stack.call("GET", "/v1/documents", key).status_code == 200
    revoke = stack.cli("keys", "revoke", hash_key(key)[:12])
    assert revoke.returncode == 0, revoke.stderr
    refused = stack.call("GET", "/v1/documents", key)
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
    assert stack.call("POST", "/v1/sessions/s1/turns", key, turn("The quartz lantern is in the attic.")).status_code == 201
    assert stack.call("DELETE", "/v1/admin/tenants/t-gone", key).status_code == 403  # a tenant key cannot
    gone = stack.call("DELETE", "/v1/admin/tenants/t-gone", CONFIGURED_ADMIN)
    assert gone.status_code == 200, gone.text
    assert gone.json()["keys_revoked"] == [hash_key(key)[:12]] and gone.json()["removed"]["episodic"] >= 1
    assert stack.call("POST", "/v1/search", key, {"query": "quartz lantern"}).status_code == 401
    fresh = stack.new_key("create", "t-gone")  # the tenant id may be used again, and it is empty
    hits = stack.call("POST", "/v1/search", fresh, {"query": "quartz lantern attic"}).json()["hits"]
    assert all("quartz" not in h["text"] for h in hits)
    system = stack.call("DELETE", "/v1/admin/tenants/system", CONFIGURED_ADMIN)
    assert system.status_code == 422 and "system" in system.json()["message"]
    audit = stack.call("GET", "/v1/audit", fresh).json()["entries"]
    assert [e["op"] for e in audit][:2] == ["record_turns", "forget_tenant"] and audit[1]["key_id"] == "admin"
