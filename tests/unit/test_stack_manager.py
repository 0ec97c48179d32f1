"""The stack manager's choices and refusals, which need no Ray and no Milvus."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import strata_cli.ports as ports_module
from strata.config import StrataSettings, load_settings
from strata_cli import processes
from strata_cli.errors import StackError
from strata_cli.private_files import make_owner_only, owner_only_dir
from strata_cli.stack import Stack
from strata_cli.status import stack_status
from tests.conftest import free_port


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
    assert stack_status(stack)["milvus"] == "not running"


def _settings(data_dir: Path, **overrides: object) -> StrataSettings:
    return load_settings(None, data_dir=data_dir, **overrides)


def _record(stack: Stack) -> None:
    """What `up` writes once everything answers (the part the port choice reads back)."""
    (stack.data_dir / "stack.json").write_text(
        json.dumps({"serve_port": stack.settings.serve.port, "settings": stack.settings.to_dict()})
    )


def test_two_data_dirs_get_distinct_ports_kept_while_they_run(tmp_path: Path) -> None:
    first = Stack(_settings(tmp_path / "a"), say=lambda _: None)
    second = Stack(_settings(tmp_path / "b"), say=lambda _: None)
    listening: list[socket.socket] = []
    for stack in (first, second):
        stack.data_dir.mkdir()
        stack.plan_ports()
        _record(stack)
        own = (stack.settings.milvus.port, stack.settings.ray.gcs_port)
        listening.extend(socket.create_server(("127.0.0.1", port)) for port in own)  # as its servers would
    for sock in listening:
        sock.close()
    ports = [(s.settings.milvus.port, s.settings.ray.gcs_port) for s in (first, second)]
    assert len({p for pair in ports for p in pair}) == 4, ports
    assert first.ray_temp_dir != second.ray_temp_dir
    # `up` again with the same data dir (after a crash, or twice): the recorded ports.
    again = Stack(_settings(tmp_path / "a"), say=lambda _: None)
    again.plan_ports()
    assert (again.settings.milvus.port, again.settings.ray.gcs_port) == ports[0]
    assert again.settings.serve.port == first.settings.serve.port


def test_explicit_ports_win_over_recorded_and_free_ones(tmp_path: Path) -> None:
    stack = Stack(
        _settings(tmp_path, milvus={"port": 23456}, ray={"gcs_port": 23457}, serve={"port": 23458}), say=lambda _: None
    )
    (tmp_path / "stack.json").write_text(
        json.dumps({"serve_port": 1111, "settings": stack.settings.to_dict() | {"milvus": {"port": 1112}}})
    )
    stack.plan_ports()
    assert (stack.settings.milvus.port, stack.settings.ray.gcs_port, stack.settings.serve.port) == (23456, 23457, 23458)


def test_a_taken_default_http_port_moves_to_a_free_one(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        # The port the defaults name, as if 8000 were taken: ServeSettings' default is what counts.
        defaults = _settings(tmp_path)
        stack = Stack(
            defaults.model_copy(
                update={
                    "serve": defaults.serve.model_construct(
                        **{**defaults.serve.model_dump(), "port": taken}, _fields_set=set()
                    )
                }
            ),
            say=lambda _: None,
        )
        stack.plan_ports()
        assert stack.settings.serve.port != taken
        assert stack.url == f"http://127.0.0.1:{stack.settings.serve.port}"


def test_down_never_stops_a_process_that_reused_the_milvus_pid(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    stack = Stack(_settings(data_dir, ray={"gcs_port": free_port()}), say=lambda _: None)
    # One process that names nothing of ours, one that names the data dir but is not the launcher.
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    lookalike = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", str(data_dir / "milvus")], start_new_session=True
    )
    try:
        for victim in (unrelated, lookalike):
            (data_dir / "milvus.pid").write_text(str(victim.pid))
            assert stack.milvus_pid() is None
            stack.down()
            assert victim.poll() is None, f"down stopped pid {victim.pid}, which is not its server"
    finally:
        for process in (unrelated, lookalike):
            process.kill()
            process.wait(10)


def test_the_launcher_of_this_data_dir_is_recognised(tmp_path: Path) -> None:
    """The check above must not refuse the real thing: a process with the launcher's
    command line for this data dir (here it only sleeps) is taken for the server."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    stack = Stack(_settings(data_dir), say=lambda _: None)
    script = "import time; time.sleep(120)"
    fake = subprocess.Popen(
        [
            sys.executable,
            "-c",
            script,
            "-m",
            "strata.store.milvus_lite",
            "server",
            "--data-dir",
            str(data_dir / "milvus"),
        ],
        start_new_session=True,
    )
    try:
        # Popen returns once the child's exec has begun, before the kernel has set the new
        # command line (/proc/PID/cmdline reads empty in between): wait for it.
        launcher = str(data_dir / "milvus").encode()
        deadline = time.monotonic() + 10
        while launcher not in Path(f"/proc/{fake.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        (data_dir / "milvus.pid").write_text(str(fake.pid))
        assert stack.milvus_pid() == fake.pid
        other = Stack(_settings(tmp_path / "other"), say=lambda _: None)
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "milvus.pid").write_text(str(fake.pid))
        assert other.milvus_pid() is None  # another data dir's server
    finally:
        fake.kill()
        fake.wait(10)


