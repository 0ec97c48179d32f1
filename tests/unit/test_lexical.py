"""The incremental BM25 index, rank fusion, and hybrid episodic search."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from strata.config import EpisodicSettings
from strata.episodic.memory import EpisodicMemory
from strata.episodic.ranking import NAMES_KEPT_FROM, speakers_token, without_speakers
from strata.episodic.summarize import ExtractiveSummarizer
from strata.episodic.turns import TurnInput, summary_inputs
from strata.retrieval import lexical
from strata.retrieval.lexical import LexicalIndex, cjk_share, rrf_fuse, score_fuse
from strata.retrieval.terms import extract_terms
from strata.store.records import InMemoryRecordStore

NOW = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)


def test_bm25_finds_exact_terms_and_ranks_rarer_terms_higher() -> None:
    index = LexicalIndex()
    index.add("a", "The deploy failed with ERR_CONN_RESET on staging")
    index.add("b", "The deploy went fine on staging")
    index.add("c", "Lunch was great")
    scores = index.scores("why ERR_CONN_RESET?")
    assert max(scores, key=scores.__getitem__) == "a" and "c" not in scores
    both = index.scores("deploy reset")
    assert both["a"] > both["b"]  # "reset" is rarer than "deploy"


def test_top_scored_agrees_with_scores_and_keep() -> None:
    index = LexicalIndex()
    for n, text in enumerate(["deploy failed on staging", "deploy went fine", "staging is down", "lunch"]):
        index.add(f"d{n}", text)
    scores = index.scores("deploy staging")
    ranked = index.top_scored("deploy staging", 3)
    assert [doc for doc, _ in ranked] == index.top("deploy staging", 3) == sorted(scores, key=lambda d: (-scores[d], d))
    assert all(score == pytest.approx(scores[doc]) for doc, score in ranked)
    kept = index.top_scored("deploy staging", 3, keep=lambda d: d != "d0")
    assert [doc for doc, _ in kept] == [doc for doc, _ in ranked if doc != "d0"]
    assert index.top_scored("deploy", 0) == [] and index.top_scored("nothing here", 3) == []


def test_bm25_chinese_bigrams_and_removal() -> None:
    index = LexicalIndex()
    index.add("t1", "我最喜欢的茶是龙井")
    index.add("t2", "我昨天去了上海出差")
    assert set(index.scores("我喜欢什么茶？")) == {"t1"}
    index.remove(["t1"])
    assert index.scores("龙井") == {} and len(index) == 1
    index.add("t2", "今天下雨")  # re-adding replaces
    assert index.scores("上海") == {} and "t2" in index.scores("下雨")


def test_numbers_meet_however_many_leading_zeros_they_are_written_with() -> None:
    index = LexicalIndex()
    index.add("birthday", "我表弟的生日是7月15日。")
    index.add("phone", "My cousin's number ends in 0715")
    index.add("other", "我表妹的生日是12月3日。")
    assert set(index.scores("那个生日是07月15日的人")) >= {"birthday"}
    found = index.scores("07月15日")
    assert found["birthday"] > 2 * found["other"]  # the other date shares only 月 and 日
    # A number is its value, not its digits: 0715 is 715, so "7" or "15" alone do not reach it.
    assert "phone" not in found and "phone" in index.scores("715") and "phone" in index.scores("00715")
    assert extract_terms("0 00 007 Bond") == {"0", "7", "bond"}


def test_rrf_fuse_weights_and_ranks() -> None:
    fused = rrf_fuse({"dense": ["x", "y", "z"], "lexical": ["z", "x"]}, {"dense": 0.5, "lexical": 0.5})
    ids = [doc for doc, _, _ in fused]
    assert ids[0] == "x" and set(ids) == {"x", "y", "z"}
    top_score, top_ranks = fused[0][1], fused[0][2]
    assert top_ranks == {"dense": 1, "lexical": 2} and 0 < top_score <= 1
    assert rrf_fuse({"dense": ["q"], "lexical": ["q"]}, {"dense": 1, "lexical": 1})[0][1] == pytest.approx(1.0)
    only_lexical = rrf_fuse({"dense": ["x", "y"], "lexical": ["y"]}, {"dense": 0.0, "lexical": 1.0})
    assert only_lexical[0][0] == "y"


def test_cjk_share() -> None:
    assert cjk_share("hello") == 0.0 and cjk_share("你好") == 1.0
    assert cjk_share("我用 Python") == pytest.approx(2 / 8) and cjk_share("123 !") == 0.0


def unit(k: int, dim: int = 8) -> np.ndarray:
    v = np.zeros(dim, np.float32)
    v[k % dim] = 1.0
    return v


def test_a_search_reads_its_query_s_terms_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scores of turns and summaries, their relevance and the feedback terms all need the
    query's terms; a 16,000-character query's cost 2-8 ms each, read four times a search."""
    store = InMemoryRecordStore()
    store.ensure_collection("c", dim=8)
    memory = EpisodicMemory("t", store=store, collection="c", settings=EpisodicSettings())
    turns = memory.prepare(
        "s", [TurnInput(user=f"deploy note {n}", timestamp=NOW + timedelta(minutes=n)) for n in range(12)], now=NOW
    )
    memory.record(turns, np.stack([unit(n) for n in range(12)]))
    summary = ExtractiveSummarizer().summarize(summary_inputs(turns[:6]))
    memory.add_summary(turns[:6], summary, unit(3))
    read: list[str] = []
    real = lexical.lexical_terms
    def lexical_terms(text: str) -> frozenset[str]:  # each text read, recorded
        read.append(text)
        return real(text)

    monkeypatch.setattr(lexical, "lexical_terms", lexical_terms)
    query = "which deploy note mentions the staging bucket? " * 40
    lexical.query_terms.cache_clear()
    assert memory.search(unit(0), query_text=query, top_k=5)
    assert read.count(query) == 1


