"""The stack as a user starts it: `strata up`, then HTTP and the in-cluster client."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import stat
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from strata.errors import InvalidInput, NotFound, StoreUnavailable, Unauthorized, VersionConflict
from strata_serve.client import AsyncStrataClient, StrataClient
from tests.e2e.running import Running, started

DAY1 = datetime(2025, 6, 2, 9, 0, tzinfo=UTC)  # a Monday


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with started(tmp_path_factory, "stack") as running:
        yield running


def test_up_prints_a_private_dev_key_and_status_reports(stack: Running) -> None:
    key_file = stack.data_dir / "dev-api-key"
    assert key_file.read_text().strip() == stack.key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    status = stack.cli("status")
    assert status.returncode == 0 and "healthy" in status.stdout
    assert httpx.get(stack.url + "/healthz", timeout=10).json() == {"status": "ok"}  # no key: up or down only
    admin = {"Authorization": f"Bearer {stack.new_key('create-admin')}"}
    health = httpx.get(stack.url + "/healthz", headers=admin, timeout=10).json()
    assert health["status"] == "ok" and health["milvus"] == "ok"


def test_second_up_reuses_the_running_stack(stack: Running) -> None:
    started = time.monotonic()
    again = stack.cli("up")
    assert again.returncode == 0, again.stderr
    assert "already" in again.stdout
    assert again.stdout.strip().splitlines()[-1] == stack.key
    assert time.monotonic() - started < 60


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs a process listens on, from its sockets' inodes in /proc."""
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # it has exited (an HAProxy that a reload replaced)
        return set()
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address, port = fields[1].split(":")
                packed = bytes.fromhex(address)
                ip = ipaddress.ip_address(b"".join(packed[i:i + 4][::-1] for i in range(0, width // 2, 4)))
                found.add((str(ip), int(port, 16)))
    return found


def test_haproxy_serves_with_every_port_on_loopback_and_limits_each_client_address(stack: Running) -> None:
    """Serve's HAProxy (serve.haproxy, through strata-haproxy): its stats page and metrics,
    which Serve's template binds on every interface, listen on loopback; and it forwards each
    client's address, so one address's flood of bad keys leaves another's attempts alone."""
    def cmdline(proc: Path) -> str:
        try:
            return Path(proc, "cmdline").read_bytes().decode(errors="replace")
        except OSError:  # a process that exited while the list was read
            return ""

    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and str(stack.haproxy_dir) in cmdline(p)]
    assert pids, f"no HAProxy runs on {stack.haproxy_dir}"
    # Every socket any of them listens on (after a reload, the old HAProxy drains with none).
    ports = set().union(*(_listening(pid) for pid in pids))
    assert (("127.0.0.1", stack.port) in ports and len(ports) >= 3
            and all(ipaddress.ip_address(ip).is_loopback for ip, _ in ports)), ports

    def search(source: str, key: str) -> httpx.Response:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30) as client:
            return client.post(
                stack.url + "/v1/search", json={"query": "x"}, headers={"Authorization": f"Bearer {key}"}
            )

    def wrong_key(source: str, n: int) -> int:
        return search(source, f"sk-strata-wrong-{source}-{n}").status_code

    assert search("127.0.0.1", stack.key).status_code == 200  # the key HAProxy then knows as good
    # Until that address is refused: on a busy machine the allowance refills (2 a second) while
    # the flood is sent, so a fixed count of attempts need not end in a refusal.
    flood: list[int] = []
    for n in range(80):
        flood.append(wrong_key("127.0.0.2", n))
        if flood[-1] == 429:
            break
    assert 401 in flood and flood[-1] == 429, flood  # that address is limited ...
    assert wrong_key("127.0.0.1", 0) == 401  # ... and, the moment after, this one is not
    # Past 40 failures in 10 s (the API's burst and 10 s of its rate), HAProxy answers the
    # address itself; the good key, which the API answered as good before, still passes.
    door = None
    for n in range(100, 160):
        answer = search("127.0.0.2", f"sk-strata-wrong-{n}")
        if answer.status_code == 429 and "wrong API keys" in answer.json()["message"]:
            door = answer
            break
    assert door is not None and door.headers["retry-after"] == "10" and "x-strata-failed-auth" not in door.headers
    good = search("127.0.0.2", stack.key)
    assert good.status_code == 200 and "x-strata-good-key" not in good.headers
    assert wrong_key("127.0.0.1", 1) == 401


def test_context_answers_from_earlier_sessions(stack: Running) -> None:
    with StrataClient(stack.url, stack.key) as client:
        client.record_turns("monday", [
            {"user": "My daughter Lina starts violin lessons on Thursday.", "agent": "How exciting!",
             "timestamp": DAY1},
            {"user": "The deploy broke with HTTP 429 from the registry.", "timestamp": DAY1 + timedelta(hours=1)},
        ])
        client.record_turn("tuesday", "I bought new running shoes.", timestamp=DAY1 + timedelta(days=1))
        reference = DAY1 + timedelta(days=1, hours=5)
        context = client.build_context("When are Lina's violin lessons?", "tuesday", reference_time=reference,
                                       max_tokens=300)
        assert "violin" in context.context and context.token_count <= 300
        episodic = next(s for s in context.sections if s.layer == "episodic")
        assert episodic.items[0].session_id == "monday"
        assert context.messages and "running shoes" in context.messages[-1]["content"]
        found = client.search("what broke yesterday?", reference_time=reference, layers=["episodic"])
        assert found.time_range is not None and found.hits
        assert found.hits[0].session_id == "monday" and "HTTP 429" in found.hits[0].text


def test_a_message_about_an_event_is_found_by_the_time_it_spoke_of(stack: Running) -> None:
    # Told on Monday 1 April for Wednesday 10 April; asked about on Tuesday 16 April, after a
    # sentence that names another day: the question's time is the one it asks about.
    monday = datetime(2024, 4, 1, 9, tzinfo=UTC)
    with StrataClient(stack.url, stack.key) as client:
        client.record_turns("events-told", [
            {"user": "Tomorrow I'm going to a lecture at the Harbor Gallery with Tom.",
             "timestamp": monday - timedelta(days=20)},
            {"user": "Next Wednesday I'm going to a lecture at the City Library with Anna.", "timestamp": monday},
        ])
        client.record_turn("events-week", "The lecture hall at work was freezing today.",
                           timestamp=datetime(2024, 4, 10, 18, tzinfo=UTC))
        found = client.search("I'm so tired today. Where was the lecture I went to last Wednesday?",
                              reference_time=datetime(2024, 4, 16, 20, tzinfo=UTC), layers=["episodic"])
        assert found.time_range is not None
        assert found.time_range.start == datetime(2024, 4, 10, tzinfo=UTC)
        assert "City Library" in found.hits[0].text, [h.text for h in found.hits]
        told = found.hits[0].speaks_of
        assert told is not None and (told.start, told.end) == (datetime(2024, 4, 10, tzinfo=UTC),
                                                               datetime(2024, 4, 11, tzinfo=UTC))
        context = client.build_context("Where was the lecture I went to last Wednesday?", "events-week",
                                       reference_time=datetime(2024, 4, 16, 20, tzinfo=UTC), max_tokens=400)
        assert "(of 2024-04-10) user: Next Wednesday I'm going to a lecture at the City Library" in context.context


def test_a_chinese_turn_is_found_by_an_english_question_through_the_second_model(stack: Running) -> None:
    # MiniLM reads no Chinese: the shard embeds these turns with e5 as well (embedding.script_route)
    # and the query by both; no word of the question is in the turn.
    with StrataClient(stack.url, stack.key) as client:
        client.record_turns("zh-hobbies", [
            {"user": "晚饭吃的是牛肉面，很好吃"},
            {"user": "最近在学弹吉他，手指很疼"},
            {"user": "公司明天开会讨论预算"},
        ])
        found = client.search("Why do my fingers hurt so much lately?", layers=["episodic"])
        assert found.hits and found.hits[0].text == "user: 最近在学弹吉他，手指很疼", [h.text for h in found.hits]


def test_working_memory_etag_and_if_match(stack: Running) -> None:
    r = httpx.get(stack.url + "/v1/sessions/tuesday/working", headers={"Authorization": f"Bearer {stack.key}"})
    assert r.status_code == 200
    etag = r.headers["etag"]
    assert etag == f'"{r.json()["version"]}"'
    item = {"items": [{"role": "user", "content": "Remember this: my gate code is 2231."}]}
    ok = stack.post("/v1/sessions/tuesday/working/items", item, headers={"If-Match": etag})
    assert ok.status_code == 200 and ok.headers["etag"] != etag
    assert ok.json()["items"][-1]["importance"] == 1.0
    stale = stack.post("/v1/sessions/tuesday/working/items", item, headers={"If-Match": etag})
    assert stale.status_code == 409
    assert stale.json()["current_version"] == ok.json()["version"]
    assert "version" in stale.json()["message"]


@pytest.mark.parametrize(
    ("path", "body", "kw", "status", "phrase"),
    [
        ("/v1/sessions/s1/turns", {"user": "hi"}, {"key": "sk-strata-wrong"}, 401, "unknown API key"),
        ("/v1/sessions/bad%22id/turns", {"user": "hi"}, {}, 422, "session_id"),
        ("/v1/sessions/s1/turns", {"usr": "hi"}, {}, 422, "usr"),
        ("/v1/sessions/s1/turns", {}, {}, 422, "user or agent"),
        ("/v1/context", {"message": "hi", "session_id": "s1", "task_type": "astrology"}, {}, 422, "task_type"),
        ("/v1/context", {"message": "hi", "session_id": "s1", "max_tokens": 5}, {}, 422, "max_tokens"),
        ("/v1/search", {"query": "x", "time_range": {"start": "2025-02-01", "end": "2025-01-01"}}, {}, 422, "before"),
    ],
)
def test_bad_requests_get_a_clear_4xx(stack: Running, path: str, body: Any, kw: dict[str, Any], status: int,
                                      phrase: str) -> None:
    r = stack.post(path, body, **kw)
    assert r.status_code == status, r.text
    assert phrase in r.json()["message"]


def test_missing_key_and_malformed_json(stack: Running) -> None:
    r = httpx.post(stack.url + "/v1/search", json={"query": "x"})
    assert r.status_code == 401 and "Bearer" in r.json()["message"]
    r = httpx.post(stack.url + "/v1/sessions/s1/turns", content=b'{"user": ', timeout=10,
                   headers={"Authorization": f"Bearer {stack.key}", "content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["message"]


def test_clients_raise_typed_errors(stack: Running) -> None:
    with StrataClient(stack.url, "sk-strata-nope") as bad, pytest.raises(Unauthorized):
        bad.search("x")
    with StrataClient(stack.url, stack.key) as client:
        with pytest.raises(NotFound):
            client.forget_session("never-existed")
        with pytest.raises(VersionConflict) as info:
            client.add_working_items("tuesday", [{"role": "user", "content": "x"}], expected_version=0)
        assert info.value.details["current_version"] >= 1
        with pytest.raises(InvalidInput):
            client.build_context("hi", "s1", task_type="astrology")


async def test_async_client_has_the_same_methods(stack: Running) -> None:
    async with AsyncStrataClient(stack.url, stack.key) as client:
        recorded = await client.record_turn("async-session", "Async clients work too.")
        state = await client.get_working("async-session")
        assert state.version == recorded.versions["working"]
        health = await client.health()
        assert health.status == "ok"
    from strata_actors.client import InClusterClient

    def public(cls: type) -> set[str]:
        return {m for m in dir(cls) if not m.startswith("_")}

    assert public(StrataClient) - {"close"} == public(AsyncStrataClient) - {"aclose"}
    # The in-cluster client speaks the same API (health is the HTTP stack's own).
    # export_lines: the raw lines `strata export` writes; import_skill: `strata restore`'s (no route).
    in_cluster_only = {"for_running_stack", "sync", "llm_usage", "wait_for_summaries", "wait_for_passages",
                       "export_lines", "import_skill"}
    assert public(StrataClient) - {"close", "health"} == public(InClusterClient) - in_cluster_only - {"aclose", "close"}


def test_in_cluster_client_sees_http_writes(stack: Running) -> None:
    from strata_actors.client import InClusterClient

    client = InClusterClient.for_running_stack("demo", data_dir=str(stack.data_dir))
    found = client.sync.search("violin lessons", layers=["episodic"])
    assert found.hits and "violin" in found.hits[0].text
    written = client.sync.record_turn("from-cluster", "Written through an actor handle.")
    r = stack.post("/v1/search", {"query": "actor handle", "layers": ["episodic"]})
    assert any(h["session_id"] == "from-cluster" for h in r.json()["hits"])
    assert written.versions["episodic"] > 0


def test_forget_session_over_http(stack: Running) -> None:
    stack.post("/v1/sessions/to-forget/turns", {"user": "My passport number is in the blue folder."})
    r = httpx.delete(stack.url + "/v1/sessions/to-forget", headers={"Authorization": f"Bearer {stack.key}"})
    assert r.status_code == 200 and r.json()["removed"]["episodic"] == 1
    hits = stack.post("/v1/search", {"query": "passport blue folder", "top_k": 50}).json()["hits"]
    assert all(h["session_id"] != "to-forget" for h in hits)
    again = httpx.delete(stack.url + "/v1/sessions/to-forget", headers={"Authorization": f"Bearer {stack.key}"})
    assert again.status_code == 404


def test_documents_over_http(stack: Running) -> None:
    auth = {"Authorization": f"Bearer {stack.key}"}
    text = "# Cache notes\n\nThe session cache uses Redis 7. Redis depends on the `maxmemory` setting.\n"
    created = stack.post("/v1/documents", {"doc_id": "cache", "text": text, "title": "Cache notes"})
    assert created.status_code == 201, created.text
    assert created.headers["ETag"] == '"1"' and created.json()["status"] == "ready"
    stale = stack.post("/v1/documents", {"doc_id": "cache", "text": text + "More."}, headers={"If-Match": '"0"'})
    assert stale.status_code == 409 and stale.json()["current_version"] == 1
    hits = stack.post("/v1/search", {"query": "maxmemory", "layers": ["semantic"], "weights": {"lexical": 1}}).json()
    assert hits["hits"][0]["source"]["doc_id"] == "cache" and hits["hits"][0]["ranks"] == {"lexical": 1}
    got = httpx.get(stack.url + "/v1/documents/cache", params={"include_text": "true"}, headers=auth, timeout=10)
    assert got.status_code == 200 and got.json()["text"].strip() == text.strip()
    entity = httpx.get(stack.url + "/v1/entities", params={"name": "redis"}, headers=auth, timeout=10)
    assert entity.status_code == 200 and entity.json()["name"].lower() == "redis"
    assert httpx.get(stack.url + "/v1/documents", headers=auth, timeout=10).json()["total"] >= 1
    for bad, phrase in (({"text": "  "}, "blank"), ({"text": "x", "doc_id": "../x"}, "doc_id"), ({"txt": "x"}, "txt")):
        r = stack.post("/v1/documents", bad)
        assert r.status_code == 422 and phrase in r.json()["message"], r.text
    r = stack.post("/v1/search", {"query": "x", "weights": {"sparse": 1}})
    assert r.status_code == 422 and "weights" in r.json()["message"]
    assert httpx.get(stack.url + "/v1/documents/nope", headers=auth, timeout=10).status_code == 404
    deleted = httpx.delete(stack.url + "/v1/documents/cache", headers=auth, timeout=10)
    assert deleted.status_code == 200 and deleted.json()["removed"] > 0
    hits = stack.post("/v1/search", {"query": "Redis maxmemory", "layers": ["semantic"], "top_k": 50}).json()
    assert all(h["source"]["doc_id"] != "cache" for h in hits["hits"])


def test_import_indexes_a_folder_with_progress(stack: Running, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "ops").mkdir(parents=True)
    (docs / "ops" / "deploy.md").write_text(
        "# Deploying\n\nRun `make release` and watch the canary for ERR_CANARY_7.\n"
    )
    (docs / "notes.txt").write_text("Plain notes: the VPN endpoint is vpn.example.internal.\n")
    (docs / "image.png").write_bytes(b"\x89PNG")
    result = stack.cli("import", str(docs))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "indexed 2 document(s)" in result.stdout
    with StrataClient(stack.url, stack.key) as client:
        doc = client.get_document("ops-deploy.md")
        assert doc.title == "Deploying" and doc.metadata["path"].endswith("ops/deploy.md")
        found = client.search("ERR_CANARY_7", layers=["semantic"], top_k=1)
        assert found.hits[0].source is not None and found.hits[0].source.doc_id == "ops-deploy.md"
    missing = stack.cli("import", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_skills_over_http(stack: Running) -> None:
    auth = {"Authorization": f"Bearer {stack.key}"}
    trace = [
        {"command": "terraform plan -out plan.tfplan"},
        {"command": "terraform apply plan.tfplan", "error": "Error: state lock held by another run"},
        {"command": "terraform force-unlock 7f3c"},
        {"command": "terraform apply plan.tfplan", "output": "Apply complete! Resources: 3 added"},
    ]
    task = "Apply the Terraform plan for the network module"
    created = stack.post("/v1/skills:extract", {"task": task, "trace": trace, "outcome": "network applied"})
    assert created.status_code == 201, created.text
    skill = created.json()
    assert created.headers["etag"] == '"1"' and skill["merged"] is False and skill["steps"]
    assert any("state lock" in p for p in skill["common_pitfalls"])
    url = f"{stack.url}/v1/skills/{skill['skill_id']}"
    merged = stack.post("/v1/skills:extract", {"task": task + " again", "trace": trace})
    assert merged.status_code == 200
    assert merged.json()["merged"] is True and merged.json()["skill_id"] == skill["skill_id"]

    atomic = stack.post(f"/v1/skills/{skill['skill_id']}/outcomes", {"success": True})
    assert atomic.status_code == 200 and atomic.json()["uses"] == 1 and atomic.headers["etag"] == '"3"'
    ok = stack.post(f"/v1/skills/{skill['skill_id']}/outcomes", {"success": True}, headers={"If-Match": '"3"'})
    assert ok.status_code == 200 and ok.json()["uses"] == 2
    stale = stack.post(f"/v1/skills/{skill['skill_id']}/outcomes", {"success": True}, headers={"If-Match": '"3"'})
    assert stale.status_code == 409 and stale.json()["current_version"] == 4 and stale.headers["etag"] == '"4"'

    no_match = httpx.patch(url, json={"description": "x"}, headers=auth, timeout=10)
    assert no_match.status_code == 428 and "If-Match" in no_match.json()["message"]
    patched = httpx.patch(url, json={"description": "Apply a Terraform plan safely"}, timeout=10,
                          headers={**auth, "If-Match": '"4"'})
    assert patched.status_code == 200 and patched.json()["version"] == 5
    for bad, phrase in (({}, "at least one"), ({"steps": []}, "steps"), ({"uses": 5}, "uses")):
        r = httpx.patch(url, json=bad, headers={**auth, "If-Match": '"5"'}, timeout=10)
        assert r.status_code == 422 and phrase in r.json()["message"], r.text

    found = httpx.get(
        stack.url + "/v1/skills", params={"task": "terraform apply for a module"}, headers=auth, timeout=10
    )
    assert found.status_code == 200 and found.json()["skills"][0]["skill_id"] == skill["skill_id"]
    history = httpx.get(url + "/history", headers=auth, timeout=10).json()["versions"]
    assert [v["change"] for v in history] == ["created", "merged", "outcome", "outcome", "edited"]
    assert len({v["by"] for v in history}) == 1 and history[0]["by"]  # the dev key's id

    for path, body, phrase in (
        ("/v1/skills:extract", {"task": "x", "trace": []}, "trace"),
        ("/v1/skills:extract", {"task": "x", "trace": [42]}, "trace"),  # a step is an object or a line
        ("/v1/skills:extract", {"task": "x", "trace": ["y" * 3000] * 30}, "60000 bytes"),
        (f"/v1/skills/{skill['skill_id']}/outcomes", {"success": "maybe"}, "success"),
    ):
        r = stack.post(path, body)
        assert r.status_code == 422 and phrase in r.json()["message"], r.text
    assert httpx.get(stack.url + "/v1/skills/skill-nope", headers=auth, timeout=10).status_code == 404
    assert httpx.get(stack.url + "/v1/skill-jobs/job-nope", headers=auth, timeout=10).status_code == 404
    with StrataClient(stack.url, "sk-strata-nope") as other, pytest.raises(Unauthorized):
        other.get_skill(skill["skill_id"])
    deleted = httpx.delete(url, headers=auth, timeout=10)
    assert deleted.status_code == 200 and deleted.json()["removed"] == 6
    assert httpx.get(url, headers=auth, timeout=10).status_code == 404


def test_interaction_teaches_a_skill_used_by_the_next_context(stack: Running) -> None:
    body = {
        "session_id": "ops-1", "user": "Our Postgres replica lags; please fix the replication slot",
        "agent": "Dropped and recreated the slot; lag is back to zero", "task_type": "debugging", "success": True,
        "trace": [
            {"command": "psql -c 'select * from pg_replication_slots'"},
            {"command": "psql -c \"select pg_drop_replication_slot('replica_1')\""},
            {"command": "psql -c \"select pg_create_physical_replication_slot('replica_1')\""},
        ],
    }
    r = stack.post("/v1/interactions", body)
    assert r.status_code == 201, r.text
    job = r.json()["skill_job"]
    assert job["status"] in ("pending", "running", "done") and r.json()["turns"][0]["session_id"] == "ops-1"
    auth = {"Authorization": f"Bearer {stack.key}"}
    for _ in range(300):
        job = httpx.get(f"{stack.url}/v1/skill-jobs/{job['job_id']}", headers=auth, timeout=10).json()
        if job["status"] == "done":
            break
        time.sleep(0.1)
    assert job["status"] == "done" and job["skill_id"]
    ctx = stack.post("/v1/context", {"message": "the replica lags behind again", "session_id": "ops-2",
                                     "task_type": "debugging", "max_tokens": 800}).json()
    procedural = [s for s in ctx["sections"] if s["layer"] == "procedural"]
    assert procedural and procedural[0]["items"][0]["id"] == job["skill_id"]
    assert ctx["token_count"] <= 800 and ctx["missing"] == {}


def _cn_id(first17: str) -> str:
    weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    return first17 + "10X98765432"[sum(int(d) * w for d, w in zip(first17, weights, strict=True)) % 11]


def test_pii_never_reaches_the_data_dir(stack: Running) -> None:
    raw = {
        "email": "maria.lopez@example.org",
        "phone": "+44 20 7946 0958",
        "card": "4111 1111 1111 1111",
        "cn_id": _cn_id("11010519491231002"),
        "ip": "203.0.113.77",
        "secret": "sk-proj-Qw3rTy9UiOp1AsDf7GhJk2LzXcVb",
    }
    marker = "zebraquokka"  # written as is: proves the grep below sees what the stores wrote
    text = (f"{marker} notes: mail {raw['email']}, phone {raw['phone']}, card {raw['card']}, "
            f"身份证 {raw['cn_id']}, server {raw['ip']}, key {raw['secret']}")
    r = stack.post("/v1/sessions/pii-1/turns", {"user": text, "agent": f"Noted, I will email {raw['email']}."})
    assert r.status_code == 201, r.text
    assert set(r.json()["redacted"]) == set(raw)
    document = {"doc_id": "pii-doc", "title": f"Contacts {marker}", "text": "# Contacts\n\n" + text}
    assert stack.post("/v1/documents", document).status_code == 201
    skill = stack.post("/v1/skills:extract", {"task": f"Rotate the {marker} API key", "trace": [
        {"command": f"vault write secret/app key={raw['secret']}", "output": f"sent to {raw['email']}"},
        {"tool": "notify", "args": {"to": raw["email"], "server": raw["ip"]}},
    ]})
    assert skill.status_code == 201, skill.text
    interaction = stack.post("/v1/interactions", {
        "session_id": "pii-2", "user": f"{marker}: reach me at {raw['phone']}", "agent": "ok",
        "task_type": "deployment", "success": True, "trace": [f"ssh root@{raw['ip']}"],
    })
    assert interaction.status_code == 201 and interaction.json()["redacted"] == {"phone": 1, "ip": 1}
    hits = stack.post("/v1/search", {"query": f"{marker} notes mail", "top_k": 20}).json()["hits"]
    assert hits and all(raw["email"] not in h["text"] for h in hits)
    assert any("[EMAIL]" in h["text"] for h in hits)

    blobs = [p.read_bytes() for p in stack.data_dir.rglob("*") if p.is_file()]
    assert any(marker.encode() in b for b in blobs), (
        "the stores' files do not show plain text: this check proves nothing"
    )
    for kind, value in raw.items():
        forms = {value, value.replace(" ", "")}
        leaked = [f for f in forms for b in blobs if f.encode() in b]
        assert not leaked, f"raw {kind} found in the data dir"


def test_a_retried_write_with_an_idempotency_key_is_applied_once(stack: Running) -> None:
    turn = {"user": "The spare key hangs behind the clock.", "turn_id": None}
    sent = [stack.post("/v1/sessions/idem-1/turns", {"user": turn["user"]}, headers={"Idempotency-Key": "retry-7"})
            for _ in range(3)]
    assert [r.status_code for r in sent] == [201, 201, 201]
    assert sent[1].json() == sent[0].json() == sent[2].json()
    assert sent[1].headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in sent[0].headers
    window = httpx.get(stack.url + "/v1/sessions/idem-1/working", headers={"Authorization": f"Bearer {stack.key}"})
    assert [i["content"] for i in window.json()["items"]] == [turn["user"]]  # applied once
    other = stack.post("/v1/sessions/idem-1/turns", {"user": "something else"}, headers={"Idempotency-Key": "retry-7"})
    assert other.status_code == 422 and "different request" in other.json()["message"]
    fresh = stack.post("/v1/sessions/idem-1/turns", {"user": turn["user"]}, headers={"Idempotency-Key": "retry-8"})
    assert fresh.status_code == 201 and fresh.json()["turns"][0]["turn_id"] != sent[0].json()["turns"][0]["turn_id"]


def test_openapi_docs(stack: Running) -> None:
    assert httpx.get(stack.url + "/docs", timeout=10).status_code == 200
    paths = httpx.get(stack.url + "/openapi.json", timeout=10).json()["paths"]
    assert {"/v1/context", "/v1/search", "/v1/sessions/{session_id}/turns", "/healthz", "/v1/documents",
            "/v1/skills:extract", "/v1/skills/{skill_id}/outcomes", "/v1/interactions"} <= set(paths)


def test_milvus_outage_gives_503_then_up_recovers(stack: Running) -> None:
    pid = int((stack.data_dir / "milvus.pid").read_text())
    os.killpg(pid, 9)
    time.sleep(0.5)
    started = time.monotonic()
    r = stack.post("/v1/sessions/outage/turns", {"user": "written while Milvus is down"})
    assert r.status_code == 503 and "Milvus" in r.json()["message"]
    assert r.headers["retry-after"]
    assert time.monotonic() - started < 15
    assert httpx.get(stack.url + "/healthz", timeout=30).status_code == 503
    with StrataClient(stack.url, stack.key) as client, pytest.raises(StoreUnavailable):
        client.record_turn("outage", "still down")
    up = stack.cli("up")
    assert up.returncode == 0, up.stdout + up.stderr
    # A client told 503 with Retry-After retries. Right after the restart the api replica's own
    # connection to the store may still be reconnecting (its first read failed once in three
    # clean-clone runs): the write must succeed within a few retries, with no manual step.
    for _ in range(5):
        r = stack.post("/v1/sessions/outage/turns", {"user": "written after the restart"})
        if r.status_code != 503:
            break
        time.sleep(float(r.headers.get("retry-after", "2")))
    assert r.status_code == 201, r.text
    hits = stack.post("/v1/search", {"query": "violin lessons", "layers": ["episodic"]}).json()["hits"]
    assert hits and "violin" in hits[0]["text"]


def _ray_core_pids(gcs_port: str) -> list[int]:
    """The GCS and raylet of this stack's Ray head (its workers die with them)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("gcs_server" in cmdline and f"--gcs_server_port={gcs_port}" in cmdline) or (
            "raylet/raylet" in cmdline and f":{gcs_port}" in cmdline
        ):
            pids.append(int(proc.name))
    return pids


def test_up_recovers_after_ray_is_killed(stack: Running) -> None:
    from strata_actors.router import shutdown_ray

    shutdown_ray()  # this process joined the cluster for the in-cluster client: leave it first
    pids = _ray_core_pids(stack.env["STRATA_RAY__GCS_PORT"])
    assert len(pids) == 2, pids
    for pid in pids:
        os.kill(pid, 9)
    _wait_until_silent(stack.url)  # the HTTP proxy dies with its raylet
    up = stack.cli("up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert up.stdout.strip().splitlines()[-1] == stack.key
    hits = stack.post("/v1/search", {"query": "violin lessons", "layers": ["episodic"]}).json()["hits"]
    assert hits and "violin" in hits[0]["text"]


def _wait_until_silent(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/healthz", timeout=2)
        except httpx.HTTPError:
            return
        time.sleep(0.5)
    raise AssertionError(f"{url} still answers {timeout_s:.0f} s after its Ray head was killed")


def test_demo_answers_from_earlier_sessions(stack: Running) -> None:
    demo = stack.cli("demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = demo.stdout
    assert "vegetarian" in out and "120 seconds" in out and "龙井" in out and "Alfama" in out
    # Each answer holds the turns that answer it and leaves the unrelated ones out.
    answers = {block.splitlines()[0]: block for block in out.split("Q: ")[1:]}
    food = answers["What should I keep in mind about food for our trip?"]
    assert "vegetarian" in food and "ERR_CONN_RESET" not in food and "150 euros" not in food
    tea = answers["我喜欢什么茶？"]
    assert "龙井" in tea and "Alfama" not in tea and "deploy" not in tea
    assert json.loads((stack.data_dir / "stack.json").read_text())["serve_port"] == stack.port
    assert out.strip().splitlines()[-1] == (
        f"The stack is still up at {stack.url}; stop it with: strata down --data-dir {stack.data_dir}"
    )


def test_every_file_the_stack_wrote_is_owner_only(stack: Running) -> None:
    """Data dir and Ray's temporary directory: directories 0700, files 0600 (after every
    test above has written through the stack)."""
    ray_temp_dir = Path(json.loads((stack.data_dir / "stack.json").read_text())["ray_temp_dir"])
    assert stat.S_IMODE(ray_temp_dir.parent.stat().st_mode) == 0o700  # /tmp/strata-<uid>
    # This test process joined the stack's Ray (the in-cluster client): Ray wrote its driver's
    # logs with this process's umask. Those are the caller's files, not the stack's.
    callers = f"_{os.getpid()}.log"
    offenders = []
    for root in (stack.data_dir, ray_temp_dir, stack.haproxy_dir):
        for top, dirs, files in os.walk(root):
            for name in [".", *dirs, *files]:
                path = Path(top, name)
                mode = path.lstat().st_mode
                # HAProxy makes its admin socket 0666: in directories only their owner may
                # enter (checked here too), no one else can reach it to connect.
                private = stat.S_ISLNK(mode) or stat.S_ISSOCK(mode) or not stat.S_IMODE(mode) & 0o077
                if not private and not name.endswith(callers):
                    offenders.append(f"{oct(stat.S_IMODE(mode))} {path}")
    assert not offenders, "readable by other users:\n" + "\n".join(offenders)


def test_hits_carry_a_relevance_and_the_context_leaves_the_unrelated_out(stack: Running) -> None:
    for said in ("Our cat is called Miso and she is four years old.",
                 "The nightly build broke on the ARM runners after the compiler upgrade."):
        assert stack.post("/v1/sessions/relevance-check/turns", {"user": said}).status_code == 201
    hits = stack.post("/v1/search", {"query": "What is our cat called?", "layers": ["episodic"],
                                     "session_id": "relevance-check"}).json()["hits"]
    by_text = {h["text"]: h for h in hits}
    cat = next(h for t, h in by_text.items() if "Miso" in t)
    build = next(h for t, h in by_text.items() if "ARM" in t)
    assert all(0.0 <= h["relevance"] <= 1.0 for h in hits)
    assert cat["relevance"] > 0.3 > build["relevance"], (cat, build)
    context = stack.post("/v1/context", {"message": "What is our cat called?", "session_id": "asking-about-the-cat",
                                         "max_tokens": 2000}).json()
    assert "Miso" in context["context"] and "ARM runners" not in context["context"]
    items = [i for s in context["sections"] if s["layer"] == "episodic" for i in s["items"]]
    assert items and all(i["relevance"] >= 0.3 for i in items)
