"""``--milvus-uri`` / ``--milvus-token-file``: a Milvus server for ``up``, ``demo`` and ``bench``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from strata.config import load_settings
from strata_cli.options import add_store_arguments, store_overrides


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_store_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_token_comes_from_its_file_and_reaches_the_settings(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("root:Milvus\n")
    overrides = store_overrides(parse("--milvus-uri", "http://10.0.0.5:19530", "--milvus-token-file", str(token)))
    assert overrides == {"milvus": {"uri": "http://10.0.0.5:19530", "token": "root:Milvus"}}
    m = load_settings(None, **overrides).milvus
    assert (m.address, m.token) == ("http://10.0.0.5:19530", "root:Milvus")
    assert store_overrides(parse()) == {}


@pytest.mark.parametrize(("argv", "says"), [
    (("--milvus-uri", "http://h:19530"), "needs --milvus-token-file"),
    (("--milvus-token-file", "t"), "needs --milvus-uri"),
    (("--milvus-uri", "http://h:19530", "--milvus-token-file", "/nonexistent/token"), "No such file"),
])
def test_a_missing_or_unreadable_token_is_said_without_a_traceback(argv: tuple[str, ...], says: str) -> None:
    with pytest.raises(SystemExit, match=says):
        store_overrides(parse(*argv))


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    with pytest.raises(SystemExit, match="is empty"):
        store_overrides(parse("--milvus-uri", "http://h:19530", "--milvus-token-file", str(tmp_path / "token")))


def test_up_demo_and_bench_take_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    from strata_cli.main import main

    for command in (["up"], ["demo"], ["bench"]):
        with pytest.raises(SystemExit) as done:
            main([*command, "--help"])
        assert done.value.code == 0
        assert "--milvus-token-file" in capsys.readouterr().out
