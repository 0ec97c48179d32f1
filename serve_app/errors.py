"""Strata errors to HTTP responses, in one place."""

from __future__ import annotations

import math

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from actors.errors import unwrap
from strata.errors import RateLimited, StoreUnavailable, StrataError, Unauthorized, VersionConflict

__all__ = ["error_response", "validation_response", "install_handlers"]


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
            problems.append(f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')} "
                            f"at character {error.get('loc', ('', '?'))[-1]})")
            continue
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        problems.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
    return JSONResponse(
        {"error": "InvalidInput", "message": "; ".join(problems)[:2000], "problems": problems[:50]},
        status_code=422,
    )


def install_handlers(app: object) -> None:
    async def on_strata(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)  # type: ignore[arg-type]

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        return validation_response(exc)  # type: ignore[arg-type]

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        err = unwrap(exc)
        if isinstance(err, StrataError):
            return error_response(err)
        return JSONResponse(
            {"error": "InternalError", "message": f"unexpected {type(err).__name__}; see the server log"},
            status_code=500,
        )

    app.add_exception_handler(StrataError, on_strata)  # type: ignore[attr-defined]
    app.add_exception_handler(RequestValidationError, on_validation)  # type: ignore[attr-defined]
    app.add_exception_handler(Exception, on_other)  # type: ignore[attr-defined]
