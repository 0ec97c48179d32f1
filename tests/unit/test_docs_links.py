"""The README and docs/ stay navigable: every relative link reaches a file (and, for a Markdown
page, the heading it names), and the README stays a front door (at most 250 lines, no commit
hashes: the history of runs lives in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.layout import ROOT, package_dir

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: ``[text](target)``; the target ends at the first space or closing bracket.
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """``text`` without code blocks and code spans, where brackets are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces made hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8")))}


def _relative_links(page: Path) -> list[str]:
    links = _LINK.findall(_prose(page.read_text(encoding="utf-8")))
    return [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for link in _relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no heading '{anchor}' in {target.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move detail to docs/ (at most 250)"
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", h) and re.search(r"\d", h)]
    assert not hashes, f"README.md names commits {hashes}: their runs belong in docs/benchmarks.md"


def test_the_readme_runs_the_tests_with_the_command_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    comments = [line.lstrip("#").strip() for line in ci.splitlines() if line.startswith("#")]
    commands = [c for c in comments if c.startswith("python3 -m venv")]
    assert commands, ".ci/run no longer names the command it runs in its comment"
    readme = README.read_text(encoding="utf-8").splitlines()
    assert commands[0] in readme, f"README.md does not give .ci/run's command: {commands[0]}"


def test_the_readme_lists_every_folder_under_the_name_it_installs_as() -> None:
    rows = re.findall(r"^\| `([a-z_]+)/` \| `([a-z_]+)` \|", README.read_text(encoding="utf-8"), re.MULTILINE)
    listed = {name: folder for folder, name in rows if folder != name}
    assert listed == package_dir(), "README.md's folder table differs from [tool.setuptools.package-dir]"
