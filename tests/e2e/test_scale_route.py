"""Scaling a layer on a running stack (issue 42): ``POST /v1/admin/layers/{layer}:scale`` takes an
admin key only and names the field it refuses; growing episodic by the route and shrinking it back
with ``strata scale`` keep a tenant's turns readable at rank 1; ``strata status`` lists the shards.
On the shared stack (its default settings: two shards per layer), which it leaves as it found it."""

from __future__ import annotations

import uuid

from tests.e2e.running import SHARED_ADMIN_KEY, Running


def _top_hit(stack: Running, key: str, query: str) -> str:
    found = stack.post("/v1/search", {"query": query, "layers": ["episodic"], "top_k": 3}, key=key)
    assert found.status_code == 200, found.text
    hits = found.json()["hits"]
    return str(hits[0]["text"]) if hits else ""


def test_a_layer_grows_by_the_route_and_shrinks_by_the_cli_and_reads_its_writes(agents_stack: Running) -> None:
    stack = agents_stack
    tenant = "scaler-" + uuid.uuid4().hex[:6]
    key = stack.new_key("create", tenant)
    scale = "/v1/admin/layers/{}:scale"

    unknown = stack.call("POST", scale.format("attention"), SHARED_ADMIN_KEY, {"shards": 3})
    assert unknown.status_code == 422 and unknown.json().get("field") == "layer", unknown.text
    too_many = stack.call("POST", scale.format("episodic"), SHARED_ADMIN_KEY, {"shards": 0})
    assert too_many.status_code == 422 and "shards" in too_many.text, too_many.text
    assert stack.call("POST", scale.format("episodic"), key, {"shards": 3}).status_code == 403

    for step, how in enumerate(("route", "cli")):
        marker = f"quokka{step}{tenant.replace('-', '')}"
        assert stack.post("/v1/sessions/s/turns", {"user": f"the {marker} sleeps in the shed"},
                          key=key).status_code == 201
        if how == "route":
            grown = stack.call("POST", scale.format("episodic"), SHARED_ADMIN_KEY, {"shards": 3})
            assert grown.status_code == 200 and grown.json()["shards"] == 3, grown.text
        else:
            shrunk = stack.cli("scale", "episodic", "2")
            assert shrunk.returncode == 0 and "episodic: 2 shards" in shrunk.stdout, shrunk.stderr
        assert marker in _top_hit(stack, key, f"where does the {marker} sleep?")

    status = stack.cli("status")
    assert "episodic" in status.stdout and "2 shards: #0 node" in status.stdout, status.stdout + status.stderr