def test_hybrid_search_finds_an_exact_term_the_vectors_miss() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("c", dim=8)
    memory = EpisodicMemory("t", store=store, collection="c", settings=EpisodicSettings())
    inputs = [TurnInput(user=f"filler turn {n}", timestamp=NOW + timedelta(minutes=n)) for n in range(20)]
    inputs.append(TurnInput(user="The upload failed with ERR_CONN_RESET", timestamp=NOW + timedelta(hours=1)))
    turns = memory.prepare("s", inputs, now=NOW)
    # The error turn's vector points away from the query; only the lexical path can find it.
    # The fillers' cosines fall off as in a real memory: a few near the query, most far
    # (were all twenty as close as the best, a score fusion would rightly rank them first),
    # and the nearest are not each other's neighbours in time (were they, each would also
    # take a share of the others' through the neighbour-aware dense score).
    order = [0, 7, 14, 1, 8, 15, 2, 9, 16, 3, 10, 17, 4, 11, 18, 5, 12, 19, 6, 13]
    cosines = [0.6 * 0.85**n for n in order]
    fillers = [c * unit(0) + np.sqrt(1 - c * c) * unit(1 + n % 4) for n, c in enumerate(cosines)]
    vectors = np.stack([*fillers, unit(5)]).astype(np.float32)
    memory.record(turns, vectors)
    query = unit(0)
    dense_only = memory.search(query, top_k=5)
    assert all("ERR_CONN_RESET" not in h.text for h in dense_only)
    hybrid = memory.search(query, query_text="what was ERR_CONN_RESET about?", top_k=5)
    hit = next(h for h in hybrid if "ERR_CONN_RESET" in h.text)
    assert "lexical" in hit.ranks and hit.ranks["lexical"] == 1
    assert all(0 <= h.score <= 1 for h in hybrid)
    memory.forget_session("s")
    assert memory.search(query, query_text="ERR_CONN_RESET", top_k=5) == []