def test_owner_only_dir_tightens_ours_and_refuses_another_users(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    (mine / "log").write_text("x")
    os.chmod(mine / "log", 0o644)
    owner_only_dir(mine)
    make_owner_only(mine)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    assert stat.S_IMODE((mine / "log").stat().st_mode) == 0o600
    link = tmp_path / "link"
    link.symlink_to(mine)
    with pytest.raises(StackError, match="not a directory"):
        owner_only_dir(link, follow_symlinks=False)
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(StackError, match="belongs to another user"):
        owner_only_dir(theirs)
    with pytest.raises(StackError, match="belongs to another user"):
        Stack(_settings(theirs), say=lambda _: None).up()


def test_a_remote_ray_cluster_is_joined_with_its_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    token = tmp_path / "token"
    token.write_text("t" * 32)
    remote = Stack(
        _settings(tmp_path, ray={"address": "10.0.0.5:6379", "auth_token_file": str(token)}), say=lambda _: None
    )
    assert remote.ray_auth_env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    missing = Stack(
        _settings(tmp_path, ray={"address": "10.0.0.5:6379", "auth_token_file": str(tmp_path / "no")}),
        say=lambda _: None,
    )
    with pytest.raises(StackError, match="not a readable file"):
        missing.ray_auth_env()
    plain = Stack(_settings(tmp_path, ray={"address": "10.0.0.5:6379"}), say=lambda _: None)
    assert plain.ray_auth_env() == {}  # a cluster without token auth, as before
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    assert plain.ray_auth_env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s" * 32)
    assert plain.ray_auth_env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "s" * 32}


def test_demo_says_last_that_the_stack_is_still_up_and_how_to_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import strata_cli.demo
    from strata_cli import main as cli

    data_dir = tmp_path / "my data"
    data_dir.mkdir()
    (data_dir / "dev-api-key").write_text("sk-strata-x\n")
    monkeypatch.setattr(Stack, "healthy", lambda self, timeout_s=5.0: True)  # as if `up` had run
    monkeypatch.setattr(strata_cli.demo, "run_demo", lambda url, key: None)  # the HTTP part
    umask = os.umask(0o022)
    try:
        assert cli.main(["demo", "--data-dir", str(data_dir), "--port", "8123"]) == 0
    finally:
        os.umask(umask)  # the command sets its process's umask
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"The stack is still up at http://127.0.0.1:8123; stop it with: strata down --data-dir '{data_dir}'"


def test_ports_chosen_together_are_distinct_and_avoid_the_taken_ones() -> None:
    from strata_cli.ports import QUIET_PORTS, free_ports

    for _ in range(50):
        first = free_ports(3)
        again = free_ports(3, taken=first)
        assert len(set(first)) == 3 and len(set(again)) == 3
        assert not set(first) & set(again)
        assert all(port in QUIET_PORTS for port in first + again)


def test_free_ports_come_from_outside_the_kernels_ephemeral_range_and_skip_bound_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel gives its ephemeral ports to every bind to port 0 and every outgoing
    connection: a port chosen there can be gone by the time a late server binds it."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    quiet = ports_module.QUIET_PORTS
    assert quiet.stop <= low or quiet.start > high
    window = next(  # ten neighbouring ports free here, to squat on seven of them
        range(start, start + 10) for start in range(quiet.start, quiet.stop - 10, 10)
        if all(_bindable(p) for p in range(start, start + 10))
    )
    monkeypatch.setattr(ports_module, "QUIET_PORTS", window)
    squatters = []
    try:
        for port in window[:7]:
            sock = socket.socket()
            squatters.append(sock)
            sock.bind(("127.0.0.1", port))  # bound on loopback only: still not free on every interface
        assert sorted(ports_module.free_ports(3)) == list(window[7:])
        with pytest.raises(StackError, match="fewer than 4 free ports"):
            ports_module.free_ports(4)
    finally:
        for sock in squatters:
            sock.close()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
            return True
        except OSError:
            return False


