"""The security headers on the running stack's answers of every kind, through Serve and HAProxy:
an open page, a static file, a 401 made by a middleware, a route's 200, /mcp, and /docs
loading only what the stack serves."""

from __future__ import annotations

import re

import httpx

from strata_serve.headers import SECURITY_HEADERS
from tests.e2e.running import Running


def test_every_kind_of_answer_carries_the_security_headers(agents_stack: Running) -> None:
    url, key = agents_stack.url, agents_stack.key
    answers = {
        "healthz": httpx.get(f"{url}/healthz", timeout=30),
        "inspector": httpx.get(f"{url}/ui/", timeout=30),
        "docs": httpx.get(f"{url}/docs", timeout=30),
        "no key": httpx.post(f"{url}/v1/search", json={"query": "x"}, timeout=30),
        "a route": httpx.post(
            f"{url}/v1/search", json={"query": "x"}, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ),
        "mcp": httpx.post(f"{url}/mcp", json={}, timeout=30),
    }
    assert answers["no key"].status_code == 401 and answers["a route"].status_code == 200
    for what, answer in answers.items():
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers.get(name) == value, (what, name, dict(answer.headers))
    sources = re.findall(r'(?:src|href)="([^"]+)"', answers["docs"].text)
    assert sources and all(s.startswith("/") for s in sources), sources
    for source in sources:
        assert httpx.get(url + source, timeout=30).status_code == 200, source
