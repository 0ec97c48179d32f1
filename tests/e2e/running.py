"""The stack as a user starts it, for the e2e modules: each starts its own with
:func:`started` (one Ray and one milvus-lite per module, on free ports)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

STRATA = [sys.executable, "-m", "strata_cli.main"]
#: The shared stack's ``auth.admin_key`` and ``serve.max_body_bytes`` (tests/e2e/conftest.py
#: ``agents_stack``): a 413 there costs a 1 MiB body, not 128 MiB.
SHARED_ADMIN_KEY = "sk-strata-configured-" + uuid.uuid4().hex
SHARED_BODY_LIMIT = 1 << 20


class Running:
    def __init__(
        self, data_dir: Path, port: int, env: dict[str, str], key: str = "", up_args: tuple[str, ...] = ()
    ) -> None:
        self.data_dir, self.port, self.env, self.key = data_dir, port, env, key
        #: What ``strata up`` was given beyond the data dir and port (``--milvus-uri`` ...).
        self.up_args = up_args
        self.url = f"http://127.0.0.1:{port}"
        self._admin_key = ""

    @property
    def ray_dir(self) -> Path:
        """The stack's Ray temp dir (``strata_cli.stack.Stack.ray_temp_dir`` for its GCS port)."""
        from strata.config import load_settings
        from strata_cli.stack import Stack

        settings = load_settings(None, data_dir=self.data_dir, ray={"gcs_port": int(self.env["STRATA_RAY__GCS_PORT"])})
        return Stack(settings, say=lambda _: None).ray_temp_dir

    @property
    def haproxy_dir(self) -> Path:
        """HAProxy's files (``strata_cli.stack.Stack.haproxy_dir``)."""
        return self.ray_dir.with_name(f"h{self.env['STRATA_RAY__GCS_PORT']}")

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``strata <args>`` against this stack's data dir (and port, for up and demo)."""
        extra = ["--data-dir", str(self.data_dir)]
        if args[0] in ("up", "demo"):
            extra += ["--port", str(self.port)]
        return subprocess.run(
            [*STRATA, *args, *extra], check=False, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def new_key(self, *args: str) -> str:
        """The key ``strata keys <args>`` would print. ``create`` goes through ``POST
        /v1/admin/keys`` (both call the same ``KeyStore.issue``), with an admin key made once
        by the command: a ``strata`` process costs 1-2 s, the route milliseconds, and the
        suites make ~70 keys. Anything else (``create-admin``, ``rotate``) runs the command."""
        if args and args[0] == "create":
            return self._created(_create_body(args[1:]))
        done = self.cli("keys", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        key = done.stdout.strip().splitlines()[-1]
        assert key.startswith("sk-strata-") and " " not in key
        return key

    def _created(self, body: dict[str, Any]) -> str:
        if not self._admin_key:
            self._admin_key = self.new_key("create-admin", "--name", "tests")
        r = self.call("POST", "/v1/admin/keys", self._admin_key, body)
        assert r.status_code == 201, r.text
        key: str = r.json()["key"]
        assert key.startswith("sk-strata-") and " " not in key
        return key

    def run_example(self, script: str, tenant: str) -> str:
        """``python examples/<script>`` against this stack, as a fresh tenant's key (STRATA_URL,
        STRATA_API_KEY); its output, once it exited 0."""
        env = {**os.environ, "STRATA_URL": self.url, "STRATA_API_KEY": self.new_key("create", tenant)}
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / script)], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def post(self, path: str, body: Any = None, *, key: str | None = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key or self.key}", **kw.pop("headers", {})}
        return httpx.post(self.url + path, json=body, headers=headers, timeout=30, **kw)

    def call(self, method: str, path: str, key: str | None, body: Any = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.request(method, self.url + path, json=body, headers=headers, timeout=30, **kw)


def _create_body(args: tuple[str, ...]) -> dict[str, Any]:
    """``strata keys create``'s arguments, read by the command's own parser, as the body of
    ``POST /v1/admin/keys``."""
    from strata_cli.keys import add_arguments

    parser = argparse.ArgumentParser(prog="strata keys")
    add_arguments(parser)
    parsed = parser.parse_args(["create", *args])
    body = {"tenant": parsed.tenant, "read_only": parsed.read_only, "session_id": parsed.session,
            "shared": parsed.shared, "name": parsed.name}
    return {name: value for name, value in body.items() if value is not None}


@contextmanager
def started(
    tmp_path_factory: pytest.TempPathFactory, name: str, *, up_args: tuple[str, ...] = (), **env: str
) -> Iterator[Running]:
    """``strata up [up_args]`` on free ports in a fresh data dir, ``strata down`` afterwards."""
    data_dir = tmp_path_factory.mktemp(name) / "data"
    environ = {**os.environ, "STRATA_MILVUS__PORT": str(free_port()), "STRATA_RAY__GCS_PORT": str(free_port()), **env}
    running = Running(data_dir, free_port(), environ, up_args=up_args)
    up = running.cli("up", *up_args)
    assert up.returncode == 0, up.stdout + up.stderr
    running.key = up.stdout.strip().splitlines()[-1]
    try:
        yield running
    finally:
        from strata_actors.router import shutdown_ray

        shutdown_ray()  # a test may have joined the stack's Ray (the in-cluster client)
        down = running.cli("down")
        assert down.returncode == 0, down.stdout + down.stderr
