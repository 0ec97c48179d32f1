"""The groups pytest-xdist workers take whole (tests/conftest.py ``worker_group``): what must start
once per run (the Milvus server, whose etcd ports are fixed; the shared stack) stays on one worker."""

from __future__ import annotations

from tests.conftest import worker_group


def test_every_server_variant_is_in_the_milvus_server_group_whatever_its_module() -> None:
    assert worker_group("tests/integration/test_ttl.py::test_sweeper_purges_the_store_without_any_call[server]") \
        == "milvus-server"
    assert worker_group("tests/integration/test_actors.py::test_llm[server-hanging]") == "milvus-server"
    assert worker_group("tests/e2e/test_server_store.py::test_an_idempotent_retry_is_answered_once") == "milvus-server"


def test_modules_on_the_shared_stack_are_one_group() -> None:
    assert worker_group("tests/e2e/test_mcp.py::test_every_tool_over_stdio") == "agents-stack"
    assert worker_group("tests/e2e/test_keys.py::test_rotate_retires_the_old_key") == "agents-stack"


def test_anything_else_is_grouped_by_its_module() -> None:
    assert worker_group("tests/integration/test_ttl.py::test_sweeper_purges_the_store_without_any_call[lite]") \
        == "tests/integration/test_ttl.py"
    actors = "tests/integration/test_actors.py"
    assert worker_group(f"{actors}::test_llm[lite-hanging]") == actors
    assert worker_group("tests/unit/test_scopes.py::test_x") == "tests/unit/test_scopes.py"
    # A unit module that names the fixtures (this one) or has a "server" parameter uses neither.
    assert worker_group("tests/unit/test_worker_groups.py::test_x") == "tests/unit/test_worker_groups.py"
    assert worker_group("tests/unit/test_store_options.py::test_x[server]") == "tests/unit/test_store_options.py"
    assert worker_group("tests/e2e/test_stack.py::test_up_recovers_after_ray_is_killed") == "tests/e2e/test_stack.py"
