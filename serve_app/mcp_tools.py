"""The memory tools an MCP client sees: each a thin wrapper over one call of
:class:`~strata_serve.client.AsyncStrataClient`, so each operation is defined once, by its REST
route, and a tool's key may do exactly what that key may do over REST.

Where the client comes from is the transport's business: the server's lifespan yields a
:data:`Connect`, which gives each tool call a client (stdio: the process's own, with
``STRATA_API_KEY``, :mod:`strata_mcp.stdio`; HTTP: one with the caller's bearer key,
:mod:`strata_serve.mcp_http`). A Strata error (a 403, 404, 422 …)
comes back as an MCP tool error carrying Strata's message, and so does bad input the client
refuses before sending, or a Strata that does not answer; the server answers the next call.

The tools live beside the app because Serve serves them at ``/mcp``; the stdio server
(``strata mcp``) is a client of this package, never the other way round.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any, Literal, cast

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from strata.errors import StrataError
from strata.ids import ID_PATTERN
from strata.layers import Layer
from strata.limits import DOCUMENT_CHARS_MAX, MESSAGE_CHARS_MAX, TURN_CHARS_MAX
from strata_serve.client import AsyncStrataClient

__all__ = [
    "INSTRUCTIONS",
    "Connect",
    "add_document",
    "add_memory",
    "build_server",
    "find_skill",
    "forget",
    "get_context",
    "learn_skill",
    "list_sessions",
    "record_skill_outcome",
    "search_memory",
]

#: Gives one tool call the client to reach Strata with.
Connect = Callable[[Context], AbstractAsyncContextManager[AsyncStrataClient]]
#: What the server's lifespan yields: the transport's :data:`Connect`.
Lifespan = Callable[[MCPServer], AbstractAsyncContextManager[Connect]]

INSTRUCTIONS = """\
Strata is long-term memory in four layers: working memory (the current session's messages and \
notes), episodic memory (every turn of every session, searchable), semantic memory (documents) \
and procedural memory (skills learned from successful task traces).
Record what matters with add_memory; before answering, call get_context (one text block to put \
in front of you, fitted to a token budget) or search_memory (scored hits). Keep reference text \
with add_document. Before a multi-step task call find_skill; after it, record_skill_outcome; \
after a new task went well, learn_skill with its steps."""

_ID = ID_PATTERN.pattern.join("^$")
_SESSION = Annotated[
    str,
    Field(pattern=_ID, description="The conversation this belongs to (letters, digits, _ . : -); one per conversation"),
]
_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


@asynccontextmanager
async def _strata(ctx: Context) -> AsyncIterator[AsyncStrataClient]:
    """The call's client; Strata's errors, and input its client refuses, as tool errors."""
    connect = cast(Connect, ctx.request_context.lifespan_context)
    try:
        async with connect(ctx) as client:
            yield client
    except StrataError as exc:
        status = exc.details.get("status", exc.status_code)
        raise ToolError(f"{type(exc).__name__} ({status}): {exc.message}") from None
    except ValidationError as exc:
        raise ToolError(_invalid(exc)) from None
    except httpx.HTTPError as exc:
        raise ToolError(f"Strata did not answer ({type(exc).__name__}: {exc}); is it running?") from None


def _invalid(exc: ValidationError) -> str:
    """What is wrong with which field, in pydantic's words without its links to its documentation
    (``str(exc)`` ends each error with one, a URL an agent cannot act on)."""
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())
    return f"InvalidInput: {problems}"


class _Server(MCPServer):
    """The SDK's server, with arguments that fail a tool's schema reported as :func:`_invalid` says."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # The SDK wraps a failed argument check as "Error executing tool <name>: <str(exc)>".
            if not isinstance(exc.__cause__, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {_invalid(exc.__cause__)}") from exc.__cause__


def _out(model: BaseModel, *fields: str) -> dict[str, Any]:
    """The fields of a result an agent needs, without empty ones."""
    data = model.model_dump(mode="json", include=set(fields) if fields else None)
    return {k: v for k, v in data.items() if v not in (None, {}, [])}


async def add_memory(
    ctx: Context,
    text: Annotated[
        str,
        Field(
            min_length=1, max_length=TURN_CHARS_MAX,
            description=f"What was said (a turn: up to {TURN_CHARS_MAX:,} characters), or the note to keep"
            f" (up to {MESSAGE_CHARS_MAX:,})",
        ),
    ],
    session_id: _SESSION = "default",
    role: Annotated[
        Literal["user", "assistant", "note"],
        Field(
            description="user / assistant: a turn of the conversation, kept for good in episodic memory "
            "(and in the session's working memory); note: a fact or reminder for the current session only, "
            "kept in its working memory"
        ),
    ] = "user",
    speaker: Annotated[
        str | None, Field(max_length=64, description="The user's name, for a user turn (default 'user')")
    ] = None,
) -> dict[str, Any]:
    """Remember something said in a conversation, or a note for the current session.

    Use it for each user message and each answer worth remembering (role "user" / "assistant"),
    and for facts the agent wants in front of it later in this session (role "note").
    Returns the turn's id and time, or the session's working memory size after the note.
    """
    if role == "note" and len(text) > MESSAGE_CHARS_MAX:
        raise ToolError(
            f"InvalidInput: text: a note is at most {MESSAGE_CHARS_MAX:,} characters (it stays in working memory,"
            f" in front of the model); this one has {len(text):,}: keep it as a user or assistant turn instead"
        )
    async with _strata(ctx) as strata:
        if role == "note":
            state = await strata.add_working_items(session_id, [{"role": "system", "content": text}])
            return {
                "session_id": session_id,
                "kept": "note in working memory",
                "items": len(state.items),
                "total_tokens": state.total_tokens,
                "max_tokens": state.max_tokens,
            }
        if role == "user":
            recorded = await strata.record_turn(session_id, user=text, speaker=speaker)
        else:
            recorded = await strata.record_turn(session_id, agent=text)
    turn = recorded.turns[0]
    return {
        "session_id": session_id,
        "kept": f"{role} turn",
        "turn_id": turn.turn_id,
        "timestamp": turn.timestamp.isoformat(),
        **_out(recorded, "missing", "redacted"),
    }


async def search_memory(
    ctx: Context,
    query: Annotated[
        str,
        Field(min_length=1, max_length=MESSAGE_CHARS_MAX, description="What to look for, in words; may name a time"),
    ],
    layers: Annotated[
        list[Layer] | None,
        Field(
            min_length=1,
            description="Only these layers (working, episodic, semantic, procedural); leave it out for every one "
            "the key may read (an empty list is refused)",
        ),
    ] = None,
    session_id: Annotated[
        str | None, Field(description="Only this session's conversation (working and episodic memory)")
    ] = None,
    top_k: Annotated[int, Field(ge=1, le=50, description="How many hits")] = 10,
) -> dict[str, Any]:
    """Search memory: past turns and summaries, documents' passages, skills and session notes.

    Use it to look something up ("what did the user say about the deadline?", "the retry policy
    in the runbook"). Returns hits best first, each with its layer, kind, id, text and a score
    (higher is more relevant); a phrase like "last week" narrows turns to that time.
    """
    async with _strata(ctx) as strata:
        found = await strata.search(query, layers=layers, top_k=top_k, session_id=session_id)
    hits = [_out(h, "layer", "kind", "id", "text", "score", "session_id", "timestamp", "source") for h in found.hits]
    return {"hits": hits, **_out(found, "missing", "time_range")}


async def get_context(
    ctx: Context,
    message: Annotated[
        str, Field(min_length=1, max_length=MESSAGE_CHARS_MAX, description="The message about to be answered")
    ],
    session_id: _SESSION = "default",
    task_type: Annotated[
        str,
        Field(description="general, coding, debugging, deployment, research … (decides which layers are read)"),
    ] = "general",
    max_tokens: Annotated[
        int | None, Field(ge=64, le=200_000, description="Token budget of the context; default the server's")
    ] = None,
) -> dict[str, Any]:
    """The memory to put in front of the model before answering a message: one text block.

    Use it once per user message, before answering. It holds the session's working memory, then
    what episodic, semantic and procedural memory know about the message, fitted to the token
    budget. Returns the text ("context"), its token count and any layer left out, and why.
    """
    async with _strata(ctx) as strata:
        built = await strata.build_context(message, session_id, task_type=task_type, max_tokens=max_tokens)
    return _out(built, "context", "token_count", "max_tokens", "missing")


async def add_document(
    ctx: Context,
    text: Annotated[
        str, Field(min_length=1, max_length=DOCUMENT_CHARS_MAX, description="The document, plain text or Markdown")
    ],
    title: Annotated[str | None, Field(max_length=500)] = None,
    doc_id: Annotated[
        str | None,
        Field(pattern=_ID, description="Default: a new id; an existing id replaces it"),
    ] = None,
) -> dict[str, Any]:
    """Keep a document (notes, a runbook, a spec) in semantic memory, searchable by its passages.

    Returns its doc_id (to replace or forget it later), version and how many passages it was cut into.
    """
    async with _strata(ctx) as strata:
        doc = await strata.index_document(text, title=title, doc_id=doc_id)
    return _out(doc, "doc_id", "version", "status", "title", "children", "error")


async def find_skill(
    ctx: Context,
    task: Annotated[str, Field(min_length=1, max_length=2000, description="The task about to be done")],
    top_k: Annotated[int, Field(ge=1, le=20)] = 3,
) -> dict[str, Any]:
    """Find learned procedures (skills) for a task.

    Use it before a multi-step task (a deployment, a migration, a debugging session). Returns
    skills best first, each with its steps (with {placeholders}), pitfalls, success criteria and
    success rate so far. After using one, call record_skill_outcome with its skill_id.
    """
    async with _strata(ctx) as strata:
        found = await strata.find_skills(task, top_k=top_k)
    fields = (
        "skill_id",
        "skill_name",
        "description",
        "trigger_conditions",
        "steps",
        "common_pitfalls",
        "success_criteria",
        "uses",
        "success_rate",
        "score",
    )
    return {"skills": [_out(skill, *fields) for skill in found.skills]}


async def record_skill_outcome(
    ctx: Context,
    skill_id: Annotated[str, Field(description="The skill_id find_skill or learn_skill returned")],
    success: Annotated[bool, Field(description="Did following the skill achieve the task?")],
    notes: Annotated[str | None, Field(max_length=2000, description="What went wrong, or differently")] = None,
) -> dict[str, Any]:
    """Count one use of a skill, and whether it worked; the success rate decides how it ranks.

    Returns the skill's uses, successes and success rate.
    """
    async with _strata(ctx) as strata:
        skill = await strata.record_outcome(skill_id, success, notes=notes)
    return _out(skill, "skill_id", "version", "uses", "successes", "success_rate")


async def learn_skill(
    ctx: Context,
    task: Annotated[str, Field(min_length=1, max_length=2000, description="What the agent was asked to do")],
    trace: Annotated[
        list[str | dict[str, Any]],
        Field(
            min_length=1,
            max_length=200,
            description='The steps taken, in order: strings ("ran the migrations"), or objects such as '
            '{"tool": "shell", "command": "make deploy", "output": "ok"}',
        ),
    ],
    outcome: Annotated[str | None, Field(max_length=2000, description="How it ended")] = None,
) -> dict[str, Any]:
    """Learn a reusable skill from a task that went well, or improve the near-identical one.

    Use it after finishing a multi-step task successfully. Returns the skill (its id, name and
    steps) and whether it was merged into an existing one.
    """
    async with _strata(ctx) as strata:
        skill = await strata.extract_skill(task, trace, outcome=outcome)
    return _out(skill, "skill_id", "version", "skill_name", "description", "steps", "merged")


async def forget(
    ctx: Context,
    what: Annotated[Literal["session", "turn", "document", "skill"], Field(description="What kind of thing to forget")],
    id: Annotated[str, Field(min_length=1, description="Its session_id, turn_id, doc_id or skill_id")],
    session_id: Annotated[
        str | None, Field(pattern=_ID, description="For a turn: the session it belongs to (a search hit's session_id)")
    ] = None,
) -> dict[str, Any]:
    """Forget for good: a session (its turns, summaries and working memory), one turn of a
    session (its summaries are made again without it), a document, or a skill.

    To forget something the user said, find its turn with search_memory and pass the hit's id
    and session_id. Cannot be undone. Returns how many stored records were removed (for a
    session or a turn, per layer too).
    """
    if what == "turn" and session_id is None:
        raise ToolError("InvalidInput: session_id: forgetting a turn needs its session_id (a search hit has it)")
    async with _strata(ctx) as strata:
        if what in ("session", "turn"):
            # session_id is set for a turn: refused above without it
            forgot = await (
                strata.forget_session(id) if what == "session" else strata.forget_turn(cast(str, session_id), id)
            )
            by_layer = forgot.removed
            return {"forgot": what, "id": id, "removed": sum(by_layer.values()), "by_layer": by_layer}
        if what == "document":
            removed = (await strata.delete_document(id)).removed
        else:
            removed = (await strata.delete_skill(id)).removed
    return {"forgot": what, "id": id, "removed": removed}


async def list_sessions(
    ctx: Context,
    after: Annotated[str | None, Field(description="The next_after of the previous page")] = None,
    limit: Annotated[int, Field(ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    """List the conversations (sessions) memory holds.

    Use it to find a session_id to search, get context for, or forget. Returns sessions by id,
    each with its number of turns and its first and last turn's time; pass next_after back as
    after for the next page.
    """
    async with _strata(ctx) as strata:
        page = await strata.list_sessions(after=after, limit=limit)
    return page.model_dump(mode="json")


_TOOLS: tuple[tuple[Callable[..., Any], ToolAnnotations], ...] = (
    (add_memory, _WRITE),
    (search_memory, _READ),
    (get_context, _READ),
    (add_document, _WRITE),
    (find_skill, _READ),
    (record_skill_outcome, _WRITE),
    (learn_skill, _WRITE),
    (forget, ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)),
    (list_sessions, _READ),
)


def build_server(lifespan: Lifespan) -> MCPServer:
    """The MCP server with every memory tool.

    Args:
        lifespan: yields the :data:`Connect` the tools reach Strata with, for as long as the
            server runs.
    """
    # MCPServer configures the root logger when built (logging.basicConfig with rich's handler):
    # in the ingress that re-formatted every later log line of the process, its 500 lines
    # wrapped at 80 columns over several lines. The process's logging is not the library's.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server: MCPServer = _Server("strata", instructions=INSTRUCTIONS, lifespan=lifespan, log_level="WARNING")
    root.handlers[:] = handlers
    root.setLevel(level)
    for fn, hints in _TOOLS:
        server.add_tool(fn, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints, structured_output=True)
    return server
