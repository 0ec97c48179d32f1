"""Validation of every identifier that reaches a store or a filter expression.

milvus-lite 3.x has no filter templating, so filter expressions are built
from literals. The rule that keeps them safe is that a literal is only ever
made from a value that matched :data:`ID_PATTERN` first; :func:`literal`
enforces it, so no caller can paste raw request text into a filter.
"""

from __future__ import annotations

import re

from strata.errors import InvalidInput

__all__ = ["ID_CHARS", "ID_FIELD_PATTERN", "ID_PATTERN", "SYSTEM_TENANT", "in_list", "literal", "validate_id"]

#: The tenant of Strata's own rows (API keys, pending jobs); no key is ever bound to it.
SYSTEM_TENANT = "system"

#: The characters an id may hold, as the body of a regex character class: a slug of free text
#: replaces what ``[^{ID_CHARS}]`` matches.
ID_CHARS = r"A-Za-z0-9_.:\-"
#: Letters, digits and ``_ . : -``, 1 to 128 characters, starting with a letter or digit.
ID_PATTERN = re.compile(rf"[A-Za-z0-9][{ID_CHARS}]{{0,127}}")
#: :data:`ID_PATTERN` anchored, for the ``pattern`` of a pydantic field that holds an id.
ID_FIELD_PATTERN = f"^{ID_PATTERN.pattern}$"


def validate_id(value: object, *, field: str) -> str:
    """Return ``value`` if it is a valid id, else raise :class:`InvalidInput` naming ``field``."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        shown = repr(value)[:60]
        raise InvalidInput(
            f"{field} {shown} is not a valid id: use 1-128 characters from "
            "letters, digits and _ . : - starting with a letter or digit",
            field=field,
        )
    return value


def literal(value: str, *, field: str = "id") -> str:
    """A Milvus string literal for a validated id (raises for anything else)."""
    return '"' + validate_id(value, field=field) + '"'


def in_list(values: list[str], *, field: str = "id") -> str:
    """A Milvus list literal ``["a", "b"]`` of validated ids."""
    return "[" + ", ".join(literal(v, field=field) for v in values) + "]"
