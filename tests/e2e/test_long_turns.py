"""Long messages over HTTP (issue 44) on the shared stack: a 100,000-character reply is
recorded whole, a question about its middle finds it first with the passage that holds the
answer (by its words at once; the passages' vectors, embedded by the shard in the background, are
tests/integration/test_long_turns_actor.py's), the context quotes it within its budget, the turns
route gives it back whole, and a side over the limit is refused by name."""

from __future__ import annotations

import random

from tests.e2e.running import Running

TENANT = "long-turns"
FACT = (
    "Decision: the nightly export job moves from 02:00 to 04:30 UTC, because the billing "
    "snapshot now finishes at 04:10."
)


def _log(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    words = ("worker", "queue", "retry", "token", "parser", "schema", "socket", "render", "vendor", "lint")
    lines, total = [], 0
    while total < chars:
        line = f"[{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}] DEBUG " + " ".join(rng.choices(words, k=10))
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:chars]


def test_a_100k_character_reply_is_kept_whole_and_found_by_its_middle(agents_stack: Running) -> None:
    stack = agents_stack
    key = stack.new_key("create", TENANT)
    reply = _log(50_000, seed=1) + "\n\n" + FACT + "\n\n" + _log(50_000, seed=2)
    turns = [
        {"user": "Can you look at why the dashboard is slow?", "agent": "It waits on the session cache."},
        {"user": "Here is the whole run log, what did we decide?", "agent": reply, "turn_id": "log"},
        {"user": "Thanks. Let's plan the release notes next.", "agent": "I will draft them."},
    ]
    answer = stack.call("POST", "/v1/sessions/s1/turns/batch", key, {"turns": turns})
    assert answer.status_code == 201, answer.text
    assert answer.json()["missing"] == {}  # working memory took it too (compressing what is over its budget)

    found = stack.call("POST", "/v1/search", key, {"query": "When does the nightly export job run now?", "top_k": 5})
    assert found.status_code == 200, found.text
    best = found.json()["hits"][0]
    assert best["id"] == "log"
    assert best["span"]["side"] == "agent" and FACT in reply[best["span"]["start"] : best["span"]["end"]]
    assert FACT in best["text"] and len(best["text"]) < 3_000

    # The context quotes the passage too, within its budget, beside working memory that had to
    # take the 100,000 characters in (it compresses what is over its own budget).
    context = stack.call("POST", "/v1/context", key, {
        "message": "When does the nightly export job run now?", "session_id": "s2", "max_tokens": 1000,
    })
    assert context.status_code == 200, context.text
    assert context.json()["token_count"] <= 1000 and FACT in context.json()["context"]
    same_session = stack.call("POST", "/v1/context", key, {"message": "and the release notes?", "session_id": "s1"})
    assert same_session.status_code == 200, same_session.text

    page = stack.call("GET", "/v1/sessions/s1/turns", key)
    assert page.status_code == 200, page.text
    assert [t["agent"] for t in page.json()["turns"] if t["turn_id"] == "log"] == [reply]

    over = stack.call("POST", "/v1/sessions/s1/turns", key, {"user": "x" * 1_000_001})
    assert over.status_code == 422
    assert "user" in over.text and "1000000" in over.text


def test_an_interaction_with_a_100k_character_message_is_kept_whole(agents_stack: Running) -> None:
    """/v1/interactions is a write path too: it took 16,000 characters a side while a turn took
    1,000,000. The skill it may learn reads the opening (a trace of 4,000 characters a side)."""
    stack = agents_stack
    key = stack.new_key("create", TENANT)
    fact = FACT.replace("nightly export", "weekly audit")
    message = _log(50_000, seed=3) + "\n\n" + fact + "\n\n" + _log(50_000, seed=4)
    answer = stack.call("POST", "/v1/interactions", key, {
        "session_id": "s3", "user": message, "agent": "Noted.", "turn_id": "pasted", "success": True,
        "task_type": "general",
    })
    assert answer.status_code == 201, answer.text
    assert answer.json()["missing"] == {}
    page = stack.call("GET", "/v1/sessions/s3/turns", key)
    assert [t["user"] for t in page.json()["turns"] if t["turn_id"] == "pasted"] == [message]
    found = stack.call("POST", "/v1/search", key, {"query": "When does the weekly audit job run now?", "top_k": 5})
    assert found.status_code == 200 and found.json()["hits"][0]["id"] == "pasted", found.text
    over = stack.call("POST", "/v1/interactions", key, {"session_id": "s3", "user": "x" * 1_000_001})
    assert over.status_code == 422 and "user" in over.text
