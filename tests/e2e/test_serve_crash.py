"""No lost writes over HTTP (issue 7): every process of the Serve application (controller,
HTTP proxy, the API (ingress) and embedding replicas) is killed with SIGKILL in the middle of
a stream of 400 turns from 4 clients. Ray restarts the controller, which brings the proxy
and the replicas back with no manual step; the clients retry with the same turn ids. After
the stream, every acknowledged turn is stored once and read back by the layer actor that owns
the tenant, and the episodic versions acknowledged after the kill are above every one
acknowledged before it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from strata.config import load_settings
from strata.store.layout import open_store
from strata_cli.processes import processes_naming
from tests.e2e.running import Running, started

WRITERS = 4
#: The kill falls after KILL_AFTER acknowledged turns, with every writer mid-stream: what is
#: checked (nothing acknowledged is lost, no version reused) holds for any length past that,
#: and the writes after the restart are what the test waits for.
TURNS = 400
KILL_AFTER = 120
#: The whole stream, kill and recovery included, must end within this (a loaded 2-core machine).
DEADLINE_S = 420.0
SERVE_PROCESSES = (b"ray::ServeController", b"ray::ProxyActor", b"ray::ServeReplica")


@dataclass
class Write:
    session: str
    turn_id: str
    text: str
    #: The episodic version of the 201 that recorded it, and when that answer came.
    version: int | None = None
    acked_at: float = 0.0
    #: A retry answered ``replayed``: an attempt that failed was durable.
    replayed: bool = False
    failures: Counter[str] = field(default_factory=Counter)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    # Every turn stays in its session's raw window, so the owner's state lists them all.
    with started(tmp_path_factory, "serve-crash", STRATA_EPISODIC__RAW_WINDOW="10000",
                 STRATA_EPISODIC__SUMMARY_THRESHOLD="10000") as running:
        yield running


_READ_SESSIONS = """
import json, sys
import ray
from strata_actors.client import InClusterClient
client = InClusterClient.for_running_stack("demo", data_dir=sys.argv[1])
owner = client._flow.router.handle("episodic", "demo")
out = {}
for session in sys.argv[2:]:
    state = ray.get(owner.session_state.remote("demo", session))
    out[session] = [[t["turn_id"] for t in state["window"]], state["turns"]]
