"""Scopes: every route of the API is in the one table (ROUTES), and each kind of key may do
exactly what the scope model says, route by route (the same table the e2e test drives over HTTP)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.routing import APIRoute

from strata.access.keys import KeyInfo, KeyStore
from strata.access.scopes import Forbidden, Need, authorize, visible_layers
from strata.ids import SYSTEM_TENANT
from strata.layers import LAYERS, Layer
from strata.store.records import InMemoryRecordStore, Record
from strata_serve.auth import ADMIN_ROUTES, ROUTES

OWN = "own"


def key(
    *, admin: bool = False, read_only: bool = False, session_id: str | None = None, shared: bool | None = None
) -> KeyInfo:
    return KeyInfo(
        key_id="0" * 12,
        tenant=SYSTEM_TENANT if admin else "t",
        admin=admin,
        read_only=read_only,
        session_id=session_id,
        shared=shared,
        created_at=datetime.now(UTC),
    )


KEYS = {
    "admin": key(admin=True),
    "tenant": key(),
    "read-only": key(read_only=True),
    "session": key(session_id=OWN),
    "session read-only": key(session_id=OWN, read_only=True),
    "session shared": key(session_id=OWN, shared=True),
    "tenant unshared": key(shared=False),
}
_ = False
X = True
#: Route -> allowed for the keys above, in that order. A session route is called with the
#: key's own session (or "own" for a tenant-wide key); search and context with their defaults.
EXPECTED: dict[str, tuple[bool, ...]] = {
    #                   admin tenant  ro  sess sess-ro sess-shared tenant-unshared
    "record_turn": (_, X, _, X, _, X, X),
    "record_turns": (_, X, _, X, _, X, X),
    "get_working": (_, X, X, X, X, X, X),
    "add_working_items": (_, X, _, X, _, X, X),
    "forget_session": (_, X, _, X, _, X, X),
    "forget_turn": (_, X, _, X, _, X, X),
    "post_interaction": (_, X, _, X, _, X, X),
    "build_context": (_, X, X, X, X, X, X),
    "search": (_, X, X, X, X, X, X),
    "index_document": (_, X, _, _, _, _, _),
    "list_documents": (_, X, X, _, _, X, _),
    "get_document": (_, X, X, _, _, X, _),
    "delete_document": (_, X, _, _, _, _, _),
    "entity": (_, X, X, _, _, X, _),
    "extract_skill": (_, X, _, _, _, _, _),
    "find_skills": (_, X, X, _, _, X, _),
    "get_skill": (_, X, X, _, _, X, _),
    "record_outcome": (_, X, _, _, _, _, _),
    "update_skill": (_, X, _, _, _, _, _),
    "delete_skill": (_, X, _, _, _, _, _),
    "skill_history": (_, X, X, _, _, X, _),
    "skill_job": (_, X, X, _, _, X, _),
    "audit": (_, X, X, _, _, _, _),
    "export": (_, X, X, _, _, _, X),
    "usage": (_, X, X, _, _, _, X),
    "list_turns": (_, X, X, X, X, X, X),
    "list_sessions": (_, X, X, _, _, _, X),
}
SESSION_ROUTES = {
    "record_turn",
    "record_turns",
    "get_working",
    "add_working_items",
    "forget_session",
    "forget_turn",
    "post_interaction",
    "list_turns",
    "build_context",
    "search",
}


def test_the_table_names_every_route_of_the_api() -> None:
    from strata_serve import api

    def leaves(routes: list[Any]) -> list[Any]:
        return [
            leaf
            for r in routes
            for leaf in (leaves(r.original_router.routes) if hasattr(r, "original_router") else [r])
        ]

    names = {r.name for r in leaves(api.app.routes) if isinstance(r, APIRoute) and r.include_in_schema} - {"healthz"}
    assert len(names) > 20
    assert names == set(ROUTES) | ADMIN_ROUTES
    assert set(EXPECTED) == set(ROUTES)
    assert all(ROUTES[name].stores == bool(ROUTES[name].writes) for name in ROUTES)
    reads = {"search", "build_context", "audit", "export", "list_sessions", "list_turns", "usage"}
    assert {name for name, need in ROUTES.items() if not need.stores} >= reads


def check(info: KeyInfo, route: str) -> None:
    need = ROUTES[route]
    session = (info.session_id or OWN) if route in SESSION_ROUTES else None
    if need.chosen:
        if info.admin:
            authorize(info, Need(), session=session)
        need = Need(reads=frozenset(visible_layers(info, None, default=LAYERS)))
    authorize(info, need, session=session)


@pytest.mark.parametrize("route", sorted(EXPECTED))
def test_each_key_may_call_what_its_scope_says(route: str) -> None:
    for (kind, info), allowed in zip(KEYS.items(), EXPECTED[route], strict=True):
        if allowed:
            check(info, route)
            continue
        with pytest.raises(Forbidden) as refused:
            check(info, route)
        message = refused.value.message
        assert ("admin" in message) == info.admin, (route, kind, message)
        if info.read_only and ROUTES[route].writes:
            assert "read-only" in message, (route, kind, message)


def test_a_session_key_reaches_no_other_session_and_no_tenant_wide_search() -> None:
    for info in (KEYS["session"], KEYS["session read-only"], KEYS["session shared"]):
        with pytest.raises(Forbidden, match="'other'"):
            authorize(info, Need(reads=frozenset({"working"})), session="other")
        with pytest.raises(Forbidden, match="every session"):  # a search without session_id
            authorize(info, Need(reads=frozenset({"episodic"})), session=None)


def test_search_and_context_layers_are_those_the_key_sees() -> None:
    """A session key's search named ``layers: ["semantic"]`` and got the tenant's documents."""
    session, shared = KEYS["session"], KEYS["session shared"]
    assert visible_layers(session, None, default=LAYERS) == ["working", "episodic"]  # the others left out
    assert visible_layers(shared, None, default=LAYERS) == list(LAYERS)
    not_theirs: list[list[Layer]] = [["semantic"], ["procedural"], ["episodic", "semantic"]]
    for asked in not_theirs:
        with pytest.raises(Forbidden, match="may not read"):
            visible_layers(session, asked, default=LAYERS)
    assert visible_layers(shared, ["semantic"], default=LAYERS) == ["semantic"]
    assert visible_layers(KEYS["tenant unshared"], None, default=["episodic", "semantic"]) == ["episodic"]


def test_an_interaction_of_a_key_that_may_not_write_skills_learns_nothing() -> None:
    learns = Need(writes=ROUTES["post_interaction"].learns)
    allowed = {kind for kind, info in KEYS.items() if not info.admin and _may(info, learns)}
    assert allowed == {"tenant"}


def _may(info: KeyInfo, need: Need) -> bool:
    try:
        authorize(info, need, session=OWN)
    except Forbidden:
        return False
    return True


def test_rows_from_before_shared_take_the_default_of_their_kind() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("keys", dim=2)
    keys = KeyStore(store, "keys")
    made = {name: keys.issue("t", session_id=session) for name, session in (("tenant", None), ("session", OWN))}
    for row in store.scan("keys", tenant=SYSTEM_TENANT):  # as written before `shared` existed
        store.upsert(
            "keys", [Record(**{**row.__dict__, "payload": {k: v for k, v in row.payload.items() if k != "shared"}})]
        )
    tenant, session = keys.lookup(made["tenant"].key), keys.lookup(made["session"].key)
    assert tenant is not None and tenant.shared is None and tenant.layers == set(LAYERS) and tenant.scopes == "all"
    assert session is not None and session.layers == {"working", "episodic"} and session.scopes == f"session {OWN}"
    rotated = keys.lookup(keys.rotate(session.key_id).key)
    assert rotated is not None and rotated.layers == session.layers


def test_shared_is_kept_and_shown() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("keys", dim=2)
    keys = KeyStore(store, "keys")
    shared = keys.lookup(keys.create("t", session_id="s1", shared=True))
    unshared = keys.lookup(keys.create("t", shared=False))
    assert shared is not None and shared.scopes == "session s1, documents and skills" and "semantic" in shared.layers
    assert unshared is not None and unshared.scopes == "no documents or skills" and "semantic" not in unshared.layers
    assert keys.lookup(keys.rotate(shared.key_id).key).shared is True  # type: ignore[union-attr]


def test_an_empty_layer_list_searches_nothing_it_is_never_every_layer() -> None:
    """A session key's search with ``"layers": []`` read the whole tenant: authorization asked
    for no layer, and the orchestrator then read ``[]`` as "every layer". The request is refused
    where it is parsed, so no later stage can reinterpret it; a context with ``[]`` reads working
    memory only."""
    from pydantic import ValidationError

    from strata.schema import ContextRequest, SearchRequest

    with pytest.raises(ValidationError, match="layers"):
        SearchRequest(query="plans", layers=[])
    assert SearchRequest(query="plans").layers is None
    assert ContextRequest(message="plans", session_id=OWN, layers=[]).layers == []
    for info in KEYS.values():
        if not info.admin:
            assert visible_layers(info, [], default=LAYERS) == []  # asked for nothing: nothing to read



def test_an_export_reads_only_the_layers_the_key_sees() -> None:
    """``GET /v1/export`` is decided on the layers it will read: without documents and skills, a
    key exports its sessions only; asking for a layer it does not see is refused."""
    unshared = KEYS["tenant unshared"]
    assert visible_layers(unshared, None, default=LAYERS) == ["working", "episodic"]
    with pytest.raises(Forbidden, match="documents"):
        visible_layers(unshared, ["semantic"], default=LAYERS)
