"""Forgotten content leaves the disk: after forgetting a turn, a session, a document or a
tenant, no file under milvus-lite's data dir holds its text within ``milvus.erase_after_s``
plus one erasure (``strata.store.erasure``). Real Ray, real milvus-lite.

Before the erasure the text stayed readable in the collection's write-ahead log (rows not
yet flushed) or in its Parquet segments (rows flushed before the forget) for as long as no
flush or compaction happened to rewrite them, after ``strata down`` too. Both places are
covered: the fixture flushes everything it writes, then writes the forgotten turn, which
only the log holds when it is forgotten.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from strata.store.layout import Collections, open_store
from strata.store.milvus import MilvusRecordStore
from strata_actors.client import InClusterClient
from tests.conftest import MilvusServer, settings_for

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.asyncio(loop_scope="module")]

#: It reads every file of its milvus-lite and stops it: one of its own (tests/conftest.py).
OWN_MILVUS = True
ERASE_AFTER_S = 1.0
#: erase_after_s, plus one erasure of a small collection (~0.1 s) on a loaded 2-core machine.
WITHIN_S = 30.0

# One made-up word per forgotten item (summaries and entities may split a hyphenated one).
TURN, TURN_KEPT = "Qorvilantix", "Brastemunde"
SESSION = "Wendrickfall"
DOC, DOC_TITLE, DOC_KEPT = "Plumbarosk", "Skelvinmoor", "Tarnowelde"
TENANT = "Yzzardine"  # every layer of the forgotten tenant: turn, working item, document, skill
SPARED = "Mordecanth"  # the same items of another tenant
STOPPED = "Halvorquist"  # forgotten just before the store stops (the last test writes it)
MARKERS = (TURN, TURN_KEPT, SESSION, DOC, DOC_TITLE, DOC_KEPT, TENANT, SPARED, STOPPED)


def on_disk(root: Path) -> set[str]:
    """The markers found in any file under ``root``: in its bytes (any case), or in the text
    of a Parquet or Arrow file read as such (in case a page's compression hid one)."""
    found: set[str] = set()
    for path in (p for p in root.rglob("*") if p.is_file()):
        try:
            data = path.read_bytes().lower()
        except OSError:  # removed by a compaction meanwhile
            continue
        found |= {m for m in MARKERS if m.lower().encode() in data}
        found |= {m for m in MARKERS if m.lower() in _decoded(path)}
    return found


def _decoded(path: Path) -> str:
    import pyarrow as pa  # type: ignore[import-untyped]  # ships no type information
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    try:
        if path.suffix == ".parquet":
            return str(pq.read_table(path).to_pylist()).lower()
        if path.suffix == ".arrow":
            with pa.OSFile(str(path), "rb") as source:
                return str(pa.ipc.open_stream(source).read_all().to_pylist()).lower()
    except (OSError, pa.ArrowException):  # a log being appended to, a file removed meanwhile
        return ""
    return ""


async def gone_within(root: Path, marker: str) -> float:
    """Seconds until no file under ``root`` holds ``marker``; fails after :data:`WITHIN_S`."""
    started = time.monotonic()
    while marker in on_disk(root):
        assert time.monotonic() - started < WITHIN_S, f"{marker!r} still on disk after {WITHIN_S} s"
        await asyncio.sleep(0.25)
    return time.monotonic() - started


@pytest.fixture(scope="module")
def settings(milvus: MilvusServer) -> Any:
    base = settings_for(milvus)
    return base.model_copy(update={"milvus": base.milvus.model_copy(update={"erase_after_s": ERASE_AFTER_S})})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def filled(settings: Any, milvus: MilvusServer) -> Path:
    """Every marker written; all but the forgotten turn flushed into segments."""
    mine, doomed, spared = (InClusterClient(t, settings) for t in ("residue", "residue-doomed", "residue-spared"))
    await mine.record_turns("s-session", [{"user": f"The locker word is {SESSION}.", "agent": "Noted."}])
    await mine.add_working_items("s-session", [{"role": "user", "content": f"Remember {SESSION} for later"}])
    await mine.index_document(f"# Ledger\n\n{DOC} Systems keeps the ledger in Kafka.", doc_id="doc-doomed",
                              title=f"{DOC_TITLE} ledger")
    await mine.index_document(f"# Audit\n\n{DOC_KEPT} Systems keeps the audit in Kafka.", doc_id="doc-kept")
    for client, word in ((doomed, TENANT), (spared, SPARED)):
        await client.record_turns("s1", [{"user": f"The vault phrase is {word}.", "agent": "Noted."}])
        await client.add_working_items("s1", [{"role": "user", "content": f"Remember {word} for later"}])
        await client.index_document(f"# Vault\n\n{word} Systems uses Kafka for the vault queue.", doc_id="vault")
        await client.extract_skill(f"Open the {word} vault", [{"command": f"vault unseal --name {word}"}])
    store, names = open_store(settings)
    await asyncio.to_thread(_flush_all, store, names)
    await mine.record_turns("s-turn", [{"user": f"My pin hint is {TURN}.", "agent": "ok", "turn_id": "t-doomed"},
                                       {"user": f"My pet is {TURN_KEPT}.", "agent": "ok", "turn_id": "t-kept"}])
    assert on_disk(milvus.data_dir) == set(MARKERS) - {STOPPED}
    return milvus.data_dir


def _flush_all(store: Any, names: Collections) -> None:
    assert isinstance(store, MilvusRecordStore)
    for collection in (names.episodic, names.semantic, names.procedural, names.state):
        store.erase_deleted(collection)


async def test_a_forgotten_turn_leaves_the_disk(settings: Any, filled: Path) -> None:
    await InClusterClient("residue", settings).forget_turn("s-turn", "t-doomed")
    await gone_within(filled, TURN)
    assert TURN_KEPT in on_disk(filled)


async def test_a_forgotten_session_leaves_the_disk(settings: Any, filled: Path) -> None:
    await InClusterClient("residue", settings).forget_session("s-session")
    await gone_within(filled, SESSION)


async def test_a_deleted_document_leaves_the_disk_title_and_all(settings: Any, filled: Path) -> None:
    await InClusterClient("residue", settings).delete_document("doc-doomed")
    await gone_within(filled, DOC)
    await gone_within(filled, DOC_TITLE)
    assert DOC_KEPT in on_disk(filled)


async def test_a_forgotten_tenant_leaves_the_disk_and_the_others_stay(settings: Any, filled: Path) -> None:
    await InClusterClient("residue-doomed", settings)._flow.forget_tenant("residue-doomed")
    await gone_within(filled, TENANT)
    assert {SPARED, TURN_KEPT, DOC_KEPT} <= on_disk(filled)


async def test_a_forget_cut_short_by_a_stop_is_erased_after_the_next_start(milvus: MilvusServer) -> None:
    """The erasure runs in the process that deleted, after its window: a store killed within it
    leaves the text, and the first process to open the collection after the restart erases it."""
    late = settings_for(milvus)  # actors of their own, whose erasure never comes in this test
    late = late.model_copy(update={"milvus": late.milvus.model_copy(update={"erase_after_s": 3600.0})})
    client = InClusterClient("residue-stopped", late)
    await client.record_turns("s1", [{"user": f"The alarm code is {STOPPED}.", "agent": "ok", "turn_id": "t1"},
                                     {"user": "Nothing else.", "agent": "ok", "turn_id": "t2"}])
    await client.forget_turn("s1", "t1")
    milvus.kill()  # as a crash or a `strata down` would, before the erasure
    milvus.start()
    assert STOPPED in on_disk(milvus.data_dir)
    opened = late.model_copy(update={"milvus": late.milvus.model_copy(update={"erase_after_s": ERASE_AFTER_S})})
    await asyncio.to_thread(open_store, opened)  # any process: an actor, the ingress, `strata keys`
    await gone_within(milvus.data_dir, STOPPED)
