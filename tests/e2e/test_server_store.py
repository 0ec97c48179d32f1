"""The stack on a Milvus server, as an operator starts it (``strata up --milvus-uri URI
--milvus-token-file F``): a server's reads are not read-your-writes unless asked, and each
rule of :mod:`strata.store.milvus` is checked here where a user would see it break.

- a key made through ``POST /v1/admin/keys`` works on its first request (before the rule,
  401 five times out of five), and a revoked key is refused on the next;
- an idempotent retry is answered once;
- a forgotten tenant is gone by every path;
- a tenant is loaded whole right after its writes, by a stack started anew.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from strata.config import load_settings
from strata.store.layout import open_store
from tests.conftest import MilvusStandalone
from tests.e2e.running import Running, started

ADMIN = "sk-strata-configured-" + uuid.uuid4().hex
PREFIX = "e2e" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, milvus_server: MilvusStandalone) -> Iterator[Running]:
    token = tmp_path_factory.mktemp("secrets") / "milvus-token"
    token.write_text(milvus_server.token)
    token.chmod(0o600)
    with started(tmp_path_factory, "server-store", STRATA_AUTH__ADMIN_KEY=ADMIN,
                 STRATA_MILVUS__COLLECTION_PREFIX=PREFIX,
                 up_args=("--milvus-uri", milvus_server.uri, "--milvus-token-file", str(token))) as running:
        yield running


def turn(text: str) -> dict[str, str]:
    return {"user": text}


def test_the_stack_stores_in_the_server_and_starts_no_milvus_lite(
    stack: Running, milvus_server: MilvusStandalone
) -> None:
    assert not (stack.data_dir / "milvus").exists() and not (stack.data_dir / "milvus.pid").exists()
    assert stack.post("/v1/sessions/s0/turns", turn("The heron nests by the weir.")).status_code == 201
    settings = load_settings(None, milvus={"uri": milvus_server.uri, "token": milvus_server.token,
                                           "collection_prefix": PREFIX})
    store, names = open_store(settings)
    rows = store.scan(names.episodic, tenant="demo", session="s0", with_vectors=False)
    assert any("heron" in r.text for r in rows), rows


def test_a_key_made_over_http_works_at_once_and_a_revoked_one_is_refused_at_once(stack: Running) -> None:
    for n in range(5):
        made = stack.call("POST", "/v1/admin/keys", ADMIN, {"tenant": f"srv-k{n}"})
        assert made.status_code == 201, made.text
        first = stack.call("GET", "/v1/documents", made.json()["key"])
        assert first.status_code == 200, f"try {n}: {first.status_code} {first.text}"
        revoked = stack.call("DELETE", f"/v1/admin/keys/{made.json()['key_id']}", ADMIN)
        assert revoked.status_code == 200
        assert stack.call("GET", "/v1/documents", made.json()["key"]).status_code == 401


def test_an_idempotent_retry_is_answered_once(stack: Running) -> None:
    key = stack.new_key("create", "srv-idem")
    headers = {"Idempotency-Key": "srv-" + uuid.uuid4().hex}
    first = stack.post("/v1/sessions/s1/turns", turn("The kettle is on the stove."), key=key, headers=headers)
    again = stack.post("/v1/sessions/s1/turns", turn("The kettle is on the stove."), key=key, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers.get("idempotent-replayed") == "true" and again.json() == first.json()
    turns = stack.call("GET", "/v1/sessions/s1/turns", key).json()["turns"]
    assert [t["user"] for t in turns].count("The kettle is on the stove.") == 1, turns


def test_a_forgotten_tenant_is_gone_by_every_path(stack: Running, milvus_server: MilvusStandalone) -> None:
    key = stack.new_key("create", "srv-gone")
    secret = "Marmalade-Osprey"
    assert stack.post("/v1/sessions/s1/turns", turn(f"The code word is {secret}."), key=key).status_code == 201
    assert stack.post("/v1/documents", {"text": f"Field notes: {secret} was seen at dawn.", "doc_id": "notes"},
                      key=key).status_code == 201
    gone = stack.call("DELETE", "/v1/admin/tenants/srv-gone", ADMIN)
    assert gone.status_code == 200, gone.text
    fresh = stack.new_key("create", "srv-gone")
    for path, body in (("/v1/search", {"query": secret}), ("/v1/context", {"message": secret, "session_id": "s1"})):
        answer = stack.call("POST", path, fresh, body)
        assert answer.status_code == 200 and secret not in answer.text, answer.text
    assert stack.call("GET", "/v1/documents", fresh).json()["documents"] == []
    settings = load_settings(None, milvus={"uri": milvus_server.uri, "token": milvus_server.token,
                                           "collection_prefix": PREFIX})
    store, names = open_store(settings)
    for collection in (names.episodic, names.semantic, names.procedural, names.state):
        rows = store.scan(collection, tenant="srv-gone", with_vectors=False)
        assert all(secret not in r.text and secret not in str(r.payload) for r in rows), collection


def test_a_tenant_is_loaded_whole_by_a_stack_started_anew(stack: Running) -> None:
    key = stack.new_key("create", "srv-cold")
    written = [f"Cold fact number {n}." for n in range(12)]
    versions = []
    for text in written:
        answer = stack.post("/v1/sessions/s1/turns", turn(text), key=key)
        assert answer.status_code == 201
        versions.append(answer.json()["versions"]["episodic"])
    down = stack.cli("down")
    assert down.returncode == 0, down.stdout + down.stderr
    up = stack.cli("up", *stack.up_args)
    assert up.returncode == 0, up.stdout + up.stderr
    turns = stack.call("GET", "/v1/sessions/s1/turns", key).json()["turns"]
    assert [t["user"] for t in turns if t["user"] in written] == written
    after = stack.post("/v1/sessions/s1/turns", turn("One more, after the restart."), key=key)
    assert after.status_code == 201 and after.json()["versions"]["episodic"] > max(versions)