def test_chinese_queries_lean_on_the_lexical_path() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("c", dim=8)
    memory = EpisodicMemory("t", store=store, collection="c", settings=EpisodicSettings())
    english = memory._fusion_weights("what tea do I like")
    chinese = memory._fusion_weights("我喜欢什么茶")
    assert english["dense"] == pytest.approx(0.6) and chinese["dense"] == pytest.approx(0.05)
    assert chinese["lexical"] == english["lexical"] == pytest.approx(0.4)


def test_dense_query_drops_the_speakers_it_names() -> None:
    store = InMemoryRecordStore()
    store.ensure_collection("c", dim=8)
    memory = EpisodicMemory("t", store=store, collection="c", settings=EpisodicSettings())
    turns = memory.prepare(
        "s", [TurnInput(user="I love pottery", speaker="Caroline"), TurnInput(user="我喜欢茶", speaker="小明")], now=NOW
    )
    memory.record(turns, np.stack([unit(0), unit(1)]))
    assert memory.dense_query("What did Caroline's sister research?") == "What did sister research?"
    assert memory.dense_query("小明喜欢什么？") == "喜欢什么？"
    assert memory.dense_query("What about Carolineville?") == "What about Carolineville?"
    assert memory.dense_query("Caroline?") == "Caroline?"  # nothing left: keep the query
    # A long message keeps its names: a small share of it, and not worth a second embedding.
    long = "Caroline said " + "the deploy failed again " * 60
    assert len(long) >= NAMES_KEPT_FROM and memory.dense_query(long) == long
    assert memory.dense_query(long[: NAMES_KEPT_FROM - 1]) == long[: NAMES_KEPT_FROM - 1].replace("Caroline ", "", 1)


def test_speakers_token_changes_with_the_set_of_speakers_only() -> None:
    """A caller keeps a tenant's speakers to make dense_query's text itself; the token tells it when
    to read them again: a new speaker or a speaker's last turn gone changes it, another turn not."""
    store = InMemoryRecordStore()
    store.ensure_collection("c", dim=8)
    memory = EpisodicMemory("t", store=store, collection="c", settings=EpisodicSettings())

    def record(session: str, speaker: str) -> None:
        memory.record(memory.prepare(session, [TurnInput(user="hello there", speaker=speaker)], now=NOW), unit(0)[None])

    empty = memory.speakers_token
    record("s1", "Caroline")
    caroline = memory.speakers_token
    record("s1", "Caroline")
    assert memory.speakers_token == caroline != empty and memory.speakers() == ["Caroline"]
    record("s2", "Melanie")
    both = memory.speakers_token
    assert both not in (caroline, empty) and memory.speakers() == ["Caroline", "Melanie"]
    assert both == speakers_token(["Melanie", "Caroline"])  # the same in every process
    memory.delete_session("s2")
    memory.drop_session("s2")
    assert memory.speakers_token == caroline and memory.speakers() == ["Caroline"]


def test_without_speakers_takes_the_longest_name_first() -> None:
    """The same text whatever order the names come in (a set's order differs between processes)."""
    for names in (["Ann", "Ann Lee"], ["Ann Lee", "Ann"]):
        assert without_speakers("Where did Ann Lee go with Ann?", names) == "Where did go with ?"


def test_chinese_words_join_the_bigrams() -> None:
    from strata.retrieval.lexical import lexical_terms

    terms = lexical_terms("他下周过生日")
    assert "w:过生日" in terms and "生日" in terms  # jieba's word beside the bigrams
    assert lexical_terms("deploy failed") == frozenset({"deploy", "fail"})  # no CJK: content terms only
    index = LexicalIndex()
    index.add("a", "我的上司生日是6月8号")
    index.add("b", "我的上司喜欢听音乐会")
    scores = index.scores("那个6月8日过生日的人是做什么的")
    assert max(scores, key=scores.__getitem__) == "a"


