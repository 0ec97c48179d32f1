"""The embedded store answers only callers that hold the data dir's token.

The store is started as ``strata up`` starts it (:meth:`Stack.ensure_milvus`); the
callers without the token are other processes, one of them run as another Unix user
when the tests run as root.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from strata.config import load_settings
from strata.errors import StoreUnavailable
from strata.store.layout import open_store
from strata.store.milvus import MilvusRecordStore
from strata.store.milvus_lite import TOKEN_FILE
from strata.store.records import Record
from strata_cli.processes import stop_process_group
from strata_cli.stack import Stack
from tests.conftest import free_port

SECRET_TEXT = "private turn 4242 of tenant t1"

#: A caller of the raw gRPC API (what any program on the machine can send), then of pymilvus.
CLIENT = r"""
import base64, json, sys
import grpc
from pymilvus.grpc_gen import milvus_pb2, milvus_pb2_grpc

port, token, collection, data_dir = sys.argv[1:5]
metadata = [("authorization", base64.b64encode(token.encode()).decode())] if token else []
stub = milvus_pb2_grpc.MilvusServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
calls = {
    "list collections": lambda: stub.ShowCollections(
        milvus_pb2.ShowCollectionsRequest(), metadata=metadata, timeout=10
    ),
    "query": lambda: stub.Query(milvus_pb2.QueryRequest(collection_name=collection, expr='pk != ""',
                                                         output_fields=["pk", "text"]), metadata=metadata, timeout=10),
    "insert": lambda: stub.Insert(milvus_pb2.InsertRequest(collection_name=collection, num_rows=1),
                                  metadata=metadata, timeout=10),
}
out = {}
for name, call in calls.items():
    try:
        out[name] = ["OK", str(call())]
    except grpc.RpcError as exc:
        out[name] = [exc.code().name, exc.details()]
try:
    from pymilvus import MilvusClient
    client = MilvusClient(uri=f"http://127.0.0.1:{port}", token=token, timeout=5)
    out["pymilvus"] = ["OK", str(client.list_collections())]
except Exception as exc:
    out["pymilvus"] = [type(exc).__name__, repr(exc.__cause__ or exc)]
for name in ("token file", "data dir"):
    path = data_dir + ("/milvus-token" if name == "token file" else "/milvus")
    try:
        out[name] = ["OK", open(path).read() if name == "token file" else str(__import__("os").listdir(path))]
    except OSError as exc:
        out[name] = [type(exc).__name__, str(exc)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # A parent any user may traverse, so only the data dir's own modes keep others out.
    parent = Path(tempfile.mkdtemp(prefix="strata-auth-"))
    os.chmod(parent, 0o755)  # noqa: S103  world-traversable on purpose: the data dir's own modes are under test
    running = Stack(load_settings(None, data_dir=parent / "data", milvus={"port": free_port()}), say=lambda _: None)
    running.ensure_milvus()
    pid = running.milvus_pid()
    assert pid is not None
    try:
        yield running
    finally:
        stop_process_group(pid)
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="module")
def collection(stack: Stack) -> str:
    """A collection holding one row, written by a caller with the token."""
    store, names = open_store(stack.settings)
    row = Record("t1/s/1", "t1", "s", "turn", 1, SECRET_TEXT, {}, np.zeros(names.dim, np.float32))
    store.upsert(names.episodic, [row])
    assert [r.text for r in store.get(names.episodic, tenant="t1", pks=["t1/s/1"])] == [SECRET_TEXT]
    return names.episodic


def _call(stack: Stack, collection: str, token: str, *, user: str | None = None) -> dict[str, list[str]]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    args = [str(stack.settings.milvus.port), token, collection, str(stack.data_dir)]
    if user is None:
        command = [sys.executable, "-c", CLIENT, *args]
    else:  # the venv's interpreter lives under /root; the system one of the same version reads its packages
        python = shutil.which(
            f"python{sys.version_info.major}.{sys.version_info.minor}", path="/usr/bin:/usr/local/bin"
        )
        if python is None:
            pytest.skip("no system python of this version for the second user")
        import pymilvus

        packages = Path(pymilvus.__file__).parents[1]
        if not _world_readable(packages):  # a checkout in an owner-only dir (mktemp -d)
            pytest.skip(f"another user cannot read {packages}, where this venv's packages are")
        command = ["runuser", "-u", user, "--", python, "-c", CLIENT, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd="/", check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _world_readable(path: Path) -> bool:
    """Whether any user may read ``path``: it and every directory above it open to others."""
    if not path.exists():
        return True
    dirs = [path, *path.parents] if path.is_dir() else list(path.parents)
    return all(d.stat().st_mode & 0o005 == 0o005 for d in dirs)


def _assert_refused(result: dict[str, list[str]]) -> None:
    for call in ("list collections", "query", "insert"):
        code, detail = result[call]
        assert code == "UNAUTHENTICATED" and "milvus-token" in detail, (call, result[call])
    assert result["pymilvus"][0] != "OK" and "UNAUTHENTICATED" in result["pymilvus"][1], result["pymilvus"]
    assert SECRET_TEXT not in json.dumps(result)


def test_the_token_file_is_owner_only(stack: Stack) -> None:
    token_file = stack.data_dir / TOKEN_FILE
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert oct(stack.data_dir.stat().st_mode & 0o777) == "0o700"
    assert token_file.read_text().strip() == stack.settings.milvus.token
    # The token is not on the server's command line, which every local user can read.
    pid = stack.milvus_pid()
    assert stack.settings.milvus.token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_a_process_without_the_token_can_neither_read_nor_write(stack: Stack, collection: str) -> None:
    _assert_refused(_call(stack, collection, ""))
    _assert_refused(_call(stack, collection, secrets.token_hex(32)))
    _assert_refused(_call(stack, collection, stack.settings.milvus.token[:-1]))  # one character short


def test_a_process_with_the_token_reads_and_writes(stack: Stack, collection: str) -> None:
    result = _call(stack, collection, stack.settings.milvus.token)
    assert result["list collections"][0] == "OK" and collection in result["list collections"][1]
    assert result["query"][0] == "OK" and SECRET_TEXT in result["query"][1]
    assert result["insert"][0] == "OK"  # the server answered (an insert of no fields is its own error)
    assert result["pymilvus"][0] == "OK" and collection in result["pymilvus"][1]


def test_strata_says_the_token_was_refused(stack: Stack, collection: str) -> None:
    for token in ("", "wrong"):
        store = MilvusRecordStore(stack.settings.milvus.address, token=token, timeout_s=3)
        with pytest.raises(StoreUnavailable, match="refused the token"):
            store.ping()


@pytest.fixture
def other_user() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("creating a second Unix user needs root")
    if shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("useradd and runuser are needed to act as a second Unix user")
    name = "strata" + secrets.token_hex(4)
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
    with pytest.raises(KeyError):
        pwd.getpwnam(name)


def test_another_unix_user_reaches_neither_the_files_nor_the_store(
    stack: Stack, collection: str, other_user: str
) -> None:
    result: dict[str, Any] = _call(stack, collection, "", user=other_user)
    _assert_refused(result)
    assert result["token file"][0] == "PermissionError", result["token file"]
    assert result["data dir"][0] == "PermissionError", result["data dir"]