def test_down_reads_a_stack_recorded_by_a_version_with_settings_this_one_lacks(tmp_path: Path) -> None:
    """`down` finds what an `up` of another version started: a setting it does not know is left
    out (seen: "serve.trusted_proxies: Extra inputs are not permitted"); a bad value still fails."""
    stack = Stack(_settings(tmp_path, ray={"gcs_port": 45678}, milvus={"port": 45679}), say=lambda _: None)
    recorded = stack.settings.to_dict()
    recorded["serve"]["a_setting_from_elsewhere"] = True
    recorded["a_section_from_elsewhere"] = {"x": 1}
    (tmp_path / "stack.json").write_text(json.dumps({"serve_port": 8000, "settings": recorded}))
    found = Stack.recorded(tmp_path, say=lambda _: None)
    assert found is not None and found.ray_temp_dir == stack.ray_temp_dir
    assert found.settings.milvus.port == 45679

    recorded["milvus"]["port"] = "not a port"
    (tmp_path / "stack.json").write_text(json.dumps({"serve_port": 8000, "settings": recorded}))
    with pytest.raises(ValueError, match="port"):
        Stack.recorded(tmp_path, say=lambda _: None)


def test_ray_processes_are_stopped_before_the_gcs_server(tmp_path: Path) -> None:
    """A raylet terminated while its GCS is gone waits for it until the SIGKILL (15 s of
    ``strata down``): every other process of the stack is asked to stop first."""
    marker = tmp_path / "ray-1234"
    marker.mkdir()
    gcs_dir = tmp_path / "core" / "gcs"
    gcs_dir.mkdir(parents=True)
    gcs_server = gcs_dir / "gcs_server"
    gcs_server.write_text("")
    seen = tmp_path / "seen"
    gcs = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(gcs_server), f"--log_dir={marker}/logs"]
    )
    raylet_code = (
        "import os, signal, sys, time\n"
        "def stop(*_):\n"
        "    try:\n"
        "        os.kill(int(sys.argv[1]), 0); state = open(f'/proc/{sys.argv[1]}/stat').read().split()[2]\n"
        "    except ProcessLookupError:\n"
        "        state = 'gone'\n"
        "    open(sys.argv[2], 'w').write(state); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "open(sys.argv[2] + '.ready', 'w').close()\n"
        "time.sleep(60)\n"
    )
    raylet = subprocess.Popen([sys.executable, "-c", raylet_code, str(gcs.pid), str(seen), f"--store={marker}/sockets"])
    try:
        while not Path(str(seen) + ".ready").exists():
            assert raylet.poll() is None
            time.sleep(0.01)
        assert processes.stop_processes_naming(str(marker), timeout_s=10) == 2
        assert seen.read_text() not in ("gone", "Z")  # the GCS still ran when the raylet was told to stop
        assert raylet.wait(timeout=5) == 0 and gcs.wait(timeout=5) == -15  # both by SIGTERM, none killed
    finally:
        for process in (gcs, raylet):
            process.kill()
            process.wait()


def test_down_keeps_rays_logs_in_the_data_dir_and_removes_its_temporary_directories(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    stack = Stack(_settings(data_dir, ray={"gcs_port": free_port()}), say=lambda _: None)
    for earlier in (1, 2):  # an earlier run's logs give way to the last run's
        session = stack.ray_temp_dir / f"session_2026-12-05_0{earlier}"
        (session / "logs" / "serve").mkdir(parents=True)
        (session / "logs" / "serve" / "replica.log").write_text(f"run {earlier}")
        (session / "sockets").mkdir()
        latest = stack.ray_temp_dir / "session_latest"
        latest.unlink(missing_ok=True)
        latest.symlink_to(session)
        stack.haproxy_dir.mkdir(exist_ok=True)
        (stack.haproxy_dir / "haproxy.cfg").write_text("global")
        stack.down()
        assert (data_dir / "logs" / "ray" / "serve" / "replica.log").read_text() == f"run {earlier}"
        assert not stack.ray_temp_dir.exists() and not stack.haproxy_dir.exists()
    stack.down()  # nothing left to move: no error
    assert (data_dir / "logs" / "ray" / "serve" / "replica.log").read_text() == "run 2"
