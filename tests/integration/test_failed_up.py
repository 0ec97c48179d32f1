"""A `strata up` that fails part-way stops what it started: no Ray or milvus-lite is left
running that `strata down` could not find (stack.json is only written once all is up).

Real `ray start` and real milvus-lite; the failure is a deploy that raises, in a process of
its own (so its Ray client is not this test process's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from strata.config import load_settings
from strata_cli.processes import ray_client_servers
from strata_cli.stack import Stack
from tests.conftest import free_port, port_open

ROOT = Path(__file__).resolve().parents[2]


def _processes_naming(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(pid))
            except OSError:
                continue
    return found


def test_up_that_fails_after_starting_ray_and_milvus_stops_them(tmp_path: Path) -> None:
    ports = {"serve": free_port(), "milvus": free_port(), "gcs": free_port()}
    script = textwrap.dedent(f"""
        from pathlib import Path
        from strata.config import load_settings
        from strata_cli.errors import StackError
        from strata_cli.stack import Stack

        def deploy(self):
            raise StackError("the deploy failed (on purpose, in a test)")

        Stack.deploy = deploy
        settings = load_settings(None, data_dir=Path({str(tmp_path)!r}), serve={{"port": {ports['serve']}}},
                                 milvus={{"port": {ports['milvus']}}}, ray={{"gcs_port": {ports['gcs']}}})
        try:
            Stack(settings, say=print).up()
        except StackError as exc:
            print("up failed:", exc)
        else:
            raise SystemExit("up did not fail")
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "up failed: the deploy failed" in done.stdout
    assert "starting Ray head" in done.stdout and "starting milvus-lite" in done.stdout  # both were started ...
    assert "stopped Ray" in done.stdout and "stopped milvus-lite" in done.stdout  # ... and stopped again

    stack = Stack(load_settings(None, data_dir=tmp_path, milvus={"port": ports["milvus"]},
                                ray={"gcs_port": ports["gcs"]}), say=lambda _: None)
    assert not port_open(ports["gcs"]) and not port_open(ports["milvus"])
    assert _processes_naming(str(stack.ray_temp_dir)) == []
    assert _processes_naming(str(stack.haproxy_dir)) == []
    assert ray_client_servers(ports["gcs"]) == set()  # names neither: it was left running
    assert stack.milvus_pid() is None
    assert not (tmp_path / "stack.json").exists()
