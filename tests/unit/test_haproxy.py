"""``strata-haproxy`` (cli/haproxy.py) on the config Ray Serve 2.60 itself writes for HAProxy,
checked by the HAProxy binary ``ray[serve]`` installs; and that HAProxy stops when the process
that started it dies."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata_cli.haproxy import harden, real_haproxy
from tests.conftest import free_port

COMMAND = Path(sys.executable).with_name("strata-haproxy")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """HAProxy takes socket paths of at most 97 characters: not under pytest's long tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="hap-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _serve_config(directory: Path, *, port: int) -> Path:
    """The config Serve's HAProxy manager writes (its own code, no replica behind it yet)."""
    from ray.serve._private.haproxy import HAProxyApi, HAProxyConfig
    from ray.serve.config import HTTPOptions

    api = HAProxyApi(
        cfg=HAProxyConfig(
            http_options=HTTPOptions(host="127.0.0.1", port=port),
            socket_path=str(directory / "admin.sock"),
            server_state_base=str(directory),
            server_state_file=str(directory / "state"),
            metrics_socket_path=str(directory / "metrics.sock"),
            stats_port=free_port(),
            metrics_port=free_port(),
        ),
        config_file_path=str(directory / "haproxy.cfg"),
    )
    api._generate_config_file_internal()
    return directory / "haproxy.cfg"


def _binds(config: str) -> list[str]:
    return [line.split()[1] for line in config.splitlines() if line.split()[:1] == ["bind"]]


def _section(config: str, name: str) -> list[str]:
    lines, inside = [], False
    for line in config.splitlines():
        if line and not line[0].isspace():
            inside = line.strip() == name
        elif inside:
            lines.append(line.strip())
    return lines


def test_serves_config_gets_its_side_doors_on_loopback_and_the_clients_address(short_dir: Path) -> None:
    written = _serve_config(short_dir, port=free_port()).read_text()
    # What the wrapper is for: Serve's template binds these on every interface.
    assert any(b.startswith(("*:", ":")) for b in _binds(written)) and "forwardfor" not in written

    hardened = harden(written)
    assert _binds(hardened) and all(b.startswith("127.0.0.1:") for b in _binds(hardened)), _binds(hardened)
    assert [p.rpartition(":")[2] for p in _binds(hardened)] == [p.rpartition(":")[2] for p in _binds(written)]
    assert "option forwardfor" in _section(hardened, "defaults")
    checked = short_dir / "checked.cfg"
    checked.write_text(hardened)
    done = subprocess.run([real_haproxy(), "-c", "-f", str(checked)], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_config_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="defaults"):
        harden("global\n    maxconn 10\nlisten stats\n  bind *:8404\n")


def test_the_command_runs_haproxy_on_a_hardened_copy_only_its_owner_reads(short_dir: Path) -> None:
    source = _serve_config(short_dir, port=free_port())
    done = subprocess.run([str(COMMAND), "-c", "-f", str(source)], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    copy = source.with_name("haproxy.cfg.strata")
    assert copy.read_text() == harden(source.read_text())
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600


def _state(pid: int) -> str | None:
    """The process's state letter, None once it is gone (a zombie counts as gone: ``Z``)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_haproxy_stops_when_the_process_that_started_it_dies(short_dir: Path) -> None:
    """Serve starts HAProxy from a Ray worker; killed with its raylet, the worker would leave
    HAProxy holding the serving port with nothing behind it."""
    port = free_port()
    source = _serve_config(short_dir, port=port)
    launcher = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([{str(COMMAND)!r}, '-db', '-f', {str(source)!r}])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # HAProxy listens: it is running, not starting
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        else:
            raise AssertionError(f"HAProxy did not listen on {port}")
        assert Path(f"/proc/{pid}/exe").resolve() == Path(real_haproxy()).resolve()  # exec'd: the same pid

        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _state(pid) in (None, "Z"), f"HAProxy {pid} outlived the process that started it"
    finally:
        if _state(pid) not in (None, "Z"):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
