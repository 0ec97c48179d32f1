"""Directories only this user can reach: the stack's own, and caches on a shared machine.

``/tmp`` is shared by every account of the machine, so a path under it may already exist,
made by someone else: a directory of theirs, or a link to one. What Strata keeps there is
kept in ``/tmp/strata-<uid>/…``, each level checked to be a directory of this user's
(and made 0700) before anything is written or read in it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["owner_only_dir", "user_temp_dir"]


def owner_only_dir(path: Path, *, follow_symlinks: bool = True) -> None:
    """Create ``path`` 0700, or make an existing directory of this user's 0700.

    Raises:
        PermissionError: ``path`` belongs to another user, or is not a directory (or, with
            ``follow_symlinks`` false, is a symbolic link: a path another user could plant).
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat() if follow_symlinks else path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(
            f"{path} is not a directory (a link another user may have made?); remove it or choose another"
        )
    if info.st_uid != os.geteuid():
        raise PermissionError(
            f"{path} belongs to another user (uid {info.st_uid}): its files could be read or replaced; "
            "choose a directory of your own"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)


def user_temp_dir(*parts: str) -> Path:
    """``<tmp>/strata-<uid>/<parts…>``, every level a 0700 directory of this user's (no links).

    Raises:
        PermissionError: a level is another user's, a link, or not a directory.
    """
    path = Path(tempfile.gettempdir()) / f"strata-{os.geteuid()}"
    owner_only_dir(path, follow_symlinks=False)
    for part in parts:
        path /= part
        owner_only_dir(path, follow_symlinks=False)
    return path
