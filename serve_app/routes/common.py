"""What the route groups share: the state of the Api replica their methods use, the path
parameters of ids, the If-Match header, and a fast JSON answer."""

import re
from typing import Any

from fastapi import Path, Response
from pydantic import BaseModel

from strata.config import StrataSettings
from strata.errors import InvalidInput
from strata.ids import ID_PATTERN
from strata_actors.orchestration import Orchestration
from strata_serve.auth import KeyGate

__all__ = ["SESSION", "Routes", "expected_version", "id_path", "json_response"]


class Routes:
    """The state of the :class:`~strata_serve.api.Api` replica that its route methods use (set in
    its ``__init__``): each route group is a base class of ``Api``."""

    _settings: StrataSettings
    _flow: Orchestration
    _gate: KeyGate


def id_path(description: str) -> Any:
    """A path parameter holding an id (:data:`strata.ids.ID_PATTERN`)."""
    return Path(pattern=ID_PATTERN.pattern.join("^$"), description=description)


SESSION = id_path("Session id")


def json_response(model: BaseModel) -> Response:
    """``model`` as JSON in one pass of pydantic's serializer. Returned as a model, FastAPI would
    dump it, validate the dump against the route's response model and serialize that again: the
    hot routes (context, search) return this; the response model still documents them."""
    return Response(content=model.model_dump_json(), media_type="application/json")


#: A version in If-Match: ASCII digits only (``str.isdigit`` also takes "²"), within 64 bits.
_VERSION = re.compile(r"[0-9]{1,18}", re.ASCII)


def expected_version(value: str | None) -> int | None:
    """The version an ``If-Match`` header asks for; None without the header."""
    if value is None:
        return None
    raw = value.strip().removeprefix("W/").strip('"')
    if not _VERSION.fullmatch(raw):
        raise InvalidInput(f'If-Match must be a version such as "3", got {value[:40]!r}', field="If-Match")
    return int(raw)
