"""Which ports are free, and whether something listens on one."""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence

from strata_cli.errors import StackError

__all__ = ["QUIET_PORTS", "free_ports", "port_open"]

#: Where the stack's free ports are drawn from: below the kernel's ephemeral range (32768-60999
#: by default), from which every bind to port 0 and every outgoing connection's own end draw,
#: and above Ray's worker ports (10002-19999). A port from the ephemeral range could be taken
#: between its choice and its server's bind: HAProxy binds its stats port a few seconds after
#: `ray start`, and once found it taken by then ("cannot bind socket (Address already in use)").
QUIET_PORTS = range(20000, 30000)


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def free_ports(count: int, taken: Sequence[int] = ()) -> list[int]:
    """``count`` distinct ports from :data:`QUIET_PORTS`, free now on every interface and not
    in ``taken``. Every probe stays bound until all are chosen, or one port could be handed
    out twice (seen in CI: two stacks planned before either listened got the same GCS port).

    Raises:
        StackError: fewer than ``count`` of those ports are free.
    """
    probes: list[socket.socket] = []
    ports: list[int] = []
    try:
        for port in random.sample(QUIET_PORTS, len(QUIET_PORTS)):
            if len(ports) == count:
                return ports
            if port in taken:
                continue
            probe = socket.socket()
            probes.append(probe)
            try:
                probe.bind(("", port))
            except OSError:
                continue
            ports.append(port)
        if len(ports) == count:
            return ports
        raise StackError(f"fewer than {count} free ports in {QUIET_PORTS.start}-{QUIET_PORTS.stop - 1}")
    finally:
        for probe in probes:
            probe.close()
