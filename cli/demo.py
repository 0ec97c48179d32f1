"""The scripted demo: three sessions over two simulated days, then questions
whose answers sit in the earlier sessions."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from strata_serve.client import StrataClient

__all__ = ["run_demo"]

_DAY1 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)  # a Monday
_DAY2 = _DAY1 + timedelta(days=1)

_SESSIONS: list[tuple[str, datetime, list[tuple[str, str]]]] = [
    ("trip-planning", _DAY1, [
        ("I'm planning a trip to Lisbon in March with my sister Ana.", "Lovely! How long will you stay?"),
        ("Ten days. Please remember that I'm vegetarian and Ana is allergic to peanuts.",
         "Noted: vegetarian meals for you, no peanuts for Ana."),
        ("We want a quiet hotel in Alfama with a view of the river.", "I'll look for quiet places in Alfama."),
        ("Our budget is about 150 euros per night.", "Got it, around 150 EUR per night."),
    ]),
    ("work-bug", _DAY1 + timedelta(hours=6), [
        ("The deploy script fails with ERR_CONN_RESET when it uploads to the staging bucket.",
         "That usually means the proxy closes idle connections; try raising the upload timeout."),
        ("Raising the timeout to 120 seconds fixed it.", "Great, I'll remember that fix for the staging deploy."),
        ("I need to tell Marco about the fix before Friday.", "I'll remind you about Marco."),
    ]),
    ("chat-day2", _DAY2, [
        ("Good morning! I started learning Portuguese on Duolingo yesterday.", "Boa sorte! That will help in Lisbon."),
        ("我最喜欢的茶是龙井，请记住。", "好的，我记住了：你最喜欢龙井茶。"),
    ]),
]

_QUESTIONS: list[tuple[str, str]] = [
    ("What should I keep in mind about food for our trip?", "trip-planning"),
    ("What fixed the deploy error yesterday?", "chat-day2"),
    ("Which hotel area did we want, and what was the budget?", "chat-day2"),
    ("我喜欢什么茶？", "chat-day2"),
]


def run_demo(url: str, api_key: str, *, say: Callable[[str], None] = print, max_tokens: int = 400) -> None:
    with StrataClient(url, api_key) as client:
        for session_id, start, turns in _SESSIONS:
            with contextlib.suppress(Exception):  # a first run has nothing to forget
                client.forget_session(session_id)  # a re-run starts from a clean slate
            client.record_turns(
                session_id,
                [{"user": u, "agent": a, "timestamp": start + timedelta(minutes=2 * n)}
                 for n, (u, a) in enumerate(turns)],
            )
            say(f"recorded session {session_id!r}: {len(turns)} turns on {start:%a %d %b}")
        now = _DAY2 + timedelta(hours=3)
        for question, _ in _QUESTIONS:
            result = client.build_context(question, "demo-questions", max_tokens=max_tokens, reference_time=now)
            say("")
            say(f"Q: {question}")
            if result.time_range:
                say(f"   (time expression {result.time_range.expression!r} -> "
                    f"{result.time_range.start:%Y-%m-%d} .. {result.time_range.end:%Y-%m-%d})")
            episodic = next((s for s in result.sections if s.layer == "episodic"), None)
            for item in (episodic.items if episodic else [])[:2]:
                text = " ".join(item.text.split())
                say(f"   relevance {item.relevance or 0:.2f}  [{item.session_id}, {item.timestamp:%a %H:%M}] "
                    f"{text[:100]}")
            say(f"   --- context returned: {result.token_count} tokens (budget {result.max_tokens}) ---")
            for line in result.context.splitlines():
                say(f"   | {line[:160]}")
