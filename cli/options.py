"""Options that several commands share: which Milvus server the stack stores in.

``--milvus-uri URI --milvus-token-file F`` point ``strata up`` (and ``demo``, ``bench``) at a
Milvus server instead of the embedded milvus-lite: the same as ``milvus.uri`` and
``milvus.token`` in the config or ``STRATA_MILVUS__URI`` / ``STRATA_MILVUS__TOKEN``, with the
token read from a file so that it never appears on a command line or in ``ps``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_store_arguments", "store_overrides"]


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--milvus-uri", help="a Milvus server (http://host:19530) instead of the embedded milvus-lite")
    parser.add_argument("--milvus-token-file", type=Path,
                        help="a file holding its token ('user:password' or an API key); required with --milvus-uri")


def store_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``milvus`` settings the options ask for: ``{}`` without ``--milvus-uri``.

    Raises:
        SystemExit: a token file without a URI, or one that cannot be read, or is empty.
    """
    uri, token_file = getattr(args, "milvus_uri", None), getattr(args, "milvus_token_file", None)
    if token_file is not None and not uri:
        raise SystemExit("--milvus-token-file needs --milvus-uri")
    if not uri:
        return {}
    if token_file is None:
        raise SystemExit("--milvus-uri needs --milvus-token-file (a server without a token: set "
                         "milvus.allow_no_token in the config instead)")
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise SystemExit(f"--milvus-token-file {token_file}: {exc.strerror}") from None
    if not token:
        raise SystemExit(f"--milvus-token-file {token_file} is empty")
    return {"milvus": {"uri": uri, "token": token}}
