"""Fixtures shared by the end-to-end modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.running import Running, started


@pytest.fixture(scope="session")
def agents_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One stack with the default settings for every module that needs nothing else (MCP, the
    framework adapters, the inspector, fuzzing, isolation, scopes), so they add one stack start
    to the suite, not one each (~35 s with its stop). Each test works in a tenant of its own
    (``agents_stack.new_key("create", "<tenant>")``); fuzzing and the isolation probe write to
    the dev key's tenant, ``demo``."""
    with started(tmp_path_factory, "agents") as running:
        yield running
