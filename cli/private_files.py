"""Owner-only directories and files, and the secrets the stack keeps in them.

The data dir and Ray's temporary directory are the user's alone: directories 0700, files
0600, and a directory of another user is refused. The stack's processes run with
:data:`OWNER_ONLY_UMASK`.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from strata.private_dirs import owner_only_dir as private_dir
from strata_cli.errors import StackError

__all__ = ["OWNER_ONLY_UMASK", "make_owner_only", "owner_only_dir", "secret_file", "write_private"]

#: Mode bits for what the stack creates: its processes run with this umask.
OWNER_ONLY_UMASK = 0o077


def owner_only_dir(path: Path, *, follow_symlinks: bool = True) -> None:
    """:func:`strata.private_dirs.owner_only_dir`, its refusal a :class:`StackError`."""
    try:
        private_dir(path, follow_symlinks=follow_symlinks)
    except PermissionError as exc:
        raise StackError(str(exc)) from None


def make_owner_only(root: Path) -> None:
    """Take group and other bits off everything of this user's under ``root`` (links untouched).

    Ray makes its temporary and session directories 0777 when its head starts, and files
    written before this change were made with the caller's umask.
    """
    me = os.geteuid()
    for top, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = os.path.join(top, name)
            try:
                info = os.lstat(path)
                if info.st_uid == me and not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o077:
                    os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)
            except OSError:  # gone meanwhile
                continue


def secret_file(path: Path) -> str:
    """The secret in ``path`` (0600), made on first use."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, 0o600)
    return path.read_text().strip()


def write_private(path: Path, text: str) -> None:
    """Write ``path`` owner-only (0600), whatever mode an older file had."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # an older file keeps its mode through O_TRUNC
