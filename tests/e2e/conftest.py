"""Fixtures shared by the end-to-end modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.running import Running, started


@pytest.fixture(scope="session")
def agents_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One stack for the agent-facing tests (MCP, the framework adapters, the inspector), so
    they add one stack start to the suite, not one each. Each test works in a tenant of its
    own: ``agents_stack.new_key("create", "<tenant>")``."""
    with started(tmp_path_factory, "agents") as running:
        yield running
