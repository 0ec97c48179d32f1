"""Security headers on every answer of the app: routes, errors, the inspector's files, /docs, /mcp.

A pure ASGI middleware, outermost, so an answer made by another middleware (a 401, a 413, a
504) carries them as a route's does:

- ``X-Content-Type-Options: nosniff``: a browser runs nothing of an answer as another type
  than it says (a JSON answer holding memory text is never sniffed as HTML or script);
- ``X-Frame-Options: DENY`` and ``Content-Security-Policy: frame-ancestors 'none'``: no page
  frames the inspector or /docs (clickjacking). The inspector's own CSP is a ``<meta>`` tag,
  which cannot say ``frame-ancestors``; a policy in a header and one in a ``<meta>`` tag both
  apply, so this one narrows nothing else;
- ``Referrer-Policy: no-referrer``: a link followed from a page of the API sends no URL of it.

A header a route set itself is kept.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SECURITY_HEADERS", "SecurityHeaders"]

SECURITY_HEADERS: dict[str, str] = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
    "referrer-policy": "no-referrer",
}
_ENCODED = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in SECURITY_HEADERS.items()]


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in _ENCODED if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
