"""Strata's memory model in plain Python: no Ray, no HTTP.

One subpackage per layer, each with its own helpers: :mod:`strata.working`,
:mod:`strata.episodic`, :mod:`strata.semantic`, :mod:`strata.procedural`. What
several layers share: :mod:`strata.retrieval` (vectors, BM25, fusion, the graph and
entities), :mod:`strata.context` (fitting layers into a budget), :mod:`strata.store`
(the record store, Milvus, versions, expiry), :mod:`strata.access` (keys, rate
limits, idempotency, audit), :mod:`strata.privacy` (PII) and :mod:`strata.providers`
(embedder, LLM, token counter). Beside them: :mod:`strata.config` (the settings),
:mod:`strata.schema` (the HTTP bodies and results), :mod:`strata.errors`,
:mod:`strata.ids`, :mod:`strata.layers` (the layer and path names),
:mod:`strata.limits` (shared sizes) and :mod:`strata.clock`.

This package imports none of them: import from the subpackages. The Ray actors
(``strata_actors``), the Serve app (``strata_serve``) and the ``strata`` command
(``strata_cli``) are built on top and are never imported from here.
"""

from __future__ import annotations

__all__: list[str] = []
