"""The HTTP client's errors: Strata's JSON errors by status, and Serve's proxy's own 404 (its
routes not back yet after a restart) as a retryable 503."""

from __future__ import annotations

import httpx
import pytest

from strata.errors import NotFound, StoreUnavailable
from strata_serve.client import StrataClient


def _client(response: httpx.Response) -> StrataClient:
    return StrataClient("http://strata.test", "sk-strata-x", transport=httpx.MockTransport(lambda _: response))


def test_a_plain_404_from_serves_proxy_is_retryable() -> None:
    proxy = httpx.Response(404, text="Path '/v1/documents' not found. Ping http://.../-/routes for available routes.")
    with pytest.raises(StoreUnavailable) as raised:
        _client(proxy).list_documents()
    assert raised.value.details["retry_after_s"] == 1 and "retry" in raised.value.message


def test_stratas_own_404_stays_not_found() -> None:
    strata = httpx.Response(404, json={"error": "NotFound", "message": "no document 'd1'"})
    with pytest.raises(NotFound, match="no document 'd1'"):
        _client(strata).get_document("d1")
