"""jieba's dictionary cache is this user's own: a cache another account planted in the shared
temporary directory is never loaded. Each case runs in a fresh process (jieba loads its
dictionary once per process), with TMPDIR pointing at the test's own directory."""

from __future__ import annotations

import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Not a word of jieba's dictionary: it cuts it into smaller pieces, unless a cache says otherwise.
PLANTED = "猫狗鱼鸟"

_PROBE = f"""
import jieba
from strata.retrieval.lexical import lexical_terms
print("WORD" if "w:{PLANTED}" in lexical_terms("我家有{PLANTED}") else "PIECES")
print("DIR", jieba.dt.tmp_dir)
"""


def _plant(tmp: Path) -> None:
    """What another account could leave at ``<tmp>/jieba.cache``: a dictionary of its own."""
    freq = {PLANTED[:n]: 0 for n in range(1, len(PLANTED))} | {PLANTED: 10**9}
    (tmp / "jieba.cache").write_bytes(marshal.dumps((freq, 10**9)))


def _probe(tmp: Path) -> tuple[str, Path]:
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp)}, check=True)
    lines = done.stdout.split("\n")
    return lines[0], Path(lines[1].removeprefix("DIR "))


def test_a_planted_cache_in_the_shared_temp_dir_is_not_loaded_and_the_cache_is_kept_private(tmp_path: Path) -> None:
    _plant(tmp_path)
    segmented, cache_dir = _probe(tmp_path)
    assert segmented == "PIECES"
    assert cache_dir == tmp_path / f"strata-{os.geteuid()}" / "jieba"
    for level in (cache_dir.parent, cache_dir):
        info = level.lstat()
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == 0o700
    assert (cache_dir / "jieba.cache").is_file()  # the real dictionary, cached for the next process
    assert _probe(tmp_path)[0] == "PIECES"  # which loads it


def test_a_planted_link_in_place_of_the_private_dir_sends_the_cache_to_a_new_dir_of_its_own(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "jieba").mkdir()
    _plant(theirs / "jieba")
    (tmp_path / f"strata-{os.geteuid()}").symlink_to(theirs)
    segmented, cache_dir = _probe(tmp_path)
    assert segmented == "PIECES"
    assert cache_dir.parent == tmp_path and cache_dir.name.startswith("strata-jieba-")
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
