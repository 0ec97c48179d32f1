"""Export and restore (issue 45) on the shared stack: a tenant's turns, a document, a skill with
its history and working memory go out through ``GET /v1/export`` and ``strata export``, come
back into a new tenant with ``strata restore`` (twice: the second run writes nothing), and the
same searches return the same items there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e.running import Running

SOURCE, TARGET = "export-src", "export-dst"
SESSION = "trip"
TURNS: list[dict[str, Any]] = [
    {"turn_id": "t-001", "timestamp": "2026-02-01T09:00:00Z", "speaker": "Ana",
     "user": "I am flying to Lisbon on the 14th for the Kestrel-Quay conference.", "agent": "Noted: Lisbon, the 14th."},
    {"turn_id": "t-002", "timestamp": "2026-02-01T09:01:00Z", "metadata": {"channel": "chat"},
     "user": "Book a hotel near Cais do Sodre, under 180 euros a night.", "agent": "I will look near Cais do Sodre."},
    {"turn_id": "t-003", "timestamp": "2026-02-02T10:00:00Z",
     "user": "My colleague Bruno prefers window seats on the train to Porto.", "agent": "Window seats for Bruno."},
]
DOCUMENT: dict[str, Any] = {
    "doc_id": "travel-policy", "title": "Travel policy", "metadata": {"owner": "finance"},
    "text": "# Travel policy\n\nHotels are refunded up to 200 euros a night in Lisbon and Porto.\n\n"
            "## Trains\n\nBook second class; first class needs a manager's approval.",
}
NOTE = {"role": "system", "content": "Ana is planning the Kestrel-Quay trip; keep answers short.", "importance": 0.9}
TRACE = [
    {"command": "terraform plan -out plan.tfplan"},
    {"command": "terraform apply plan.tfplan", "error": "Error: state lock held by another run"},
    {"command": "terraform force-unlock 7f3c"},
    {"command": "terraform apply plan.tfplan", "output": "Apply complete! Resources: 3 added"},
]
SKILL_TASK = "Apply the Terraform plan for the network module"
QUERIES = ["terraform state lock", "hotel near Cais do Sodre", "Kestrel-Quay conference Lisbon", "train seats to Porto",
           "refund limit for hotels", "first class approval"]


def _search(stack: Running, key: str, query: str) -> list[tuple[str, str]]:
    answer = stack.call("POST", "/v1/search", key, {"query": query, "top_k": 5})
    assert answer.status_code == 200, answer.text
    return [(hit["layer"], hit["text"]) for hit in answer.json()["hits"]]


def _records(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines[1:]]


_IN_CLUSTER = """
import asyncio, sys
from strata.schema.export import dump_line
from strata_actors.client import InClusterClient

async def main() -> None:
    async with InClusterClient.for_running_stack(sys.argv[1], data_dir=sys.argv[2]) as client:
        with open(sys.argv[3], "w", encoding="utf-8") as out:
            async for item in client.export():
                out.write(dump_line(item))

asyncio.run(main())
"""


def _in_cluster(stack: Running, tenant: str, out: Path) -> list[dict[str, Any]]:
    """The records of ``InClusterClient.export()``, as JSON lines would carry them. In a process of
    its own, as an agent in the cluster runs it: joining the stack's Ray from the test process
    failed there once a suite had run Ray in it before ("Failed to connect to Ray cluster")."""
    done = subprocess.run(
        [sys.executable, "-c", _IN_CLUSTER, tenant, str(stack.data_dir), str(out)],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return _records(out.read_text(encoding="utf-8").splitlines())


def test_a_tenant_exported_and_restored_answers_the_same_searches(agents_stack: Running, tmp_path: Path) -> None:
    stack = agents_stack
    source = stack.new_key("create", SOURCE)
    assert stack.call("POST", f"/v1/sessions/{SESSION}/turns/batch", source, {"turns": TURNS}).status_code == 201
    assert stack.call("POST", "/v1/documents", source, DOCUMENT).status_code == 201
    assert stack.call("POST", f"/v1/sessions/{SESSION}/working/items", source, {"items": [NOTE]}).status_code == 200
    skill = stack.call("POST", "/v1/skills:extract", source, {"task": SKILL_TASK, "trace": TRACE})
    assert skill.status_code == 201, skill.text
    skill_id = skill.json()["skill_id"]
    for success in (True, False, True):
        used = stack.call("POST", f"/v1/skills/{skill_id}/outcomes", source, {"success": success})
        assert used.status_code == 200, used.text

    streamed = stack.call("GET", "/v1/export", source)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["content-type"].startswith("application/x-ndjson")
    lines = streamed.text.splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "strata-export" and header["version"] == 1 and header["tenant"] == SOURCE
    assert header["embedder"]["dim"] == 384 and header["vectors"] is False
    records = _records(lines)
    assert records[-1] == {"kind": "end", "records": len(records) - 1}
    turns = [r for r in records if r["kind"] == "turn"]
    assert [t["turn_id"] for t in turns] == [t["turn_id"] for t in TURNS]
    assert turns[0]["speaker"] == "Ana" and turns[1]["metadata"] == {"channel": "chat"}
    docs = [r for r in records if r["kind"] == "document"]
    assert docs == [{"kind": "document", **DOCUMENT, "created_at": docs[0]["created_at"],
                     "updated_at": docs[0]["updated_at"]}]
    skills = [r for r in records if r["kind"] == "skill"]
    assert [s["skill"]["skill_id"] for s in skills] == [skill_id]
    assert [v["change"] for v in skills[0]["history"]] == ["created", "outcome", "outcome", "outcome"]
    working = [r for r in records if r["kind"] == "working_item"]
    assert any(w["content"] == NOTE["content"] and "turn_id" not in w for w in working)
    assert {w.get("turn_id") for w in working} >= {"t-001", "t-002", "t-003"}  # the turns' copies
    assert "sk-strata-" not in streamed.text  # never a key

    # The in-cluster client's export() parses the same lines.
    assert _in_cluster(stack, SOURCE, tmp_path / "in-cluster.jsonl") == records

    out = tmp_path / "export.jsonl"
    done = stack.cli("export", SOURCE, "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _records(out.read_text().splitlines()) == records  # the CLI writes what the route streams

    restored = stack.cli("restore", str(out), "--tenant", TARGET)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "written 1 document, 1 skill, 3 turn, 1 working_item" in restored.stdout, restored.stdout
    again = stack.cli("restore", str(out), "--tenant", TARGET)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "written nothing" in again.stdout, again.stdout

    target = stack.new_key("create", TARGET)
    for query in QUERIES:
        assert _search(stack, target, query) == _search(stack, source, query), query
    for path in (f"/v1/skills/{skill_id}", f"/v1/skills/{skill_id}/history"):  # the same skill, history and version
        assert stack.call("GET", path, target).json() == stack.call("GET", path, source).json(), path
    back = stack.call("GET", "/v1/export", target).text.splitlines()
    kept = ("turn", "document", "working_item", "skill")

    def comparable(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k not in ("created_at", "updated_at")} for r in rs if r["kind"] in kept]

    assert comparable(_records(back)) == comparable(records)
    used = stack.call("POST", f"/v1/skills/{skill_id}/outcomes", target, {"success": True})
    assert used.status_code == 200 and used.json()["version"] == 5 and used.json()["uses"] == 4, used.text
    history = stack.call("GET", f"/v1/skills/{skill_id}/history", target).json()["versions"]
    assert [v["version"] for v in history] == [1, 2, 3, 4, 5]  # a change after the restore takes a new version
