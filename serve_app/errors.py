"""Strata errors to HTTP responses, in one place: the exception handlers of the API's app and
the JSON answers they give, Strata's error shape also for FastAPI's own errors, and the 500 for
anything unexpected (without a word of the request).

An error's status code is its class's ``status_code`` (:mod:`strata.errors`); nothing here
repeats one, and :mod:`strata_serve.client` maps codes back to classes from the same attribute.
The middleware that answers 413, 504 and 500 is :mod:`strata_serve.guards`.
"""

from __future__ import annotations

import math
from http import HTTPStatus

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from strata.errors import InvalidInput, RateLimited, StoreUnavailable, StrataError, Unauthorized, VersionConflict
from strata_actors.errors import unwrap

__all__ = [
    "error_response",
    "http_error_response",
    "install_handlers",
    "internal_response",
    "validation_response",
]


def error_response(exc: StrataError) -> JSONResponse:
    headers: dict[str, str] = {}
    if isinstance(exc, (StoreUnavailable, RateLimited)):
        headers["Retry-After"] = str(max(1, math.ceil(float(exc.details.get("retry_after_s", 2)))))
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, VersionConflict):
        headers["ETag"] = f'"{exc.current_version}"'
    return JSONResponse(exc.to_dict(), status_code=exc.status_code, headers=headers)


def validation_response(exc: RequestValidationError) -> JSONResponse:
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            problems.append(
                f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')} "
                f"at character {error.get('loc', ('', '?'))[-1]})"
            )
            continue
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        problems.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
    # A field name may hold a lone surrogate (an unknown key of the body): escaped, or the
    # answer itself could not be encoded.
    problems = [p.encode("utf-8", "backslashreplace").decode("utf-8") for p in problems]
    return JSONResponse(
        {"error": "InvalidInput", "message": "; ".join(problems)[:2000], "problems": problems[:50]},
        status_code=InvalidInput.status_code,
    )


def http_error_response(exc: HTTPException) -> JSONResponse:
    """FastAPI's and Starlette's own errors (unknown route, wrong method, unreadable body) in
    Strata's shape instead of ``{"detail": ...}``."""
    if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
        message = f"the body is not valid JSON (not UTF-8: {exc.__cause__.reason} at byte {exc.__cause__.start})"
        return JSONResponse(
            {"error": "InvalidInput", "message": message, "problems": [message]}, status_code=InvalidInput.status_code
        )
    try:
        name = HTTPStatus(exc.status_code).phrase.title().replace(" ", "").replace("-", "")
    except ValueError:
        name = "HTTPError"
    return JSONResponse({"error": name, "message": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

def internal_response() -> JSONResponse:
    return JSONResponse(
        {"error": "InternalError", "message": "an unexpected error; it is logged (without the request) on the server"},
        status_code=500,
    )

def install_handlers(app: object) -> None:
    async def on_strata(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)  # type: ignore[arg-type]

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        return validation_response(exc)  # type: ignore[arg-type]

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        return http_error_response(exc)  # type: ignore[arg-type]

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        # Only what :class:`Internal` does not wrap reaches here (Starlette re-raises it after).
        err = unwrap(exc)
        return error_response(err) if isinstance(err, StrataError) else internal_response()

    app.add_exception_handler(StrataError, on_strata)  # type: ignore[attr-defined]
    app.add_exception_handler(RequestValidationError, on_validation)  # type: ignore[attr-defined]
    app.add_exception_handler(HTTPException, on_http)  # type: ignore[attr-defined]
    app.add_exception_handler(Exception, on_other)  # type: ignore[attr-defined]
