"""``/docs`` (Swagger UI) and ``/redoc`` served from files installed with the package.

FastAPI's own pages load their scripts from a public CDN, which an offline machine cannot
reach and which comes with no integrity hash. The same pages here load Swagger UI and ReDoc
from the static files the pinned ``fastapi-offline`` distribution ships (its files only; its
app class is not used), under :data:`STATIC_PATH`, which needs no key as ``/docs`` does not.
"""

from __future__ import annotations

import pathlib

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from strata_serve.auth import DOCS_STATIC_PATH

__all__ = ["STATIC_PATH", "install_docs"]

#: Where the pages' scripts, style sheet and icon are served (open: no key needed).
STATIC_PATH = DOCS_STATIC_PATH
_FILES = pathlib.Path(fastapi_offline.__file__).with_name("static")


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs``, ``/docs/oauth2-redirect`` and ``/redoc`` on ``app`` (made with
    ``docs_url=None, redoc_url=None``), their assets under :data:`STATIC_PATH`."""
    title = f"{app.title} API"
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PATH}/favicon.png",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=title,
            redoc_js_url=f"{STATIC_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{STATIC_PATH}/favicon.png",
            with_google_fonts=False,
        )

    app.mount(STATIC_PATH, StaticFiles(directory=_FILES), name="docs-static")
