"""``strata keys``: create, list, rotate and revoke API keys, offline.

The commands talk to the store directly, not to the HTTP API, so they need the
stack's Milvus (``strata up`` starts it) but not Ray or Serve. They use the
settings the stack in ``--data-dir`` runs with (its ``stack.json``), else
``--config``, the environment and the defaults. A new key is printed alone on
the last line, so ``strata keys create t | tail -1`` is the key.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from strata.access.keys import KeyInfo, KeyStore, open_keys
from strata.errors import StoreUnavailable

__all__ = ["add_arguments"]


def _settings(args: argparse.Namespace) -> Any:
    from strata.config import load_settings
    from strata_cli.stack import Stack

    data_dir = Path(args.data_dir)
    running = Stack.recorded(data_dir, say=lambda _: None)
    if running is not None:
        return running.settings
    return load_settings(args.config, data_dir=data_dir)


def _keys(args: argparse.Namespace) -> KeyStore:
    from strata.store.layout import open_store

    settings = _settings(args)
    try:
        store, names = open_store(settings)
    except StoreUnavailable:
        raise StoreUnavailable(
            f"no Milvus answers at {settings.milvus.address}: start the stack with `strata up"
            f"{'' if args.data_dir == '.strata' else ' --data-dir ' + args.data_dir}` first"
        ) from None
    return open_keys(store, names)


def _describe(info: KeyInfo) -> str:
    name = f", name {info.name!r}" if info.name else ""
    owner = "admin key" if info.admin else f"key for tenant {info.tenant!r}"
    return f"{owner}, id {info.key_id}, scopes: {info.scopes}{name}"


def _show_new(what: str, key: str) -> None:
    print(what)
    print("store it now: Strata keeps only its hash and cannot show it again")
    print(key)


def _cmd_create(args: argparse.Namespace) -> int:
    created = _keys(args).issue(
        args.tenant, read_only=args.read_only, session_id=args.session, shared=args.shared, name=args.name
    )
    _show_new("created " + _describe(created), created.key)
    return 0


def _cmd_create_admin(args: argparse.Namespace) -> int:
    created = _keys(args).issue_admin(name=args.name)
    _show_new("created " + _describe(created) + " (for /v1/admin routes)", created.key)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    infos = _keys(args).list(args.tenant)
    rows = [("ID", "TENANT", "SCOPES", "NAME", "CREATED", "REVOKED")] + [
        (
            i.key_id, i.tenant, i.scopes, i.name or "-", f"{i.created_at:%Y-%m-%d %H:%M:%S}",
            f"{i.revoked_at:%Y-%m-%d %H:%M:%S}" if i.revoked_at else "-",
        )
        for i in infos
    ]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not infos:
        print(f"(no keys{' for tenant ' + repr(args.tenant) if args.tenant else ''})")
    return 0


def _cmd_rotate(args: argparse.Namespace) -> int:
    created = _keys(args).rotate(args.key_id)
    _show_new(f"revoked {args.key_id}; created " + _describe(created), created.key)
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    info = _keys(args).revoke(args.key_id)
    print(f"revoked {_describe(info)}; its next request is refused")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``create``, ``create-admin``, ``list``, ``rotate`` and ``revoke`` under ``strata keys``."""
    sub = parser.add_subparsers(dest="keys_command", required=True)

    def command(name: str, help_text: str, fn: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--data-dir", default=".strata", metavar="DIR", help="the stack's data dir (default .strata)")
        p.add_argument("--config", default=argparse.SUPPRESS, help="YAML settings (as `strata --config`)")
        p.set_defaults(fn=fn)
        return p

    create = command("create", "a new key for a tenant; the key is printed on the last line", _cmd_create)
    create.add_argument("tenant", metavar="TENANT")
    create.add_argument("--read-only", action="store_true", help="GET routes, /v1/context and /v1/search only")
    create.add_argument("--session", metavar="SESSION_ID", help="only this session's routes")
    create.add_argument(
        "--shared",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="may see the tenant's documents and skills (default: yes for a tenant key, no for a --session key)",
    )
    create.add_argument("--name", metavar="LABEL", help="a label shown by `strata keys list`")
    admin = command("create-admin", "a new admin key for /v1/admin; printed on the last line", _cmd_create_admin)
    admin.add_argument("--name", metavar="LABEL", help="a label shown by `strata keys list`")
    listing = command("list", "keys by id, tenant, scopes and dates (never the secret)", _cmd_list)
    listing.add_argument("tenant", metavar="TENANT", nargs="?", help="only this tenant's keys")
    rotate = command("rotate", "replace a key: same tenant and scopes, the old one revoked", _cmd_rotate)
    rotate.add_argument("key_id", metavar="KEY_ID")
    revoke = command("revoke", "stop a key at once", _cmd_revoke)
    revoke.add_argument("key_id", metavar="KEY_ID")
