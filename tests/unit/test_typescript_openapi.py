"""The TypeScript client's types follow the API: its committed OpenAPI document
(``clients/typescript/openapi.json``, what ``src/schema.ts`` is generated from) is the one the
app serves, built here in process without a stack. ``npm run check-types`` checks the generated
file itself against that document (tests/e2e/test_typescript_client.py runs it).
"""

from __future__ import annotations

import json
from typing import Any

from tests.layout import ROOT

CLIENT = ROOT / "clients" / "typescript"
FIX = (
    "the API changed: regenerate the TypeScript client's types with "
    "`python clients/typescript/scripts/dump_openapi.py && (cd clients/typescript && npm run generate)`"
)


def _served() -> dict[str, Any]:
    from strata_serve import api

    return api.app.openapi()


def _committed() -> dict[str, Any]:
    committed: dict[str, Any] = json.loads((CLIENT / "openapi.json").read_text(encoding="utf-8"))
    return committed


def test_the_committed_openapi_document_is_the_one_the_api_serves() -> None:
    served, committed = _served(), _committed()
    assert sorted(served["paths"]) == sorted(committed["paths"]), FIX
    assert sorted(served["components"]["schemas"]) == sorted(committed["components"]["schemas"]), FIX
    assert served == committed, FIX


def test_the_generated_types_name_every_route_and_model_of_the_document() -> None:
    """A cheap stand-in, without Node, for `npm run check-types`: a route or model added to
    openapi.json without `npm run generate` is missing from src/schema.ts."""
    schema = (CLIENT / "src" / "schema.ts").read_text(encoding="utf-8")
    committed = _committed()
    missing = [p for p in committed["paths"] if f'"{p}": {{' not in schema]
    missing += [m for m in committed["components"]["schemas"] if f"        {m}: {{" not in schema]
    assert not missing, f"src/schema.ts lacks {missing}: run `npm run generate` in clients/typescript"
