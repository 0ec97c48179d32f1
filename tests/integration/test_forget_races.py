"""Forgetting or evicting a tenant while 50 writers per layer write to it (issue 18).

Each layer's shard is asked to forget (or evict) the tenant once that layer has acknowledged
``TRIGGER_ACKS`` writes, while its writers keep writing. Afterwards the store is scanned:

(a) no row survives from a write the layer acknowledged before it acknowledged the forget,
    and the writes that survive are a version cut: every one above every version the forget
    removed in the same scope (a write is ordered before the forget's delete or after it);
(b) no (scope, version) was acknowledged twice;
(c) after an eviction, every acknowledged write is in the store and readable through the shard.

The semantics are the shard's (see :mod:`strata_actors.shard`): a write acknowledged by a layer
after that layer's forget is a new write into the emptied tenant and stays. Real Ray, real
milvus-lite; writers call the layer shards through their typed handles, as the orchestration does.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from strata.errors import StrataError, VersionConflict
from strata.ids import SYSTEM_TENANT
from strata.layers import LAYERS, Layer
from strata.procedural.memory import HISTORY
from strata.providers.embedder import embedding_dim
from strata.store.layout import Collections, open_store
from strata.store.records import Record
from strata.store.versions import VersionStore
from strata_actors.router import LayerRouter
from tests.conftest import MilvusServer, settings_for
from tests.llm_server import Reply, chat_body, llm_server

pytestmark = pytest.mark.usefixtures("ray_local")

WRITERS = 50
WRITES_EACH = 3
#: A layer is forgotten (or evicted) once it has acknowledged this many writes.
TRIGGER_ACKS = 40
#: A call that takes longer than this is a hang, not a slow machine.
HANG_S = 180.0
SESSIONS = 5


@dataclass
class Ack:
    marker: str
    scope: str
    version: int
    started: float
    ended: float


@dataclass
class LayerRun:
    layer: Layer
    acks: list[Ack] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    #: When the layer's forget (or evict) call was made and when its answer arrived.
    cut_started: float | None = None
    cut_ended: float | None = None


def _settings(milvus: MilvusServer) -> Any:
    # One shard per layer; no background summaries; working memory large enough to keep every item.
    return settings_for(
        milvus,
        actors={f"{layer}_shards": 1 for layer in LAYERS},
        episodic={"raw_window": 10_000, "summary_threshold": 10_000},
        working={"max_tokens": 1_000_000},
    )


def _marker(layer: Layer, writer: int, n: int) -> str:
    return f"mark{layer[:3]}{writer:02d}q{n}z"


def _writer_call(
    router: LayerRouter, tenant: str, layer: Layer, dim: int
) -> Callable[[int, int, str], Awaitable[tuple[str, int]]]:
    """One write of ``layer`` by ``writer`` (its ``n``-th), carrying ``marker``; returns (scope, version)."""

    async def episodic(writer: int, n: int, marker: str) -> tuple[str, int]:
        vector = np.random.default_rng(writer * 100 + n).random((1, dim), dtype=np.float32)
        turn = {"user": f"Writer {writer} says {marker}.", "agent": "Noted.", "turn_id": marker}
        out = await router.episodic(tenant).record_turns(tenant, f"s{writer % SESSIONS}", [turn], vectors=vector)
        return "episodic", out["version"]

    async def working(writer: int, n: int, marker: str) -> tuple[str, int]:
        session = f"s{writer % SESSIONS}"
        out = await router.working(tenant).add_items(tenant, session, [{"role": "user", "content": f"Keep {marker}."}])
        return session, out["version"]

    async def semantic(writer: int, n: int, marker: str) -> tuple[str, int]:
        doc_id = f"doc-{marker}"
        text = f"# Note {writer}\n\nThe {marker} service stores its queue in Kafka."
        out = await router.semantic(tenant).index_document(tenant, {"doc_id": doc_id, "text": text})
        return doc_id, out.version

    async def procedural(writer: int, n: int, marker: str) -> tuple[str, int]:
        out = await router.procedural(tenant).extract_skill(
            tenant, f"Deploy the {marker} service", [{"command": f"deploy {marker} --env staging"}], None, by="race"
        )
        return out.skill_id, out.version

    calls = {"episodic": episodic, "working": working, "semantic": semantic, "procedural": procedural}
    return calls[layer]


async def _run_layer(
    run: LayerRun, call: Callable[[int, int, str], Awaitable[tuple[str, int]]], cut: Callable[[], Awaitable[None]]
) -> None:
    """``WRITERS`` concurrent writers of one layer, each writing ``WRITES_EACH`` times in turn;
    ``cut`` (the forget or the eviction) is called once ``TRIGGER_ACKS`` writes are acknowledged."""
    enough = asyncio.Event()

    async def writer(w: int) -> None:
        for n in range(WRITES_EACH):
            marker = _marker(run.layer, w, n)
            started = time.monotonic()
            try:
                scope, version = await asyncio.wait_for(call(w, n, marker), HANG_S)
            except StrataError as exc:  # refused (a write overlapping a forget may be): not acknowledged
                run.failures.append(exc)
                continue
            run.acks.append(Ack(marker, scope, version, started, time.monotonic()))
            if len(run.acks) >= TRIGGER_ACKS:
                enough.set()

    async def cutter() -> None:
        await enough.wait()
        run.cut_started = time.monotonic()
        await cut()
        run.cut_ended = time.monotonic()

    await asyncio.gather(cutter(), *(writer(w) for w in range(WRITERS)))


async def _race(
    settings: Any, tenant: str, cut: Callable[[LayerRouter, Layer], Awaitable[None]]
) -> dict[Layer, LayerRun]:
    router = LayerRouter(settings)
    dim = embedding_dim(settings.embedding)
    for layer in LAYERS:  # every shard up, and the tenant loaded, before the race
        await router.layer(layer, tenant).ping()
    runs = {layer: LayerRun(layer) for layer in LAYERS}
    await asyncio.gather(
        *(
            _run_layer(runs[layer], _writer_call(router, tenant, layer, dim), functools.partial(cut, router, layer))
            for layer in LAYERS
        )
    )
    for run in runs.values():
        assert run.cut_ended is not None, f"{run.layer}: the cut never happened"
        unexpected = [
            e for e in run.failures if "forgotten" not in getattr(e, "message", "") and type(e).__name__ != "NotFound"
        ]
        assert not unexpected, f"{run.layer}: writes failed with {unexpected[:3]!r}"
    return runs


def _rows(settings: Any, tenant: str) -> tuple[dict[Layer, list[Record]], Collections, Any]:
    store, names = open_store(settings)
    where: dict[Layer, tuple[str, list[str] | None]] = {
        "episodic": (names.episodic, None),
        "working": (names.state, ["working"]),
        "semantic": (names.semantic, None),
        "procedural": (names.procedural, None),
    }
    rows = {
        layer: store.scan(collection, tenant=tenant, kinds=kinds, with_vectors=False)
        for layer, (collection, kinds) in where.items()
    }
    return rows, names, store


def _survives(layer: Layer, ack: Ack, rows: list[Record]) -> bool:
    """Whether a row of the write ``ack`` is in ``rows`` (its layer's rows of the tenant)."""
    # A merge may drop an old task from the skill; the history row of each version stays.
    if layer == "procedural" and any(
        r.kind == HISTORY and r.session == ack.scope and int(r.payload.get("version", -1)) == ack.version for r in rows
    ):
        return True
    return any(ack.marker in r.text or ack.marker in json.dumps(r.payload) for r in rows)


def _repeated(run: LayerRun) -> dict[tuple[str, int], int]:
    return {k: n for k, n in Counter((a.scope, a.version) for a in run.acks).items() if n > 1}


def _counter_problems(settings: Any, tenant: str, run: LayerRun, versions: VersionStore) -> list[str]:
    """A durable counter below a version acknowledged would hand that version out again."""
    top: dict[str, int] = {}
    for ack in run.acks:
        top[ack.scope] = max(top.get(ack.scope, 0), ack.version)
    return [
        f"{run.layer}/{scope}: the durable counter is at {versions.get(tenant, run.layer, scope)}, below {v}"
        for scope, v in top.items()
        if versions.get(tenant, run.layer, scope) < v
    ]


async def test_forget_amid_50_writers_per_layer_leaves_no_earlier_write_and_no_version_twice(
    milvus: MilvusServer,
) -> None:
    settings = _settings(milvus)
    tenant = "forget-race"

    async def forget(router: LayerRouter, layer: Layer) -> None:
        await router.layer(layer, tenant).forget_tenant(tenant)

    runs = await _race(settings, tenant, forget)
    rows, names, store = _rows(settings, tenant)
    versions = VersionStore(store, names.state)
    problems: list[str] = []
    for layer, run in runs.items():
        assert run.cut_ended is not None
        before = [a for a in run.acks if a.ended < run.cut_started]  # type: ignore[operator]
        assert before and any(a.ended > run.cut_ended for a in run.acks), f"{layer}: the forget fell outside the stream"
        # (a) nothing acknowledged before the layer acknowledged the forget survives it
        kept = [a for a in run.acks if a.ended < run.cut_ended and _survives(layer, a, rows[layer])]
        if kept:
            problems.append(
                f"{layer}: {len(kept)} writes acknowledged before the forget survive it: "
                + ", ".join(
                    f"{a.marker} ({a.scope} v{a.version}, acked {a.ended - run.cut_ended:+.3f} s)" for a in kept[:5]
                )
            )
        # ... and a write begun after the forget was acknowledged is kept
        lost = [a for a in run.acks if a.started > run.cut_ended and not _survives(layer, a, rows[layer])]
        if lost:
            problems.append(
                f"{layer}: {len(lost)} writes begun after the forget are lost: {[a.marker for a in lost[:5]]}"
            )
        # ... and the survivors are a version cut: each above every version the forget removed
        for scope in {a.scope for a in run.acks}:
            mine = [a for a in run.acks if a.scope == scope]
            gone = [a.version for a in mine if not _survives(layer, a, rows[layer])]
            stay = [a.version for a in mine if _survives(layer, a, rows[layer])]
            if gone and stay and min(stay) < max(gone):
                problems.append(f"{layer}/{scope}: kept version {min(stay)} is below removed version {max(gone)}")
        # (b) no version acknowledged twice
        if _repeated(run):
            problems.append(f"{layer}: versions acknowledged more than once: {_repeated(run)}")
        problems += _counter_problems(settings, tenant, run, versions)
    assert not problems, "\n".join(problems)

    # Once more per scope of the two session layers, after the race: no version comes back.
    router = LayerRouter(settings)
    episodic = await router.episodic(tenant).record_turns(
        tenant,
        "s0",
        [{"user": "After the race."}],
        vectors=np.zeros((1, embedding_dim(settings.embedding)), np.float32),
    )
    assert episodic["version"] > max(a.version for a in runs["episodic"].acks)
    working = await router.working(tenant).add_items(tenant, "s0", [{"role": "user", "content": "After the race."}])
    assert working["version"] > max(a.version for a in runs["working"].acks if a.scope == "s0")


async def test_eviction_amid_50_writers_per_layer_loses_nothing_and_claims_no_version_twice(
    milvus: MilvusServer,
) -> None:
    settings = _settings(milvus)
    tenant = "evict-race"

    async def evict(router: LayerRouter, layer: Layer) -> None:
        actor = router.handle(layer, tenant)
        for _ in range(3):  # three evictions in a row: each while writers wait on the slot's lock
            await actor.evict.remote(tenant)
            await asyncio.sleep(0)

    runs = await _race(settings, tenant, evict)
    assert all(not run.failures for run in runs.values()), {k: r.failures[:3] for k, r in runs.items()}
    rows, names, store = _rows(settings, tenant)
    versions = VersionStore(store, names.state)
    router = LayerRouter(settings)
    problems: list[str] = []
    for layer, run in runs.items():
        assert len(run.acks) == WRITERS * WRITES_EACH
        # (c) every acknowledged write is in the store ...
        lost = [a.marker for a in run.acks if not _survives(layer, a, rows[layer])]
        if lost:
            problems.append(f"{layer}: {len(lost)} acknowledged writes are not in the store: {lost[:5]}")
        # (b) and no version was acknowledged twice
        if _repeated(run):
            problems.append(f"{layer}: versions acknowledged more than once: {_repeated(run)}")
        problems += _counter_problems(settings, tenant, run, versions)
    # (c) ... and readable through the shards (whose memory may have been loaded mid-race)
    for session in (f"s{n}" for n in range(SESSIONS)):
        state = await router.working(tenant).get(tenant, session)
        held = " ".join(i["content"] for i in state["items"])
        missing = [a.marker for a in runs["working"].acks if a.scope == session and a.marker not in held]
        if missing:
            problems.append(f"working/{session}: {len(missing)} acknowledged items not in the shard's memory")
    actor = router.handle("episodic", tenant)
    window = {
        t["turn_id"] for s in range(SESSIONS) for t in (await actor.session_state.remote(tenant, f"s{s}"))["window"]
    }
    missing = [a.marker for a in runs["episodic"].acks if a.marker not in window]
    if missing:
        problems.append(f"episodic: {len(missing)} acknowledged turns not in the shard's memory: {missing[:5]}")
    listed = await router.semantic(tenant).list_documents(tenant, limit=1000)
    missing = [a.scope for a in runs["semantic"].acks if a.scope not in {d.doc_id for d in listed.documents}]
    if missing:
        problems.append(f"semantic: {len(missing)} acknowledged documents not in the shard's memory: {missing[:5]}")
    skills = await router.procedural(tenant).list_skills(tenant, limit=1000)
    known = {(s.skill_id, s.version) for s in skills.skills}
    behind = [a for a in runs["procedural"].acks if not any(sid == a.scope and v >= a.version for sid, v in known)]
    if behind:
        problems.append(f"procedural: {len(behind)} acknowledged skill versions not in the shard's memory")
    assert not problems, "\n".join(problems)


# -- a skill job running when its tenant is forgotten ------------------------------------------

SKILL = {
    "skill_name": "rotate-billing-keys",
    "description": "Rotate the API keys of the billing service",
    "trigger_conditions": ["asked to rotate billing keys"],
    "steps": ["vault write billing/rotate", "kubectl -n billing rollout restart deploy/api"],
    "common_pitfalls": [],
    "success_criteria": ["the old key is refused"],
}
TRACE: list[Any] = [
    {"command": "vault write billing/rotate"},
    {"command": "kubectl -n billing rollout restart deploy/api"},
]


class _HeldLLM:
    """An LLM whose first answer waits until :meth:`release` (the job is mid-extraction then)."""

    def __init__(self) -> None:
        self.asked, self.released = threading.Event(), threading.Event()

    def script(self, n: int) -> Reply:
        def reply() -> tuple[int, dict[str, Any]]:
            if n == 0:
                self.asked.set()
                self.released.wait(60)
            return 200, chat_body(json.dumps(SKILL))

        return reply

    async def until_asked(self) -> None:
        assert await asyncio.to_thread(self.asked.wait, 60), "the skill job never reached the LLM"

    def release(self) -> None:
        self.released.set()


def _llm_settings(milvus: MilvusServer, url: str) -> Any:
    return settings_for(
        milvus,
        llm={"base_url": url, "timeout_s": 60.0, "max_retries": 0},
        procedural={"job_retry_s": 0.2},
        actors={"procedural_shards": 1},
    )


def _left_of(settings: Any, tenant: str) -> tuple[list[Record], list[Record]]:
    """The tenant's procedural rows, and the job rows (under the system tenant) that name it."""
    store, names = open_store(settings)
    jobs = [
        r
        for r in store.scan(names.state, tenant=SYSTEM_TENANT, kinds=["skill_job"], with_vectors=False)
        if r.payload.get("tenant") == tenant
    ]
    return store.scan(names.procedural, tenant=tenant, with_vectors=False), jobs


async def test_a_background_skill_job_running_at_forget_time_does_not_recreate_the_skill(milvus: MilvusServer) -> None:
    llm = _HeldLLM()
    with llm_server(llm.script) as (url, _):
        settings = _llm_settings(milvus, url)
        router = LayerRouter(settings)
        tenant, witness = "forget-job", "witness-job"
        assert router.shard_of("procedural", tenant) == router.shard_of("procedural", witness)
        await router.procedural(tenant).learn_later(tenant, "Rotate the billing keys", TRACE, None, by="race")
        await llm.until_asked()  # the job is running, mid-extraction
        # A second tenant's job, queued behind it on the shard's one job loop: once it is done,
        # the first job's attempt has finished too.
        second = await router.procedural(witness).learn_later(
            witness, "Rotate the billing keys", TRACE, None, by="race"
        )
        await router.procedural(tenant).forget_tenant(tenant)
        llm.release()
        deadline = time.monotonic() + 120
        while (await router.procedural(witness).skill_job(witness, second.job_id)).status != "done":
            assert time.monotonic() < deadline, "the witness job never finished"
            await asyncio.sleep(0.1)
        assert (await router.procedural(tenant).list_skills(tenant)).total == 0
        skills, jobs = _left_of(settings, tenant)
        assert skills == [] and jobs == [], f"re-created after the forget: {[r.pk for r in skills + jobs]}"
        assert (await router.procedural(witness).list_skills(witness)).total == 1


async def test_a_direct_skill_extraction_running_at_forget_time_is_refused_not_recreated(milvus: MilvusServer) -> None:
    llm = _HeldLLM()
    with llm_server(llm.script) as (url, _):
        settings = _llm_settings(milvus, url)
        router = LayerRouter(settings)
        tenant = "forget-extract"
        extracting = asyncio.ensure_future(
            router.procedural(tenant).extract_skill(tenant, "Rotate the billing keys", TRACE, None, by="race")
        )
        await llm.until_asked()
        await router.procedural(tenant).forget_tenant(tenant)
        llm.release()
        with pytest.raises(VersionConflict, match="forgotten"):
            await extracting
        skills, jobs = _left_of(settings, tenant)
        assert skills == [] and jobs == [], f"re-created after the forget: {[r.pk for r in skills + jobs]}"
        # The tenant is usable again: the same extraction now is a new skill.
        again = await router.procedural(tenant).extract_skill(tenant, "Rotate the billing keys", TRACE, None, by="race")
        assert again.version >= 1 and (await router.procedural(tenant).list_skills(tenant)).total == 1


async def test_a_background_document_job_running_at_forget_time_is_refused_not_written(milvus: MilvusServer) -> None:
    """A document indexed with ``wait=False`` whose tenant is forgotten while it embeds is refused
    when its job comes to write (the tenant's generation changed): nothing of it is in the store
    or the layer afterwards, and the emptied tenant takes the document again when it is sent."""
    settings = _settings(milvus)
    router = LayerRouter(settings)
    tenant = "forget-doc-job"
    shard = router.semantic(tenant)
    text = "\n\n".join(
        f"## Part {n}\n\nService number {n} writes its logs to bucket logs-{n} every hour." for n in range(800)
    )
    submitted = await shard.index_document(tenant, {"doc_id": "big", "text": text}, wait=False)
    assert submitted.status == "indexing"
    deadline = time.monotonic() + HANG_S
    while True:  # the job has begun embedding, and is far from done
        doc = await shard.get_document(tenant, "big")
        progress = doc.progress
        if progress is not None and progress.stage == "embedding" and progress.children_total:
            break
        assert doc.status == "indexing" and time.monotonic() < deadline, doc
        await asyncio.sleep(0.02)
    assert progress.children_done * 2 < progress.children_total, "the job is too far on to race the forget"
    await shard.forget_tenant(tenant)
    assert (await shard.ping()).get("indexing") == 1  # still embedding: its write comes after the forget
    while (await shard.ping()).get("indexing"):
        assert time.monotonic() < deadline, "the job never finished"
        await asyncio.sleep(0.1)
    store, names = open_store(settings)
    assert store.scan(names.semantic, tenant=tenant, with_vectors=False) == []
    assert (await shard.list_documents(tenant)).total == 0
    with pytest.raises(StrataError):  # neither the document nor its job is known
        await shard.get_document(tenant, "big")
    again = await shard.index_document(tenant, {"doc_id": "big", "text": "Service number 7 logs to bucket logs-7."})
    assert again.status == "ready" and (await shard.list_documents(tenant)).total == 1
