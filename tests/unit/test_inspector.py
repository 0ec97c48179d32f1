"""The memory inspector's static files: served at /ui without a key (a GET there and nothing
else), offline, and written so that memory text can only ever be text."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Mount

from strata_serve import api
from strata_serve.auth import UI_PATH
from tests.unit.test_authenticate import World, bearer

UI = Path(api.__file__).with_name("ui")


def ui_mount() -> Mount:
    return next(r for r in api.app.routes if isinstance(r, Mount) and r.path == UI_PATH)


def world_with_ui() -> World:
    world = World()
    world.app.mount(UI_PATH, ui_mount().app)
    return world


async def raw_get(app: Any, path: str) -> tuple[int, bytes]:
    """A GET of ``path`` exactly as given, straight over ASGI."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
        "client": ("10.9.9.9", 5000), "server": ("test", 80),
    }  # fmt: skip
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return int(status), b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_api_serves_the_inspector_files_at_ui() -> None:
    served = Path(ui_mount().app.directory)  # type: ignore[attr-defined]
    assert served == UI
    assert {p.name for p in UI.iterdir()} >= {"index.html", "app.js", "style.css"}


async def test_a_get_of_the_page_and_its_files_needs_no_key() -> None:
    async with world_with_ui().client() as http:
        page = await http.get("/ui/")
        assert page.status_code == 200 and "Strata memory inspector" in page.text
        redirected = await http.get("/ui", follow_redirects=False)
        assert redirected.status_code in (307, 308) and redirected.headers["location"].endswith("/ui/")
        for name in ("app.js", "style.css", "index.html"):
            assert (await http.get(f"/ui/{name}")).status_code == 200, name
        assert (await http.get("/ui/nothing-here.js")).status_code == 404


async def test_nothing_else_passes_without_a_key() -> None:
    """Only a GET of /ui or below is let through: another method there, a look-alike path, or a
    path that only starts with /ui is asked for a key; a path climbing out of /ui stays in it."""
    world = world_with_ui()
    async with world.client() as http:
        for method, path in (
            ("POST", "/ui/"),
            ("PUT", "/ui/app.js"),
            ("DELETE", "/ui"),
            ("HEAD", "/ui/"),
            ("GET", "/uix"),
            ("GET", "/ui.js"),
            ("GET", "/v1/documents"),
        ):
            refused = await http.request(method, path)
            assert refused.status_code == 401, (method, path, refused.status_code)
            if method != "HEAD":
                assert refused.json()["error"] == "Unauthorized"
        assert (await http.get("/v1/documents", headers=bearer(world.key))).json() == {"tenant": "acme"}
    # A path that climbs out of /ui (sent raw: an HTTP client would resolve the dots) is let
    # through as a file below /ui, and is routed as one: to the files, never to the route.
    for climbing in ("/ui/../v1/documents", "/ui/%2e%2e/v1/documents", "/ui/..%2fv1/documents"):
        status, body = await raw_get(world.app, climbing)
        assert status == 404 and b"tenant" not in body, (climbing, status, body)


def test_the_page_loads_nothing_from_elsewhere() -> None:
    html = (UI / "index.html").read_text()
    linked = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert sorted(linked) == ["app.js", "style.css"]
    assert all((UI / name).is_file() for name in linked)
    for text in (html, (UI / "app.js").read_text(), (UI / "style.css").read_text()):
        assert not re.search(r"https?://|//cdn|@import", text)
    policy = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]*)"', html)
    assert policy is not None and "script-src 'self'" in policy.group(1) and "default-src 'none'" in policy.group(1)


@pytest.mark.parametrize(
    "sink", ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("]
)
def test_the_script_never_turns_data_into_html(sink: str) -> None:
    """Memory text is hostile: the page builds every node with text (the browser test shows a
    turn of ``<img onerror>`` as text); none of the ways to parse a string as HTML or code is used."""
    assert sink not in (UI / "app.js").read_text()


def test_the_key_stays_out_of_urls() -> None:
    """The key goes in sessionStorage and an Authorization header, never in a URL: no input has a
    name a form could submit, and the script never writes the location."""
    html = (UI / "index.html").read_text()
    assert not re.search(r"<input[^>]*\bname=", html)
    script = (UI / "app.js").read_text()
    assert "sessionStorage" in script and "localStorage" not in script
    assert not re.search(r"location\s*(\.\w+)?\s*=|history\.(push|replace)State", script)
