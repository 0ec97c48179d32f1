"""``strata``'s parser: a command that is not ``eval`` or ``bench`` does not build their parsers,
which import the benchmark modules (half a second of every ``strata keys`` call before)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from strata_cli.main import _COMMANDS, _command_of, main


def test_the_command_list_is_every_command_the_full_parser_has(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.search(r"\{([a-z,]+)\}", capsys.readouterr().out)
    assert listed is not None and tuple(listed.group(1).split(",")) == _COMMANDS


@pytest.mark.parametrize(("argv", "command"), [
    (["keys", "create", "acme", "--read-only"], "keys"),
    (["--config", "x.yaml", "keys", "list"], "keys"),
    (["--config=x.yaml", "bench", "--quick"], "bench"),
    (["eval", "retrieval", "--dataset", "d.json"], "eval"),
    (["--help"], None),
    ([], None),
    (["no-such-command"], None),  # the full parser then names every choice
])
def test_the_command_is_found_before_the_parser_is_built(argv: list[str], command: str | None) -> None:
    assert _command_of(argv) == command


def test_keys_does_not_import_the_benchmarks() -> None:
    code = ("import sys\nfrom strata_cli.main import main\ntry:\n    main(['keys', 'create', '--help'])\n"
            "except SystemExit:\n    pass\nprint(sorted(m for m in sys.modules if m.startswith('strata_bench')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_record_the_command_was_given_is_not_called_the_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from strata.schema import TurnIn
    from strata_cli import main as cli

    def status(_: object) -> int:
        TurnIn.model_validate({"user": "x" * 1_000_001})
        return 0

    monkeypatch.setattr(cli, "_cmd_status", status)
    assert cli.main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("strata status: invalid TurnIn: user: String should have at most") and "settings" not in err
