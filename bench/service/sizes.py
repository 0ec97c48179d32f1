"""How much the service benchmark writes and asks: the quick and the full run."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FULL", "QUICK", "SESSION_TURNS", "Sizes"]

SESSION_TURNS = 100  # turns per session, and per batch request


@dataclass(frozen=True)
class Sizes:
    """Turns and documents of the latency tenant, tenants of the scale phase, calls per phase."""

    turns: int
    documents: int
    tenants: int
    tenant_turns: int
    calls_per_client: int
    sequential_calls: int
    #: Tenants, evenly spread over all, whose cold and warm context calls are timed.
    cold_tenants: int
    clients: int = 8


#: The quick run's phases are short, so they take enough calls for their ratios to hold still:
#: /proc counts CPU in 10 ms ticks per process (about 15 processes), and 10 one-client calls
#: gave a one-client ratio of 2.17x in one run and 2.65x in the next at the same commit.
QUICK = Sizes(turns=1000, documents=20, tenants=100, tenant_turns=20, calls_per_client=30, sequential_calls=40,
              cold_tenants=30)
FULL = Sizes(turns=10_000, documents=200, tenants=1000, tenant_turns=100, calls_per_client=100, sequential_calls=50,
             cold_tenants=200)
