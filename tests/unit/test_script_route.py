"""Routing by script (strata.providers.routes): a turn in a script MiniLM does not read is also
embedded by e5 and searched by it, with both real models and the episodic layer in process."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from strata.config import EmbeddingSettings, EpisodicSettings, StrataSettings
from strata.counting import COUNTER
from strata.episodic.memory import EpisodicMemory
from strata.episodic.turns import ROUTED, TurnInput
from strata.providers.embedder import E5_MODEL, embed_counted, make_embedder
from strata.providers.routes import ScriptRoute, non_latin_share, routed, script_route
from strata.store.records import InMemoryRecordStore

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SAID = [
    "我昨天在公园里跑了五公里",
    "晚饭吃的是牛肉面，很好吃",
    "下周二要去医院看牙医",
    "我女儿今年上小学三年级了",
    "公司明天开会讨论预算",
    "周末想去看一场电影",
    "最近在学弹吉他，手指很疼",
    "好的",  # short: the speaker label "user" would outweigh it, so the route reads what was said
    "We moved the staging cluster to the new region last Friday.",
]
GUITAR = "t6"


@pytest.mark.parametrize(("text", "share"), [
    ("最近在学弹吉他", 1.0),
    ("Привет, как дела", 1.0),
    ("Ich möchte Käse und Brötchen", 0.0),
    ("Tiếng Việt có dấu", 0.0),
    ("", 0.0),
    ("12345 !?", 0.0),
    ("user: 我女儿", 3 / 7),
])
def test_the_share_of_letters_outside_the_latin_script(text: str, share: float) -> None:
    assert non_latin_share(text) == pytest.approx(share)


def test_a_text_goes_to_the_second_model_when_most_of_its_letters_are_not_latin() -> None:
    assert routed("最近在学弹吉他，手指很疼")
    assert routed("Привет, как дела?")
    assert not routed("The dashboard API answers in 250 ms")
    assert not routed("吉他 is what I play")  # two ideographs, nine Latin letters
    assert not routed("x" * 3_000 + "吉" * 1_000_000)  # read from its opening: linear in nothing more


def test_the_route_is_on_with_minilm_and_off_with_a_multilingual_provider_or_when_unset() -> None:
    route = script_route(EmbeddingSettings())
    assert route is not None and route.model == E5_MODEL
    assert script_route(EmbeddingSettings()) is route  # one per process: the model loads once
    assert script_route(EmbeddingSettings(provider="e5")) is None
    assert script_route(EmbeddingSettings(script_route=None)) is None
    assert StrataSettings().embedding.script_route == "e5"


def test_a_vector_kept_in_a_payload_reads_back_and_another_models_does_not() -> None:
    route = ScriptRoute("m", (0.8, 0.9), lambda: make_embedder(EmbeddingSettings()))
    vector = np.random.default_rng(0).normal(size=384).astype(np.float32)
    vector /= np.linalg.norm(vector)
    kept = route.encode(vector)
    back = route.decode(kept)
    assert back is not None and float(back @ vector) > 0.9999
    assert route.decode({**kept, "model": "other"}) is None
    assert route.decode({"model": "m", "vector": "not base64!"}) is None
    assert route.decode({"model": "m"}) is None
    assert route.decode(None) is None
    # Its cosines move onto the first model's span: its lo and hi become the other's.
    assert route.placed(np.asarray([0.8, 0.9]), (0.1, 0.6)).tolist() == pytest.approx([0.1, 0.6])
    # A CJK query and a CJK turn by the CJK span (e5's Chinese cosines run higher), one flag a cosine.
    cjk = ScriptRoute("m", (0.8, 0.9), lambda: make_embedder(EmbeddingSettings()), cjk_span=(0.85, 0.95))
    placed = cjk.placed(np.asarray([0.85, 0.85]), (0.1, 0.6), np.asarray([True, False]))
    assert placed.tolist() == pytest.approx([0.1, 0.35])
    assert script_route(EmbeddingSettings()).cjk_span == (0.836, 0.899)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def minilm():  # type: ignore[no-untyped-def]
    return make_embedder(EmbeddingSettings())


def _memory(minilm, route: ScriptRoute | None, store: InMemoryRecordStore | None = None) -> EpisodicMemory:  # type: ignore[no-untyped-def]
    store = store or InMemoryRecordStore()
    store.ensure_collection("e", dim=384)
    settings = EpisodicSettings().for_embedder(EmbeddingSettings())
    return EpisodicMemory("t", store=store, collection="e", settings=settings, route=route)


def _record(memory: EpisodicMemory, minilm) -> None:  # type: ignore[no-untyped-def]
    turns = memory.prepare("s", [TurnInput(user=text, turn_id=f"t{n}") for n, text in enumerate(SAID)], now=T0)
    memory.record(turns, minilm.embed([t.text for t in turns]))


def _top(memory: EpisodicMemory, minilm, question: str) -> str:  # type: ignore[no-untyped-def]
    vector = minilm.embed_query([memory.dense_query(question)])[0]
    second = memory.routed_query(question)
    return memory.search(vector, query_text=question, top_k=3, include_summaries=False, routed_query=second)[0].id


@pytest.mark.parametrize("question", ["Which musical instrument am I learning?", "乐器"])
def test_a_chinese_turn_is_found_by_meaning_only_through_the_route(minilm, question: str) -> None:  # type: ignore[no-untyped-def]
    # Neither question shares a word with the turn: only a model that reads Chinese finds it.
    routed_memory = _memory(minilm, script_route(EmbeddingSettings()))
    _record(routed_memory, minilm)
    assert _top(routed_memory, minilm, question) == GUITAR
    plain = _memory(minilm, None)
    _record(plain, minilm)
    assert _top(plain, minilm, question) != GUITAR


def test_the_second_vector_is_kept_in_the_row_and_read_back_at_load(minilm) -> None:  # type: ignore[no-untyped-def]
    route = script_route(EmbeddingSettings())
    store = InMemoryRecordStore()
    memory = _memory(minilm, route, store)
    _record(memory, minilm)
    rows = {row.payload["turn_id"]: row for row in store.scan("e", tenant="t")}
    assert all(ROUTED in rows[f"t{n}"].payload for n in range(8))
    assert rows["t8"].payload[ROUTED] == {}  # the English turn: read by the route, not taken
    reloaded = _memory(minilm, route, store)
    reloaded.load()
    assert _top(reloaded, minilm, "Which musical instrument am I learning?") == GUITAR
    # A stack without the route reads the same rows by the first model alone.
    without = _memory(minilm, None, store)
    without.load()
    assert _top(without, minilm, "Which musical instrument am I learning?") != GUITAR


def test_forgetting_routed_turns_leaves_the_rest_searchable(minilm) -> None:  # type: ignore[no-untyped-def]
    memory = _memory(minilm, script_route(EmbeddingSettings()))
    _record(memory, minilm)
    assert _top(memory, minilm, "乐器") == GUITAR
    keys = memory.turn_keys("s", "t0")
    memory.delete_keys(*keys)
    memory.drop_keys(*keys)  # rows renumbered: the routed rows' places are found again
    assert _top(memory, minilm, "乐器") == GUITAR
    keys = memory.turn_keys("s", GUITAR)
    memory.delete_keys(*keys)
    memory.drop_keys(*keys)
    assert _top(memory, minilm, "乐器") != GUITAR
    turns = memory.prepare("s", [TurnInput(user="我在学钢琴", turn_id="t9")], now=T0)
    memory.record(turns, minilm.embed([t.text for t in turns]))  # a row appended after the renumbering
    assert _top(memory, minilm, "Which musical instrument am I learning?") == "t9"


def _legacy_store(minilm) -> InMemoryRecordStore:  # type: ignore[no-untyped-def]
    """Rows as an earlier version wrote them: neither the time a turn speaks of nor the route."""
    store = InMemoryRecordStore()
    _record(_memory(minilm, None, store), minilm)
    rows = store.scan("e", tenant="t")
    store.upsert("e", [replace(row, payload={k: v for k, v in row.payload.items() if k != "when"}) for row in rows])
    return store


def test_rows_written_before_are_brought_up_to_date_once(minilm) -> None:  # type: ignore[no-untyped-def]
    store = _legacy_store(minilm)
    route = script_route(EmbeddingSettings())
    memory = _memory(minilm, route, store)
    memory.load()
    stale = memory.stale(100)
    assert len(stale) == len(SAID)
    assert _top(memory, minilm, "乐器") != GUITAR  # not routed yet: searched by MiniLM alone
    written = memory.write_refreshed(memory.refreshed(stale))
    assert len(written) == len(SAID)
    memory.index_refreshed(written)
    assert memory.stale() == []
    assert _top(memory, minilm, "乐器") == GUITAR
    rows = {row.payload["turn_id"]: row.payload for row in store.scan("e", tenant="t")}
    assert all("when" in payload for payload in rows.values())
    assert rows[GUITAR][ROUTED]["model"] == E5_MODEL and rows["t8"][ROUTED] == {}
    again = _memory(minilm, route, store)
    again.load()
    assert again.stale() == []  # nothing is read again at the next load
    assert _top(again, minilm, "Which musical instrument am I learning?") == GUITAR


def test_a_turn_forgotten_while_it_was_brought_up_to_date_is_not_written_back(minilm) -> None:  # type: ignore[no-untyped-def]
    store = _legacy_store(minilm)
    memory = _memory(minilm, script_route(EmbeddingSettings()), store)
    memory.load()
    pairs = memory.refreshed(memory.stale(100))
    keys = memory.turn_keys("s", GUITAR)
    memory.delete_keys(*keys)
    memory.drop_keys(*keys)
    written = memory.write_refreshed(pairs)
    assert GUITAR not in {new.turn_id for _, new in written} and len(written) == len(SAID) - 1
    memory.index_refreshed(written)
    assert GUITAR not in {row.payload["turn_id"] for row in store.scan("e", tenant="t")}
    assert memory.stale() == []


def test_routed_turns_written_between_searches_keep_their_rows(minilm) -> None:  # type: ignore[no-untyped-def]
    # Each write appends to the routed rows that the search before it found (grown, not rebuilt).
    memory = _memory(minilm, script_route(EmbeddingSettings()))
    facts = ["我养了一只叫豆豆的狗", "我每周三去游泳", "我的车是红色的", "我在银行工作", "我喜欢吃辣的川菜",
             "我女儿学钢琴", "我们家住在十二楼", "我明年想去日本旅行", "我对猫毛过敏", "我最喜欢的颜色是绿色"]
    for n, fact in enumerate(facts * 2):
        turns = memory.prepare("s", [TurnInput(user=f"{fact}（第{n}次）", turn_id=f"f{n}")], now=T0)
        memory.record(turns, minilm.embed([t.text for t in turns]))
        assert _top(memory, minilm, f"{fact}（第{n}次）") == f"f{n}"


def _embedding_tokens(tenant: str) -> int:
    rows = [row for row in COUNTER.pending() if row.session == tenant]
    return sum(int(row.payload["tokens"].get("embedding", 0)) for row in rows)


def test_the_second_models_tokens_count_as_the_tenants_embedding_usage(minilm) -> None:  # type: ignore[no-untyped-def]
    route = script_route(EmbeddingSettings())
    assert route is not None
    store = InMemoryRecordStore()
    store.ensure_collection("e", dim=384)
    tenant = "usage-of-the-route"
    memory = EpisodicMemory(tenant, store=store, collection="e", settings=EpisodicSettings(), route=route)
    turns = memory.prepare("s", [TurnInput(user=text, turn_id=f"t{n}") for n, text in enumerate(SAID)], now=T0)
    memory.record(turns, minilm.embed([t.text for t in turns]))
    written = _embedding_tokens(tenant)
    # Eight of the nine turns are routed, each read as "passage: " and its words: more than a token each.
    assert written > 8 * 3
    question = "最近手指为什么疼？"
    _, (asked,) = embed_counted(route._model(), [memory.dense_query(question)], query=True)
    memory.routed_query(question)
    assert _embedding_tokens(tenant) == written + asked
    # Rows brought up to date in the background are the service's work, not the tenant's calls.
    memory.routed_vectors([TurnInput(user=SAID[0])], counted=False)
    assert _embedding_tokens(tenant) == written + asked


#: A long message of paragraphs on other things (each about one passage), one of them on a wedding.
PARAGRAPHS = [
    "今天上午开了两个会，讨论了下个季度的预算安排。财务部门希望每个项目都把开支再压缩一成。"
    "我们组的服务器费用占了大头，需要想办法优化。会后我整理了一份清单，列出了可以关掉的机器。",
    "项目的进度比预期慢了一点，需要和同事再对一下时间表。测试环境上周坏了两天，耽误了不少工作。"
    "产品经理希望我们月底前上线第一个版本，我觉得有点紧张，但还可以争取。",
    "午饭在公司楼下吃的，点了一份炒饭和一碗汤。那家店最近换了厨师，味道比以前好多了。"
    "同事推荐我下次试试他们的牛肉面，听说汤底是用骨头熬了一整夜的。",
    "最近天气转凉，早上出门要多穿一件外套。昨天忘了带伞，回家的时候被雨淋湿了。"
    "天气预报说这周末还会降温，我得把冬天的被子拿出来晒一晒。",
    "我妹妹下个月要结婚了，婚礼在杭州西湖边的一家酒店举办。新郎是她大学时的同学，两个人谈了五年恋爱。"
    "我答应了去当伴娘，得提前请好假，还要帮她准备婚礼上要放的照片和视频。",
    "晚上回家路上有点堵车，比平时多花了二十分钟。最近地铁在修，很多人都改开车上班了。"
    "我在考虑要不要换一条路线，或者干脆早一点出门，避开高峰时间。",
    "周末打算整理一下书架，把不看的书捐出去。有好几本小说是大学时买的，一直没有读完。"
    "社区图书馆正好在收旧书，可以一起送过去，也算给它们找个新家。",
    "新来的实习生学得很快，已经能独立处理简单的任务了。他以前学的是数学，写代码很细心。"
    "下周我准备让他试着负责一个小模块，看看他能不能把需求和测试都做好。",
]
#: Eight paragraphs, ~750 characters (three passages of CJK text): the wedding in the fifth.
DIARY = "\n\n".join(PARAGRAPHS)


def test_a_long_turn_in_another_script_is_found_by_the_middle_through_its_passages(minilm) -> None:  # type: ignore[no-untyped-def]
    route = script_route(EmbeddingSettings())
    memory = _memory(minilm, route)
    _record(memory, minilm)
    turns = memory.prepare("s", [TurnInput(user=DIARY, turn_id="diary")], now=T0)
    memory.record(turns, minilm.embed([t.text for t in turns]))
    [key] = memory.unembedded()
    texts = memory.texts_to_embed(key)
    assert len(texts) >= 3 and "西湖" not in texts[0]
    routed_vectors = memory.routed_passage_vectors(key, texts)
    assert len(routed_vectors) == len(texts)  # a routed turn's passages by the second model as well
    vectors = minilm.embed(texts)
    assert memory.write_passage_vectors(key, texts, vectors, routed_vectors)
    memory.index_passage_vectors(key, vectors, routed_vectors)
    assert not memory.unembedded()

    def where(memory: EpisodicMemory, question: str) -> tuple[int, str]:
        vector = minilm.embed_query([question])[0]
        hits = memory.search(vector, query_text=question, top_k=20, include_summaries=False,
                             routed_query=memory.routed_query(question))
        [(rank, hit)] = [(n, h) for n, h in enumerate(hits, 1) if h.id == "diary"]
        return rank, hit.text

    # Without the passages' e5 vectors the diary came 6th (its opening is about meetings), and
    # the second question, which shares no word with it, quoted another passage.
    rank, text = where(memory, "我妹妹什么时候结婚？")
    assert rank == 1 and "西湖" in text, text[:200]
    assert "西湖" in where(memory, "家里谁要办喜事了？")[1]

    # Kept in the passages' rows: a load reads them back, and nothing waits for its vectors.
    again = _memory(minilm, route, memory._store)  # type: ignore[arg-type]
    again.load()
    assert not again.unembedded()
    rank, text = where(again, "我妹妹什么时候结婚？")
    assert rank == 1 and "西湖" in text


def test_passages_of_a_routed_turn_written_before_their_second_vectors_wait_for_them(minilm) -> None:  # type: ignore[no-untyped-def]
    route = script_route(EmbeddingSettings())
    memory = _memory(minilm, route)
    turns = memory.prepare("s", [TurnInput(user=DIARY, turn_id="diary")], now=T0)
    memory.record(turns, minilm.embed([t.text for t in turns]))
    [key] = memory.unembedded()
    texts = memory.texts_to_embed(key)
    # As the last version wrote them: the first model's vectors only.
    assert memory.write_passage_vectors(key, texts, minilm.embed(texts))
    again = _memory(minilm, route, memory._store)  # type: ignore[arg-type]
    again.load()
    assert again.unembedded() == [key]  # the shard embeds them again, by both models
