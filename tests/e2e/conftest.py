"""Fixtures shared by the end-to-end modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import leave_shared_ray
from tests.e2e.running import SHARED_ADMIN_KEY, SHARED_BODY_LIMIT, Running, started


@pytest.fixture(scope="module", autouse=True)
def _off_the_shared_ray() -> None:
    """This process off the integration tier's local Ray: a test that joins a stack's Ray
    (the in-cluster client) must not find itself connected to another one."""
    leave_shared_ray()


@pytest.fixture(scope="session")
def agents_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One stack for every module that needs no settings of its own (MCP, the framework adapters,
    the inspector, fuzzing, isolation, scopes, keys), so they add one stack start to the suite,
    not one each (~35 s with its stop). Its settings are the defaults but for a configured admin
    key and a 1 MiB body limit (what tests/e2e/test_keys.py checks). Each test works in a tenant of its own
    (``agents_stack.new_key("create", "<tenant>")``); fuzzing and the isolation probe write to
    the dev key's tenant, ``demo``."""
    with started(tmp_path_factory, "agents", STRATA_AUTH__ADMIN_KEY=SHARED_ADMIN_KEY,
                 STRATA_SERVE__MAX_BODY_BYTES=str(SHARED_BODY_LIMIT)) as running:
        yield running
