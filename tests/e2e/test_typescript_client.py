"""The TypeScript client (clients/typescript) as its users run it, against the shared running
stack: `npm ci`, its types checked against the OpenAPI document the stack serves, `npm test`
(its unit tests and its live tests) and the example agent loop, as a fresh tenant's key.

Node and npm are part of the test environment: without them this fails rather than skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.e2e.running import SHARED_ADMIN_KEY, Running
from tests.layout import ROOT

CLIENT = ROOT / "clients" / "typescript"


def _npm(*args: str, env: dict[str, str] | None = None, timeout_s: float = 240) -> str:
    """``npm <args>`` in clients/typescript; its output, once it exited 0."""
    npm = shutil.which("npm")
    assert npm and shutil.which("node"), "node and npm (Node 18+) must be on PATH for the TypeScript client's tests"
    done = subprocess.run(
        [npm, *args],
        cwd=CLIENT,
        env={**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"npm {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def stack_env(agents_stack: Running) -> dict[str, str]:
    """The locked dependencies installed, and the variables the client's tests and example read
    (the stack's configured admin key for the live test of the admin calls)."""
    _npm("ci", "--prefer-offline", "--no-audit")
    return {
        "STRATA_URL": agents_stack.url,
        "STRATA_API_KEY": agents_stack.new_key("create", "ts-client"),
        "STRATA_ADMIN_KEY": SHARED_ADMIN_KEY,
    }


def test_the_generated_types_match_the_api_the_stack_serves(stack_env: dict[str, str]) -> None:
    out = _npm("run", "check-types", env=stack_env)
    assert "src/schema.ts matches openapi.json" in out
    assert f"openapi.json matches {stack_env['STRATA_URL']}/openapi.json" in out


def test_the_sources_are_formatted(stack_env: dict[str, str]) -> None:
    _npm("run", "lint")


def test_npm_test_passes_against_the_stack(stack_env: dict[str, str]) -> None:
    out = _npm("test", env=stack_env)
    assert "# fail 0" in out and "# skipped 0" in out
    assert "ok 1 - live:" in out  # the live tests ran, not only the unit ones


def test_npm_test_fails_without_a_stack_to_run_against(stack_env: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_URL", "STRATA_API_KEY", "STRATA_ADMIN_KEY")}
    done = subprocess.run(
        [shutil.which("npm") or "npm", "test"],
        cwd=CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "STRATA_URL" in done.stderr, done.stdout + done.stderr


def test_the_example_agent_loop_runs(stack_env: dict[str, str]) -> None:
    out = _npm("run", "example", env=stack_env)
    assert "peanut" in out and "recorded 3 turns" in out, out
