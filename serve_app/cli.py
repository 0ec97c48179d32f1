"""The ``strata`` command: a thin layer over :mod:`serve_app.stack` and the clients."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Any:
    from strata.config import load_settings

    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    settings = load_settings(args.config, **overrides)
    if getattr(args, "port", None):
        settings = settings.model_copy(update={"serve": settings.serve.model_copy(update={"port": args.port})})
    return settings


def _stack(args: argparse.Namespace, *, running: bool = False) -> Any:
    """The stack for the command; ``running``: the one ``up`` started in the data dir, if any."""
    from serve_app.stack import Stack

    settings = _settings(args)
    say = lambda m: print(m, flush=True)  # noqa: E731
    if running:
        recorded = Stack.recorded(settings.data_dir, say=say)
        if recorded is not None:
            return recorded
    return Stack(settings, say=say)


def cmd_up(args: argparse.Namespace) -> int:
    stack = _stack(args)
    key = stack.up()
    print(f"Strata is up at {stack.url}  (API docs: {stack.url}/docs)")
    print(f"development API key for tenant 'demo' (also in {stack.key_file}):")
    print(key)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    _stack(args, running=True).down()
    print("Strata is down; data kept in", _settings(args).data_dir.resolve())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    report = _stack(args, running=True).status()
    for name, state in report.items():
        print(f"{name:9} {state}")
    return 0 if report["serve"].startswith("healthy") else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from serve_app.demo import run_demo

    stack = _stack(args)
    key = stack.up() if not stack.healthy() or not stack.key_file.exists() else stack.key_file.read_text().strip()
    print(f"\n== demo against {stack.url} ==")
    run_demo(stack.url, key)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="strata", description="Strata: a four-layer memory runtime for AI agents")
    parser.add_argument("--config", help="YAML settings file (default: $STRATA_CONFIG, else built-in defaults)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn, help_text in (
        ("up", cmd_up, "start milvus-lite, Ray and the HTTP API on 127.0.0.1"),
        ("down", cmd_down, "stop everything `up` started; keep the data"),
        ("status", cmd_status, "say what runs"),
        ("demo", cmd_demo, "run a scripted conversation and show the context Strata returns"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--data-dir", help="where data and logs live (default ./.strata)")
        if name in ("up", "demo"):
            p.add_argument("--port", type=int, help="HTTP port (default 8000)")
        p.set_defaults(fn=fn)
    args = parser.parse_args(argv)
    from serve_app.stack import StackError
    from strata.errors import StrataError

    try:
        return int(args.fn(args))
    except StackError as exc:
        print(f"strata {args.command}: {exc}", file=sys.stderr)
        return 2
    except StrataError as exc:
        print(f"strata {args.command}: {exc.message}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"strata {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
