"""Tests for the knowledge graph: rule extraction, resolution, ranking, and the LLM extractor.

The LLM extractor runs against the fake OpenAI-compatible server on loopback
(``tests.llm_server``); everything else is in memory.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

import strata.retrieval.graph as graph_module
from strata.config import LLMSettings
from strata.providers.llm import OpenAIChatLLM
from strata.retrieval.entities import (
    MAX_ENTITIES_PER_TEXT,
    Entity,
    Extraction,
    LLMExtractor,
    Relation,
    RuleExtractor,
    entity_key,
    make_extractor,
)
from strata.retrieval.entities.extraction import fold_text
from strata.retrieval.entity_match import LATIN_TOKEN
from strata.retrieval.graph import KnowledgeGraph
from tests.llm_server import chat_body, llm_server

RULES = RuleExtractor()


def names(extraction: Extraction) -> dict[str, str]:
    return {e.name: e.type for e in extraction.entities}


def triples(extraction: Extraction) -> set[tuple[str, str, str]]:
    return {(r.source, r.relation, r.target) for r in extraction.relations}


def ext(*entities: str | Entity, relations: tuple[tuple[str, str, str], ...] = ()) -> Extraction:
    return Extraction(
        tuple(e if isinstance(e, Entity) else Entity(e) for e in entities),
        tuple(Relation(*r) for r in relations),
    )


# --- keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, key",
    [
        ("Ray  Serve", "ray serve"),
        ("  “Caroline’s” ", "caroline"),
        ("'New York City'.", "new york city"),
        ("「记忆」", "记忆"),
        ("\uff21\uff30\uff29", "api"),  # "API" in fullwidth letters
        ("ray.get", "ray.get"),
        ("James'", "james"),
    ],
)
def test_entity_key_folds_case_space_quotes_possessive(name: str, key: str) -> None:
    assert entity_key(name) == key


# --- rules: English ----------------------------------------------------------------------


def test_rules_find_names_and_skip_sentence_initial_words() -> None:
    found = names(RULES.extract(
        "Caroline: Hey Mel! What a week. The trip to New York City was great. "
        "When we met Jon Snow, Ray Serve was down. I said thanks."
    ))
    assert found["Caroline"] == "person"  # speaker prefix
    assert found["Mel"] == "person"  # greeted
    assert {"New York City", "Jon Snow", "Ray Serve"} <= set(found)
    assert not {"Hey", "What", "The", "When", "I"} & set(found)


def test_rules_type_dates_weekdays_and_months() -> None:
    found = names(RULES.extract(
        "On May 7, 2023 we met; again on 2023-05-08 and 7 May 2023. See you Monday, or in June. May I ask?"
    ))
    for name in ("May 7, 2023", "2023-05-08", "7 May 2023", "Monday", "June"):
        assert found[name] == "date"
    assert "May" not in found  # the modal verb


def test_rules_find_identifiers_codes_and_quoted_terms() -> None:
    found = names(RULES.extract(
        "We got ERR_CONN_RESET from useEffect, then HTTP 429 from `ray.get` in serve_handle. "
        'Upgrade to Python 3.11 and read "Becoming Nicole" or \'the bridge\'. '
        'She said "I really do not think that this is going to work out at all."'
    ))
    for name in ("ERR_CONN_RESET", "useEffect", "ray.get", "serve_handle"):
        assert found[name] == "code"
    assert "HTTP 429" in found and found["Python 3.11"] == "tool"
    assert found["Becoming Nicole"] == "concept" and "the bridge" in found
    assert not any(len(n.split()) > 5 for n in found)  # the quoted sentence is no term
    assert "Give 3" not in names(RULES.extract("Give 3 examples. We run Java 17."))
    assert "Java 17" in names(RULES.extract("Give 3 examples. We run Java 17."))


def test_rules_extract_relations_between_entities() -> None:
    extraction = RULES.extract(
        "Strata uses Milvus and Redis. The API depends on Redis. Ray Serve runs on Kubernetes. "
        "Caroline works at Google. Mel lives in Boston. Strata is part of OpenMemory. "
        "Caroline is Mel's friend."
    )
    assert triples(extraction) >= {
        ("Strata", "uses", "Milvus"),
        ("Strata", "uses", "Redis"),
        ("API", "depends_on", "Redis"),
        ("Ray Serve", "runs_on", "Kubernetes"),
        ("Caroline", "works_at", "Google"),
        ("Mel", "lives_in", "Boston"),
        ("Strata", "part_of", "OpenMemory"),
    }
    assert ("Caroline", "is", "Mel") not in triples(extraction)
    found = names(extraction)
    assert (found["Google"], found["Boston"], found["Mel"]) == ("org", "place", "person")


@pytest.mark.parametrize(
    "text",
    ["I moved to New York City (NYC) last year.", "I moved to NYC (New York City) last year."],
)
def test_rules_merge_parenthesised_aliases_into_the_longer_name(text: str) -> None:
    (entity,) = [e for e in RULES.extract(text).entities if "York" in e.name]
    assert (entity.name, entity.aliases) == ("New York City", ("NYC",))


def test_rules_parenthesised_remarks_are_no_aliases() -> None:
    (entity,) = RULES.extract("I met Caroline (my old friend) and (sadly) left.").entities
    assert (entity.name, entity.aliases) == ("Caroline", ())


def test_rules_aliases_from_aka_phrases() -> None:
    extraction = RULES.extract("Robert, also known as Bob, works at Google. Elizabeth aka Liz is here.")
    by_name = {e.name: e for e in extraction.entities}
    assert by_name["Robert"].aliases == ("Bob",) and by_name["Elizabeth"].aliases == ("Liz",)
    assert ("Robert", "works_at", "Google") in triples(extraction)
    assert "Bob" not in by_name


# --- rules: Chinese ----------------------------------------------------------------------


def test_rules_chinese_people_places_and_relations() -> None:
    extraction = RULES.extract(
        "张伟在北京工作。李娜住在上海。Strata依赖Milvus。王明使用Python。北京大学（北大）位于海淀区。"
        "我们今天讨论了这个问题，到时候再说。2023年5月7日开会。"
    )
    found = names(extraction)
    assert (found["张伟"], found["李娜"], found["王明"]) == ("person", "person", "person")
    assert (found["北京"], found["上海"]) == ("place", "place")
    assert found["2023年5月7日"] == "date"
    assert not {"问题", "时候", "今天", "我们"} & set(found)
    assert triples(extraction) >= {
        ("张伟", "works_at", "北京"),
        ("李娜", "lives_in", "上海"),
        ("Strata", "depends_on", "Milvus"),
        ("王明", "uses", "Python"),
    }
    (pku,) = [e for e in extraction.entities if e.name == "北京大学"]
    assert pku.aliases == ("北大",)


def test_rules_cap_entities_per_text() -> None:
    text = " ".join(f"Meet Person{chr(65 + i // 26)}{chr(97 + i % 26)} today." for i in range(60))
    assert len(RULES.extract(text).entities) == MAX_ENTITIES_PER_TEXT


def test_rules_on_empty_and_plain_text() -> None:
    assert RULES.extract("") == Extraction()
    assert RULES.extract("   ") == Extraction()
    assert RULES.extract("i think so too, it was fun.") == Extraction()


# --- Extraction serialisation ---------------------------------------------------------------


def test_extraction_roundtrips_through_compact_json() -> None:
    extraction = RULES.extract("Caroline lives in New York City (NYC). Strata uses Milvus.")
    data = extraction.to_dict()
    assert set(data) == {"e", "r"}
    assert Extraction.from_dict(json.loads(json.dumps(data))) == extraction
    assert Extraction().to_dict() == {"e": [], "r": []}
    assert Extraction.from_dict(Extraction().to_dict()) == Extraction()


def test_extraction_from_dict_is_tolerant() -> None:
    assert Extraction.from_dict({}) == Extraction()
    verbose = {
        "entities": [{"name": "Redis", "type": "tool"}, {"name": "Strata", "aliases": ["the runtime", 3]},
                     {"type": "person"}, 42, "Milvus", ["Ray"]],
        "relations": [{"source": "Strata", "relation": "uses", "target": "Redis"}, ["a", "b"], None,
                      ["Strata", "uses", "Milvus"]],
    }
    assert Extraction.from_dict(verbose) == Extraction(
        (Entity("Redis", "tool"), Entity("Strata", "thing", ("the runtime",)), Entity("Milvus"), Entity("Ray")),
        (Relation("Strata", "uses", "Redis"), Relation("Strata", "uses", "Milvus")),
    )


# --- the graph: add / remove / resolution ----------------------------------------------------------


def _empty(graph: KnowledgeGraph) -> bool:
    tables = (graph._records, graph._mentions, graph._alias, graph._aliases_of, graph._adj, graph._names._forms,
              graph._names._cjk)
    return not any(tables) and not graph._names._cjk_lengths


def test_remove_leaves_nothing_from_removed_sources() -> None:
    graph = KnowledgeGraph()
    graph.add("s1", ext(Entity("New York City", "place", ("NYC",)), "Caroline",
                        relations=(("Caroline", "lives_in", "NYC"),)))
    graph.add("s2", ext("Caroline", "Strata", "北京", relations=(("Strata", "uses", "北京"),)))
    assert (len(graph), graph.sources()) == (4, 2)
    assert graph.entity("NYC") is not None

    graph.remove(["s1"])
    assert graph.entity("NYC") is None and graph.entity("New York City") is None
    assert graph.match("NYC and New York City") == []
    caroline = graph.entity("caroline")
    assert caroline is not None and caroline["sources"] == 1 and caroline["relations"] == []
    assert graph.expand(["Caroline"]) == {"caroline": 0}
    assert (len(graph), graph.sources()) == (3, 1)

    graph.remove(["s2", "unknown"])
    assert len(graph) == 0 and graph.sources() == 0 and _empty(graph)


def test_readding_a_source_replaces_its_extraction() -> None:
    graph = KnowledgeGraph()
    graph.add("s1", ext("Milvus", "Strata", relations=(("Strata", "uses", "Milvus"),)))
    graph.add("s1", ext("Redis"))
    assert graph.sources() == 1 and graph.entity("Milvus") is None
    assert graph.match("strata milvus redis") == ["redis"]
    graph.add("s1", Extraction())
    assert _empty(graph)


def test_resolution_merges_case_possessive_and_alias_variants() -> None:
    graph = KnowledgeGraph()
    graph.add("a", ext(Entity("Ray Serve", "tool")))
    graph.add("b", ext("ray serve", "Caroline's"))
    graph.add("c", ext(Entity("New York City", "place", ("NYC",))))
    graph.add("d", ext("NYC", "Caroline"))  # a plain mention of the alias
    assert len(graph) == 3
    serve = graph.entity("RAY SERVE")
    assert serve is not None and (serve["key"], serve["type"], serve["sources"]) == ("ray serve", "tool", 2)
    nyc = graph.entity("nyc")
    assert nyc is not None and (nyc["name"], nyc["aliases"], nyc["sources"]) == ("New York City", ["NYC"], 2)
    assert graph.match("caroline’s trip to NYC") == ["caroline", "new york city"]
    graph.remove(["c"])  # the alias goes with its source: NYC is its own entity again
    assert graph.match("NYC") == ["nyc"] and len(graph) == 3


def test_resolution_does_not_depend_on_insertion_order() -> None:
    sources = {
        "a": ext(Entity("NYC", "place", ("New York City",))),
        "b": ext(Entity("New York City", "place", ("NYC", "the Big Apple"))),
        "c": ext("Big Apple", "the big apple", relations=(("the big apple", "is", "Big Apple"),)),
    }
    views = []
    for order in (["a", "b", "c"], ["c", "b", "a"], ["b", "c", "a"]):
        graph = KnowledgeGraph()
        for sid in order:
            graph.add(sid, sources[sid])
        views.append((len(graph), graph.entity("NYC"), graph.match("the big apple and nyc"), graph.rank("NYC")))
    assert views[0] == views[1] == views[2]
    assert views[0][1] is not None and views[0][1]["key"] == "new york city"


def test_entity_reports_relations_and_types() -> None:
    graph = KnowledgeGraph()
    graph.add("s1", RULES.extract("Strata uses Milvus. Strata depends on Redis."))
    graph.add("s2", RULES.extract("Strata uses Milvus."))
    graph.add("s3", ext(Entity("Milvus", "tool")))
    strata = graph.entity("strata")
    assert strata == {
        "key": "strata",
        "name": "Strata",
        "type": "thing",
        "aliases": [],
        "relations": [{"relation": "uses", "target": "Milvus"}, {"relation": "depends_on", "target": "Redis"}],
        "incoming": [],
        "sources": 2,
    }
    milvus = graph.entity("Milvus")
    assert milvus is not None and milvus["type"] == "tool"
    assert milvus["incoming"] == [{"relation": "uses", "source": "Strata"}]
    assert graph.entity("nothing here") is None and graph.entity("") is None


# --- the graph: match / rank / expand -------------------------------------------------------------


def test_match_longest_first_case_insensitive_plural_and_cjk() -> None:
    graph = KnowledgeGraph()
    graph.add("s1", ext("New York", "New York City", "York", "ERR_CONN_RESET", "dog", "张伟", "北京大学", "北京"))
    assert graph.match("I love new york city and YORK!") == ["new york city", "york"]
    assert graph.match("why err_conn_reset? my dogs") == ["err_conn_reset", "dog"]
    assert graph.match("张伟去了北京大学，然后回北京") == ["张伟", "北京大学", "北京"]
    assert graph.match("nothing known") == []


def test_match_tries_long_n_grams_only_where_a_known_form_starts_and_finds_what_trying_all_would() -> None:
    """``match`` skips n-grams that cannot be a known form (their first word starts none, or
    they are longer than the longest); over random queries of the graph's own words, as
    sources come and go, it finds exactly what trying every n-gram up to six words finds."""

    def every_n_gram(graph: KnowledgeGraph, query: str) -> list[str]:
        tokens = LATIN_TOKEN.findall(" ".join(fold_text(query).split()))
        found: dict[str, None] = {}
        i = 0
        while i < len(tokens):
            for n in range(min(6, len(tokens) - i), 0, -1):
                node = graph._names.lookup_form(tokens[i : i + n], graph._canon)
                if node is not None:
                    found.setdefault(node)
                    i += n
                    break
            else:
                i += 1
        return list(found)

    rng = random.Random(3)
    names = ["New York", "New York City", "York", "Big Apple Pie Company", "apple", "city hall", "Hall", "dogs"]
    vocabulary = [w for name in names for w in name.lower().split()] + ["the", "a", "of", "cats", "new", "pies"]
    graph = KnowledgeGraph()
    for step in range(40):
        if step % 3 == 2 and graph:
            graph.remove([f"s{rng.randrange(step)}"])
        graph.add(f"s{step}", ext(*rng.sample(names, 2)))
        for _ in range(10):
            query = " ".join(rng.choice(vocabulary) for _ in range(rng.randrange(1, 14)))
            assert graph.match(query) == every_n_gram(graph, query), query


def test_rank_weights_rare_entities_ignores_hubs_and_never_cuts_through_a_tie() -> None:
    graph = KnowledgeGraph()
    for i in range(6):
        graph.add(f"turn-{i}", ext("Caroline"))
    graph.add("turn-9", ext("Caroline", "Becoming Nicole"))
    graph.add("turn-8", ext("Becoming Nicole"))
    # Caroline is in 7 of the 8 sources: she tells them apart no better than chance.
    assert [sid for sid, _ in graph.rank("Did Caroline finish Becoming Nicole?")] == ["turn-8", "turn-9"]
    assert graph.rank("Caroline") == []
    for i in range(10, 16):
        graph.add(f"turn-{i}", ext("Melanie" if i < 14 else "Oscar"))
    # Melanie is in 4 of 14 sources, all tied: a cut at 2 would be arbitrary, so none is returned.
    assert graph.rank("Melanie", limit=2) == []
    assert [sid for sid, _ in graph.rank("Melanie", limit=4)] == ["turn-10", "turn-11", "turn-12", "turn-13"]
    ranked = graph.rank("Oscar or Melanie?")
    assert [sid for sid, _ in ranked[:2]] == ["turn-14", "turn-15"]  # the rarer entity first
    assert ranked[0][1] > ranked[-1][1] > 0
    assert graph.rank("unknown words") == [] and graph.rank("Oscar", limit=0) == []


def test_rank_one_hop_reaches_a_source_that_mentions_only_the_neighbour() -> None:
    graph = KnowledgeGraph()
    graph.add("fact", RULES.extract("Strata uses Milvus."))
    graph.add("detail", RULES.extract("Milvus needs etcd_cluster to be healthy."))
    graph.add("other", RULES.extract("Kubernetes restarted."))
    assert [sid for sid, _ in graph.rank("what does Strata run on?", hops=0)] == ["fact"]
    ranked = dict(graph.rank("what does Strata run on?", hops=1))
    assert set(ranked) == {"fact", "detail"} and ranked["fact"] > ranked["detail"]
    assert graph.expand(["Strata"], hops=2) == {"strata": 0, "milvus": 1}
    assert graph.expand(["nope"]) == {}


def test_rank_bonus_for_a_source_stating_a_relation_between_matched_entities() -> None:
    graph = KnowledgeGraph()
    graph.add("a-mentions", ext("Strata", "Redis"))
    graph.add("b-states", ext("Strata", "Redis", relations=(("Strata", "depends_on", "Redis"),)))
    ranked = graph.rank("Strata and Redis", hops=0)
    assert [sid for sid, _ in ranked] == ["b-states", "a-mentions"]


def test_expand_follows_hops_in_both_directions() -> None:
    graph = KnowledgeGraph()
    graph.add("s", ext("A1", "B1", "C1", "D1", relations=(("A1", "uses", "B1"), ("C1", "uses", "B1"),
                                                          ("C1", "is", "D1"))))
    assert graph.expand(["b1"], hops=1) == {"b1": 0, "a1": 1, "c1": 1}
    assert graph.expand(["A1"], hops=3) == {"a1": 0, "b1": 1, "c1": 2, "d1": 3}
    assert graph.expand(["A1"], hops=0) == {"a1": 0}


@pytest.mark.parametrize("fanout", [32, 2])
def test_interleaved_writes_and_reads_match_a_fresh_rebuild(fanout: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read memos must never go stale: after any write, answers equal a graph rebuilt from scratch."""
    monkeypatch.setattr(graph_module, "_RANK_FANOUT", fanout)  # 2: hubs get cut, the memo matters
    rng = random.Random(5)
    words = [f"W{i}" for i in range(16)]

    def extraction() -> Extraction:
        picked = rng.sample(words[:4], 1) + rng.sample(words[4:], 2)  # W0..W3 are hubs
        entities = [Entity(w, aliases=(rng.choice(words),) if rng.random() < 0.03 else ()) for w in picked]
        return ext(*entities, relations=((picked[0], "uses", picked[1]), (picked[1], "is", picked[2])))

    graph, current = KnowledgeGraph(), dict[str, Extraction]()
    queries = [" ".join(rng.sample(words, 2)) for _ in range(6)]
    for step in range(300):
        sid = f"s{rng.randrange(30)}"
        if rng.random() < 0.3:
            graph.remove([sid])
            current.pop(sid, None)
        else:
            current[sid] = extraction()
            graph.add(sid, current[sid])
        if step % 3:
            continue
        fresh = KnowledgeGraph()
        for key in rng.sample(sorted(current), len(current)):
            fresh.add(key, current[key])
        for query in queries:
            assert graph.rank(query, hops=2) == fresh.rank(query, hops=2), (step, query)
        assert len(graph) == len(fresh)
        assert [graph.entity(w) for w in words] == [fresh.entity(w) for w in words]