print(json.dumps(out))
"""


def _serve_pids(stack: Running) -> list[int]:
    """The Serve application's processes of this stack's Ray (not of another stack's)."""
    marker = str(stack.ray_dir)
    pids = []
    for pid in processes_naming(marker):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(SERVE_PROCESSES):
            pids.append(pid)
    return pids


class Stream:
    def __init__(self, stack: Running) -> None:
        self.stack = stack
        self.plan = [
            [Write(f"serve-kill-w{w}", f"w{w}-t{n:04d}", f"Writer {w} note {n}: the marker word is sk{w}x{n}.")
             for n in range(TURNS // WRITERS)]
            for w in range(WRITERS)
        ]
        self.acked = 0
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._deadline = time.monotonic() + DEADLINE_S

    @property
    def writes(self) -> list[Write]:
        return [w for plan in self.plan for w in plan]

    def run(self) -> None:
        threads = [threading.Thread(target=self._writer, args=(plan,)) for plan in self.plan]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _writer(self, plan: list[Write]) -> None:
        headers = {"Authorization": f"Bearer {self.stack.key}"}
        with httpx.Client(base_url=self.stack.url, headers=headers, timeout=60) as client:
            for write in plan:
                while True:
                    if time.monotonic() > self._deadline:
                        self.problems.append(f"{write.turn_id}: not acknowledged before the deadline")
                        return
                    body = {"user": write.text, "turn_id": write.turn_id}
                    try:
                        r = client.post(f"/v1/sessions/{write.session}/turns", json=body)
                    except httpx.HTTPError as exc:
                        write.failures[type(exc).__name__] += 1
                        time.sleep(0.2)
                        continue
                    # 408: Serve's request timeout. A plain-text 404 is Serve's proxy before the app's
                    # routes are back after the kill (Strata's own 404 is JSON): the client retries.
                    is_json = r.headers.get("content-type", "").startswith("application/json")
                    restarting = r.status_code == 404 and not is_json
                    if r.status_code >= 500 or r.status_code in (408, 429) or restarting:
                        write.failures[str(r.status_code)] += 1
                        time.sleep(min(float(r.headers.get("retry-after") or 0.2), 0.5))
                        continue
                    if r.status_code != 201:
                        self.problems.append(f"{write.turn_id}: {r.status_code} {r.text[:300]}")
                        return
                    answer = r.json()
                    if answer.get("replayed"):
                        write.replayed = True
                    else:
                        write.version = answer["versions"]["episodic"]
                        write.acked_at = time.monotonic()
                    with self._lock:
                        self.acked += 1
                    break


# The stack's start and a stream of up to DEADLINE_S: more than a test's default bound.
@pytest.mark.timeout(900)
def test_killing_the_serve_application_mid_stream_loses_no_acknowledged_write(stack: Running) -> None:
    r = stack.post("/v1/sessions/warm-up/turns", {"user": "Warm-up turn."})
    assert r.status_code == 201, r.text
    stream = Stream(stack)
    writers = threading.Thread(target=stream.run)
    started_at = time.monotonic()
    writers.start()
    while stream.acked < KILL_AFTER and writers.is_alive():
        time.sleep(0.05)
    assert writers.is_alive(), f"the stream ended before the kill: {stream.problems[:5]}"
    pids = _serve_pids(stack)
    assert len(pids) >= 4, f"controller, proxy and two replicas (api, embedding) expected, found {pids}"
    killed_at = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    writers.join()
    took_s = time.monotonic() - started_at
    assert not stream.problems, "\n".join(stream.problems[:10])

    writes = stream.writes
    acked = [w for w in writes if w.version is not None]
    # Every turn is acknowledged, or was durable and replayed to a retry.
    assert all(w.version is not None or w.replayed for w in writes)
    assert any(w.failures for w in writes), "no write saw the crash"
    assert set(_serve_pids(stack)).isdisjoint(pids), "Serve's processes were not replaced"

    versions = [w.version for w in acked]
    assert len(set(versions)) == len(versions), "an episodic version was acknowledged twice"
    before = [w.version for w in acked if w.acked_at < killed_at and w.version is not None]
    # Acknowledged after the kill: by the restarted application. (Not only writes that failed
    # first: each writer's write in flight at the kill is often durable already, since the
    # ingress writes to the layer actor itself, and its retry is then answered `replayed`.)
    after = [w.version for w in acked if w.acked_at > killed_at and w.version is not None]
    assert before and after, "the kill must fall inside the stream"
    assert min(after) > max(before), (
        f"a version acknowledged before the kill was reused: {min(after)} <= {max(before)}"
    )

    # Stored once each, with their text: read from the stack's Milvus.
    settings = load_settings(None, data_dir=stack.data_dir, milvus={"port": int(stack.env["STRATA_MILVUS__PORT"])})
    store, names = open_store(settings)
    rows = [r for r in store.scan(names.episodic, tenant="demo", with_vectors=False) if r.kind == "turn"]
    stored = Counter((r.session, r.payload["turn_id"]) for r in rows)
    texts = {(r.session, r.payload["turn_id"]): r.payload.get("user") for r in rows}
    lost = [w.turn_id for w in writes if stored[(w.session, w.turn_id)] != 1]
    assert not lost, f"{len(lost)} turns are not stored exactly once: {lost[:10]}"
    wrong = [w.turn_id for w in writes if texts[(w.session, w.turn_id)] != w.text]
    assert not wrong, f"turns stored with another text: {wrong[:10]}"

    # And readable where the service reads them: each session's turns, once each, in the episodic
    # actor that owns the tenant. Read from a process of its own that joins the stack's Ray: a
    # pytest process that joined one stack's Ray could not join the next module's afterwards.
    sessions = sorted({w.session for w in writes})
    states = json.loads(subprocess.run(
        [sys.executable, "-c", _READ_SESSIONS, str(stack.data_dir), *sessions],
        check=True, capture_output=True, text=True, env=stack.env, timeout=120,
    ).stdout.strip().splitlines()[-1])
    for session in sessions:
        ids, turns = states[session]
        expected = [w.turn_id for w in writes if w.session == session]
        assert sorted(ids) == sorted(expected) and turns == len(expected), (
            f"{session}: {len(set(expected) - set(ids))} turns not readable, {turns} turns for {len(expected)} written")
    r = stack.post("/v1/search", {"query": "Writer note marker word", "layers": ["episodic"]})
    assert r.status_code == 200 and r.json()["hits"], r.text

    failures = Counter(k for w in writes for k, n in w.failures.items() for _ in range(n))
    print(f"\n[serve crash] stream_s={took_s:.1f}; killed={len(pids)} processes at {killed_at - started_at:.1f} s; "
          f"acked={len(acked)}; replayed={sum(w.replayed for w in writes)}; "
          f"writes_with_failures={sum(bool(w.failures) for w in writes)}; failures={dict(failures)}")
