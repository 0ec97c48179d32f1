"""Write Strata's OpenAPI document, built in process from the API's app (no stack), to
clients/typescript/openapi.json, the source of src/schema.ts (`npm run generate`).

tests/unit/test_typescript_openapi.py fails when the committed file and the app differ.
Usage: python clients/typescript/scripts/dump_openapi.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "openapi.json"


def document() -> dict[str, Any]:
    """The document ``GET /openapi.json`` serves."""
    from strata_serve import api

    return api.app.openapi()


def text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(text(document()), encoding="utf-8")
    print(f"wrote {OUT}")