def test_rule_extractions_build_a_graph_end_to_end() -> None:
    graph = KnowledgeGraph()
    turns = [
        "Caroline: I joined the LGBTQ support group on Tuesday.",
        "Melanie: That's awesome, Caroline! I'm reading \"Becoming Nicole\".",
        "Caroline: My friend Jon Snow lives in Boston.",
        "Melanie: Boston is lovely in June.",
    ]
    for i, text in enumerate(turns):
        graph.add(f"t{i}", Extraction.from_dict(RULES.extract(text).to_dict()))
    assert graph.entity("Jon Snow") is not None
    ranked = [sid for sid, _ in graph.rank("Where does Jon Snow live?")]
    assert ranked[:2] == ["t2", "t3"]


# --- the LLM extractor ----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def _llm(url: str) -> OpenAIChatLLM:
    return OpenAIChatLLM(LLMSettings(base_url=url, api_key="x", timeout_s=5.0, max_retries=0))


GOOD = json.dumps({
    "entities": [
        {"name": "Strata", "type": "Project", "aliases": ["the runtime"]},
        {"name": "Milvus", "type": "Software"},
        {"name": "Caroline", "type": "person", "aliases": None, "extra": 1},
    ],
    "relations": [
        {"source": "the runtime", "relation": "Depends On", "target": "Milvus"},
        {"source": "Strata", "relation": "uses", "target": "Kafka"},  # Kafka is no entity
    ],
})


