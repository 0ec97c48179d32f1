"""The installed package names are stated once, in pyproject.toml's [tool.setuptools.package-dir].

Two places cannot read that table and must agree with it: ruff's isort `known-first-party` (a list
in pyproject.toml itself) and the packages `.ci/lint` type-checks. A folder added to package-dir
but missing from either would be sorted as third-party or silently skipped by mypy.
"""

from __future__ import annotations

import subprocess

from tests.layout import ROOT, installed_folders, package_dir, pyproject


def _installed_names() -> set[str]:
    return set(installed_folders())


def test_package_dir_folders_exist() -> None:
    missing = {name: folder for name, folder in package_dir().items() if not (ROOT / folder / "__init__.py").is_file()}
    assert not missing


def test_isort_first_party_is_every_installed_name() -> None:
    known = set(pyproject()["tool"]["ruff"]["lint"]["isort"]["known-first-party"])
    assert known == _installed_names()


def test_ci_lint_checks_every_installed_name_and_the_tests() -> None:
    listed = subprocess.run(
        [str(ROOT / ".ci" / "lint"), "--list"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    assert set(listed) == _installed_names() | {"tests"}
