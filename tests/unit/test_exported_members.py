"""Each package's public surface is what its ``__all__`` says (after httpx's test of the same name).

A package's ``__init__`` re-exports the names a caller should use; a module lists in ``__all__``
exactly the functions and classes it defines for others. A name added without being exported, or
exported without existing, fails here. The package list in pyproject.toml must name every folder
that is a package, under the import name it installs as.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Folder -> the import name it installs as (pyproject.toml's package-dir).
FOLDERS = {"strata": "strata", "actors": "strata_actors", "serve_app": "strata_serve", "cli": "strata_cli",
           "bench": "strata_bench", "mcp_server": "strata_mcp", "adapters": "strata_adapters"}
#: Measurement scripts and `__main__` modules run when imported: they are not imported here.
SCRIPTS = "strata_bench.scripts"
#: What a package may hold besides its exports: `from __future__ import annotations`, and the
#: typing names a lazy ``__getattr__`` package (strata.store) needs.
_TYPING = {"annotations", "TYPE_CHECKING", "Any"}


def _packages_on_disk() -> set[str]:
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    return found


def _modules() -> list[str]:
    names = []
    for top in FOLDERS.values():
        package = importlib.import_module(top)
        names.append(top)
        names.extend(
            info.name
            for info in pkgutil.walk_packages(package.__path__, prefix=f"{top}.")
            if not info.name.startswith(SCRIPTS + ".") and not info.name.endswith(".__main__")
        )
    return sorted(names)


def test_pyproject_names_every_package_folder() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(tool["packages"]) == _packages_on_disk()
    assert tool["package-dir"] == {name: folder for folder, name in FOLDERS.items() if name != folder}


@pytest.mark.parametrize("name", _modules())
def test_all_lists_the_public_surface(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    if hasattr(module, "__path__"):
        # A package: every public attribute that is not a submodule is re-exported on purpose.
        public = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, ModuleType)}
        public -= _TYPING
        # (Exported names that are not loaded yet are fine: strata.store loads them on first use.)
        unexported = sorted(public - set(exported))
        assert not unexported, f"{name} holds public names it does not export: {unexported}"
    else:
        # A module: every public class and function it defines is exported, or is named _private.
        defined = {n for n, v in vars(module).items() if not n.startswith("_")
                   and (inspect.isclass(v) or inspect.isfunction(v)) and getattr(v, "__module__", None) == name}
        unexported = sorted(defined - set(exported))
        assert not unexported, f"{name} defines public names it does not export: {unexported}"
