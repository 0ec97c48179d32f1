"""Export and restore between the stores (issue 45): a tenant written to a stack on milvus-lite
is exported with ``strata export``, that stack stopped, and the file restored with ``strata
restore`` into a stack on a Milvus server (the session's, ``milvus_server``); there the same
searches return the same items, the skill has its history and version, and the tenant exported
again is the same records.

The two stacks run one after the other, never together (two stacks on two cores are slow for
both)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MilvusStandalone
from tests.e2e.running import Running, started
from tests.e2e.test_export import DOCUMENT, NOTE, QUERIES, SESSION, SKILL_TASK, TRACE, TURNS

ADMIN = "sk-strata-configured-" + uuid.uuid4().hex
TENANT = "moves"


def _key(stack: Running) -> str:
    made = stack.call("POST", "/v1/admin/keys", ADMIN, {"tenant": TENANT})
    assert made.status_code == 201, made.text
    key: str = made.json()["key"]
    return key


def _searches(stack: Running, key: str) -> dict[str, list[tuple[str, str]]]:
    found = {}
    for query in QUERIES:
        answer = stack.call("POST", "/v1/search", key, {"query": query, "top_k": 5})
        assert answer.status_code == 200, answer.text
        found[query] = [(hit["layer"], hit["text"]) for hit in answer.json()["hits"]]
    return found


def _records(stack: Running, key: str) -> list[dict[str, Any]]:
    """The tenant's export as records, without the times a restore makes anew (a document's
    and a working item's indexing time)."""
    answer = stack.call("GET", "/v1/export", key)
    assert answer.status_code == 200, answer.text
    lines = [json.loads(line) for line in answer.text.splitlines()[1:-1]]
    return [{k: v for k, v in r.items() if k not in ("created_at", "updated_at")} for r in lines
            if r["kind"] != "summary"]


@pytest.mark.timeout(900)
def test_a_tenant_moves_from_milvus_lite_to_a_milvus_server(
    tmp_path_factory: pytest.TempPathFactory, milvus_server: MilvusStandalone, tmp_path: Path
) -> None:
    out = tmp_path / "moves.jsonl"
    with started(tmp_path_factory, "export-lite", STRATA_AUTH__ADMIN_KEY=ADMIN) as lite:
        key = _key(lite)
        assert lite.call("POST", f"/v1/sessions/{SESSION}/turns/batch", key, {"turns": TURNS}).status_code == 201
        assert lite.call("POST", "/v1/documents", key, DOCUMENT).status_code == 201
        assert lite.call("POST", f"/v1/sessions/{SESSION}/working/items", key, {"items": [NOTE]}).status_code == 200
        skill = lite.call("POST", "/v1/skills:extract", key, {"task": SKILL_TASK, "trace": TRACE})
        assert skill.status_code == 201, skill.text
        skill_id = skill.json()["skill_id"]
        for success in (True, False):
            assert lite.call("POST", f"/v1/skills/{skill_id}/outcomes", key, {"success": success}).status_code == 200
        searched = _searches(lite, key)
        assert all(searched.values()), searched  # each query finds something to compare
        records = _records(lite, key)
        skill_then = lite.call("GET", f"/v1/skills/{skill_id}", key).json()
        exported = lite.cli("export", TENANT, "--out", str(out))
        assert exported.returncode == 0, exported.stdout + exported.stderr

    token = tmp_path_factory.mktemp("secrets") / "milvus-token"
    token.write_text(milvus_server.token)
    token.chmod(0o600)
    with started(tmp_path_factory, "export-server", STRATA_AUTH__ADMIN_KEY=ADMIN,
                 STRATA_MILVUS__COLLECTION_PREFIX="exp" + uuid.uuid4().hex[:8],
                 up_args=("--milvus-uri", milvus_server.uri, "--milvus-token-file", str(token))) as server:
        restored = server.cli("restore", str(out))
        assert restored.returncode == 0, restored.stdout + restored.stderr
        assert "written 1 document, 1 skill, 3 turn, 1 working_item" in restored.stdout, restored.stdout
        key = _key(server)
        assert _searches(server, key) == searched
        assert server.call("GET", f"/v1/skills/{skill_id}", key).json() == skill_then
        assert _records(server, key) == records
