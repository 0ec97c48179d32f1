"""``strata-haproxy`` (cli/haproxy.py) on the config Ray Serve 2.60 itself writes for HAProxy,
checked by the HAProxy binary ``ray[serve]`` installs; and that HAProxy stops when the process
that started it dies."""

from __future__ import annotations

import http.client
import http.server
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from strata_cli.haproxy import FAILED_AUTH_HEADER, GOOD_KEY_HEADER, SIDE_DOORS, door_rules, harden, real_haproxy
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
    done = subprocess.run(
        [real_haproxy(), "-c", "-f", str(checked)], check=False, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_config_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="defaults"):
        harden("global\n    maxconn 10\nlisten stats\n  bind *:8404\n")


def test_the_command_runs_haproxy_on_a_hardened_copy_only_its_owner_reads(short_dir: Path) -> None:
    source = _serve_config(short_dir, port=free_port())
    done = subprocess.run(
        [str(COMMAND), "-c", "-f", str(source)], check=False, capture_output=True, text=True, timeout=30
    )
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


def test_the_door_rules_go_into_the_client_frontend_only_and_haproxy_accepts_them(short_dir: Path) -> None:
    source = _serve_config(short_dir, port=free_port())
    hardened = harden(source.read_text(), failed_auth_limit=40)
    assert door_rules(40)[1].strip() in _section(hardened, "frontend http_frontend")[:3]
    for side in SIDE_DOORS:
        assert not any("track-sc0" in line for line in _section(hardened, side))
    assert harden(source.read_text(), failed_auth_limit=0) == harden(source.read_text())
    checked = short_dir / "door.cfg"
    checked.write_text(hardened)
    done = subprocess.run(
        [real_haproxy(), "-c", "-f", str(checked)], check=False, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr


class _Api(http.server.BaseHTTPRequestHandler):
    """Answers as the API's Authenticate does: 200 marked good for a good key, else 401 marked
    failed; ``revoked`` is good until revoked."""

    seen: ClassVar[list[str]] = []
    good: ClassVar[set[str]] = {"Bearer good", "Bearer revoked"}

    def do_GET(self) -> None:
        _Api.seen.append(self.headers.get("X-Forwarded-For", ""))
        if self.path.startswith("/-/"):
            self.send_response(200)
        elif self.headers.get("Authorization") in _Api.good:
            self.send_response(200)
            self.send_header(GOOD_KEY_HEADER, "1")
        else:
            self.send_response(401)
            self.send_header(FAILED_AUTH_HEADER, "1")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_an_address_that_floods_wrong_keys_is_turned_away_at_the_door_but_its_good_keys_pass(short_dir: Path) -> None:
    """Real HAProxy on a hardened config, in front of a server that answers as the API does.
    Past the limit, the flooding address gets HAProxy's own 429 (the server sees none of those
    requests); a key the server answered as good still passes from there until it is answered
    as wrong; Serve's own paths pass; another address is served; no client sees the marks."""
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = free_port()
    config = short_dir / "door.cfg"
    config.write_text(harden(
        "defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n"
        f"frontend http_frontend\n    bind 127.0.0.1:{port}\n    default_backend api\n"
        f"backend api\n    server api 127.0.0.1:{backend.server_address[1]}\n",
        failed_auth_limit=10,
    ))
    proxy = subprocess.Popen(
        [real_haproxy(), "-db", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )

    def get(source: str, path: str, key: str) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
        connection.request("GET", path, headers={"Authorization": f"Bearer {key}"})
        answer = connection.getresponse()
        answer.read()
        connection.close()
        return answer

    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and proxy.poll() is None, "HAProxy did not listen"
            time.sleep(0.05)
        assert get("127.0.0.2", "/v1/documents", "good").status == 200
        assert get("127.0.0.2", "/v1/documents", "revoked").status == 200
        flood = [get("127.0.0.2", "/v1/documents", f"wrong-{n}") for n in range(30)]
        assert [a.status for a in flood] == [401] * 11 + [429] * 19  # the 12th sees 11 > 10
        assert _Api.seen.count("127.0.0.2") == 2 + 11
        refused = flood[-1]
        assert refused.getheader("Retry-After") == "10"
        assert refused.getheader("Content-Type") == "application/json"
        assert get("127.0.0.2", "/v1/documents", "wrong-0").status == 429  # a wrong key seen before too
        good = get("127.0.0.2", "/v1/documents", "good")
        assert good.status == 200  # the good client behind the flood's address
        _Api.good.discard("Bearer revoked")
        assert get("127.0.0.2", "/v1/documents", "revoked").status == 401  # its exemption ends here
        assert get("127.0.0.2", "/v1/documents", "revoked").status == 429
        assert get("127.0.0.2", "/-/healthz", "wrong").status == 200
        assert get("127.0.0.1", "/v1/documents", "wrong").status == 401
        assert all(a.getheader(FAILED_AUTH_HEADER) is None and a.getheader(GOOD_KEY_HEADER) is None
                   for a in [*flood, good])
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        backend.shutdown()