def test_numpy_scoring_matches_plain_bm25_through_removals_and_compaction() -> None:
    import math
    import random

    from strata.retrieval.lexical import LexicalIndex, lexical_terms

    rng = random.Random(7)
    words = [f"word{i}" for i in range(60)] + ["ERR_CONN_RESET", "部署", "数据库"]
    index = LexicalIndex(per_line=True)
    docs: dict[str, str] = {}
    for _ in range(4000):
        if docs and rng.random() < 0.45:
            gone = rng.choice(sorted(docs))
            index.remove([gone])
            del docs[gone]
        else:
            doc_id = f"d{rng.randrange(3000)}"
            text = "\n".join(" ".join(rng.choices(words, k=rng.randint(1, 6))) for _ in range(rng.randint(1, 3)))
            index.add(doc_id, text)
            docs[doc_id] = text
    assert len(index) == len(docs)

    def counts(text: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for line in text.splitlines():
            for term in lexical_terms(line):
                out[term] = out.get(term, 0) + 1
        return out

    table = {d: counts(t) for d, t in docs.items()}
    average = sum(sum(c.values()) for c in table.values()) / len(table)
    query = "word3 word17 ERR_CONN_RESET 部署"
    expected: dict[str, float] = {}
    for term in lexical_terms(query):
        df = sum(1 for c in table.values() if term in c)
        if not df:
            continue
        idf = math.log(1 + (len(table) - df + 0.5) / (df + 0.5))
        for d, c in table.items():
            if term in c:
                tf, length = c[term], sum(c.values())
                expected[d] = expected.get(d, 0.0) + idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
    got = index.scores(query)
    assert got.keys() == expected.keys()
    assert all(abs(got[d] - expected[d]) < 1e-3 * max(1.0, expected[d]) for d in got)
    best = sorted(expected, key=lambda d: (-round(expected[d], 4), d))[:10]
    assert index.top(query, 10)[:5] == best[:5]
    sevens = [d for d in sorted(got, key=lambda d: (-got[d], d)) if d.endswith("7")]
    assert index.top(query, 5, keep=lambda d: d.endswith("7")) == sevens[:5]


def test_a_query_scored_again_after_a_change_sees_the_change() -> None:
    """The last query's scores are reused only while the index is unchanged."""
    index = LexicalIndex()
    index.add("a", "the staging deploy failed")
    assert index.top("deploy", 5) == ["a"]
    index.add("b", "deploy deploy to production")
    assert set(index.top("deploy", 5)) == {"a", "b"}
    index.remove(["a"])
    assert index.top("deploy", 5) == ["b"]
    assert index.relevance("deploy", ["a", "b"])["a"] == 0.0


def test_score_fuse_normalises_each_path_then_weighs() -> None:
    scored = {"dense": {"x": 0.9, "y": 0.85, "z": 0.1}, "lexical": {"y": 8.0, "x": 1.0}}
    ranks = {"dense": ["x", "y", "z"], "lexical": ["y", "x"]}
    weights = {"dense": 0.6, "lexical": 0.4}
    fused = score_fuse(scored, weights, ranks, floors={"dense": 0.1, "lexical": 0.0})
    assert [doc for doc, _, _ in fused] == ["y", "x", "z"]
    assert fused[0][1] == pytest.approx(0.6 * 0.75 / 0.8 + 0.4)
    assert fused[1][1] == pytest.approx(0.6 + 0.4 / 8)
    assert fused[2] == ("z", 0.0, {"dense": 3})
    minmax = score_fuse(scored, weights, ranks)  # min-max: x, last on BM25, gets nothing from it
    assert {doc: score for doc, score, _ in minmax}["x"] == pytest.approx(0.6)
    assert score_fuse({"dense": {"q": 0.5}}, {"dense": 1.0}, {"dense": ["q"]}, floors={"dense": 0.0})[0][1] == 1.0
    # A path whose best is at or below its floor still orders its candidates (min-max).
    below = score_fuse({"dense": {"a": 0.02, "b": 0.04}}, {"dense": 1.0}, {"dense": ["b", "a"]}, floors={"dense": 0.05})
    assert [(doc, score) for doc, score, _ in below] == [("b", 1.0), ("a", 0.0)]