def test_llm_extractor_valid_reply() -> None:
    with llm_server(lambda n: GOOD) as (url, received):
        extractor = LLMExtractor(_llm(url))
        extraction = extractor.extract("Strata depends on Milvus, said Caroline. " * 500)
    assert extraction.entities == (
        Entity("Strata", "project", ("the runtime",)), Entity("Milvus", "tool"), Entity("Caroline", "person"),
    )
    assert extraction.relations == (Relation("Strata", "depends_on", "Milvus"),)
    (body,) = received
    # The reply's schema goes with the request (OpenAI's form first), and a bound on its length.
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["entities"] and "$ref" not in json.dumps(schema)
    assert body["max_tokens"] == 384
    assert len(body["messages"][1]["content"]) <= 6000  # long input is truncated
    assert (extractor.stats.calls, extractor.stats.fallbacks) == (1, 0)
    assert (extractor.stats.prompt_tokens, extractor.stats.completion_tokens) == (11, 7)


def test_llm_extractor_repairs_an_invalid_reply() -> None:
    replies = ['{"entities": [{"type": "tool"}]}', "```json\n" + GOOD + "\n```"]
    with llm_server(lambda n: replies[n]) as (url, received):
        extraction = LLMExtractor(_llm(url)).extract("Strata depends on Milvus.")
    assert [e.name for e in extraction.entities] == ["Strata", "Milvus", "Caroline"]
    assert len(received) == 2
    assert "previous reply was not valid" in received[1]["messages"][1]["content"]


