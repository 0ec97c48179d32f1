"""The stack manager's refusals, which need no Ray and no Milvus."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from strata.config import load_settings
from strata_cli.stack import Stack, StackError


def test_up_refuses_a_milvus_port_held_by_another_program(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        stack = Stack(load_settings(None, data_dir=tmp_path, milvus={"port": port}), say=lambda _: None)
        with pytest.raises(StackError, match=f"port {port} is in use"):
            stack.up()
    assert not (tmp_path / "milvus.pid").exists()


def test_a_stale_pidfile_is_not_taken_for_a_running_server(tmp_path: Path) -> None:
    (tmp_path / "milvus.pid").write_text("999999999")
    stack = Stack(load_settings(None, data_dir=tmp_path), say=lambda _: None)
    assert stack.milvus_pid() is None
    assert stack.status()["milvus"] == "not running"
