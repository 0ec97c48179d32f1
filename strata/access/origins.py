"""Which browser origins may call the MCP endpoint.

A web page the user opens can make its own host name resolve to 127.0.0.1 (DNS rebinding) and
then send requests to a server on the user's machine as if it were that server's own page. The
MCP transport rules ask a server to check the ``Origin`` header a browser sends with every such
request and to answer 403 when it is present and not one it trusts. A page served from a
loopback host (``http://localhost:6274``, ``http://127.0.0.1:8080``) is on the user's own
machine, so it is trusted; any other origin must be listed. Clients that are not browsers send
no ``Origin`` at all and are judged by their key alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["OriginCheck", "origin_key"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Longer than any real origin: a header beyond it is refused without being parsed.
_MAX_ORIGIN_CHARS = 2048

#: An origin as compared: (scheme, host, port), the host in lower case, the port explicit;
#: ("null", "", 0) for the opaque origin ``null`` (sandboxed frames, ``file:`` pages).
OriginKey = tuple[str, str, int]


def origin_key(origin: str) -> OriginKey | None:
    """``origin`` as compared, or None when it is not ``scheme://host[:port]`` over http(s) or ``null``."""
    origin = origin.strip()
    if origin == "null":
        return ("null", "", 0)
    if len(origin) > _MAX_ORIGIN_CHARS:
        return None
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number or out of range
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username is not None or parts.password is not None:
        return None
    return (scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme])


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):  # browsers resolve these to loopback (RFC 6761)
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OriginCheck:
    """Whether a request's ``Origin`` header may call: absent, loopback, or one of ``allowed``.

    Raises:
        ValueError: an entry of ``allowed`` is not an origin.
    """

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        keys = set()
        for origin in allowed:
            key = origin_key(origin)
            if key is None:
                raise ValueError(
                    f"{origin[:200]!r} is not an origin: write scheme://host[:port] (http or https, no path), or null"
                )
            keys.add(key)
        self._allowed = frozenset(keys)

    def allows(self, origin: str | None) -> bool:
        if origin is None:
            return True
        key = origin_key(origin)
        if key is None:
            return False
        return key in self._allowed or (key[0] != "null" and _loopback(key[1]))