def _fallback_case(script: Callable[[int], Any]) -> tuple[Extraction, LLMExtractor, int]:
    with llm_server(script) as (url, received):
        extractor = LLMExtractor(_llm(url))
        extraction = extractor.extract("Strata uses Milvus.")
    return extraction, extractor, len(received)


def test_llm_extractor_falls_back_to_rules_on_garbage_twice() -> None:
    extraction, extractor, requests = _fallback_case(lambda n: "I found Strata and Milvus!")
    assert requests == 2
    assert extraction == RULES.extract("Strata uses Milvus.")
    assert ("Strata", "uses", "Milvus") in triples(extraction)
    assert (extractor.stats.calls, extractor.stats.fallbacks) == (1, 1)


def test_llm_extractor_falls_back_on_server_error() -> None:
    extraction, extractor, requests = _fallback_case(
        lambda n: lambda: (500, {"error": {"message": "boom", "type": "server_error"}})
    )
    assert requests == 1
    assert extraction == RULES.extract("Strata uses Milvus.")
    assert extractor.stats.fallbacks == 1


def test_llm_extractor_falls_back_on_refusal_and_uses_a_custom_fallback() -> None:
    class Fixed:
        def extract(self, text: str) -> Extraction:
            return ext("Fixed")

    with llm_server(lambda n: lambda: (200, chat_body(None, refusal="no"))) as (url, _):
        extraction = LLMExtractor(_llm(url), fallback=Fixed()).extract("Strata uses Milvus.")
    assert extraction == ext("Fixed")


def test_make_extractor() -> None:
    class Echo:
        def complete(self, system: str, user: str, *, json_mode: bool = False, call: object = None) -> str:
            return GOOD

    assert isinstance(make_extractor(None), RuleExtractor)
    extractor = make_extractor(Echo())
    assert isinstance(extractor, LLMExtractor)
    assert [e.name for e in extractor.extract("anything").entities] == ["Strata", "Milvus", "Caroline"]
    assert extractor.stats.prompt_tokens == 0  # no usage to read
