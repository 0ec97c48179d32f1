"""HTTP clients for agents: :class:`StrataClient` (sync) and :class:`AsyncStrataClient`.

Both have the same method names as the API and as the in-cluster client
(:class:`strata_actors.client.InClusterClient`) and return the same typed models.
Each method is written once, as a request spec (a function returning a
``_Call``); the two classes bind every spec to their transport with
``_sync`` / ``_async``, which keep the spec's signature for type checkers.

The synchronous client sends through httpx. The asynchronous one sends through aiohttp over
the network (httpx's async request path cost 1.7-2.0 ms of the caller's CPU per context call
here, aiohttp's about half of that: docs/benchmarks.md), and through httpx when given an
httpx transport (an ASGI app in the same process, a mock in a test). Either way a request that
gets no answer raises an ``httpx.HTTPError``, and an answer that is an error a
:class:`~strata.errors.StrataError`.

Both retry a 429 or a 503 as :mod:`strata_serve.retry` says (bounded, with jitter, after the
server's ``Retry-After``), a read always, a write only with the ``Idempotency-Key`` each write
carries (a new key per call, the same for each of its attempts; ``idempotency_keys=False`` sends
none, and then writes are not retried).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar

import aiohttp
import httpx
from pydantic import BaseModel

from strata.access.scopes import Forbidden
from strata.errors import (
    EmbedderError,
    InvalidInput,
    LLMError,
    NotFound,
    PreconditionRequired,
    RateLimited,
    StoreUnavailable,
    StrataError,
    Unauthorized,
    VersionConflict,
)
from strata.schema import (
    AuditHistory,
    ContextRequest,
    ContextResult,
    DocumentDeleted,
    DocumentIn,
    DocumentList,
    DocumentOut,
    EntityOut,
    ForgetResult,
    Health,
    InteractionIn,
    InteractionResult,
    Layer,
    OutcomeIn,
    RecordTurnsResult,
    RetrievalPath,
    SearchRequest,
    SearchResult,
    SessionList,
    SessionTurns,
    SkillDeleted,
    SkillExtractIn,
    SkillHistory,
    SkillJobOut,
    SkillList,
    SkillOut,
    SkillPatch,
    TimeRangeIn,
    TraceStepIn,
    TurnBatchIn,
    TurnIn,
    WorkingItemIn,
    WorkingItemsIn,
    WorkingState,
)
from strata.schema.export import ExportItem, ExportReader
from strata_serve.retry import Attempts, Retry, wait_s

__all__ = ["AsyncStrataClient", "StrataClient"]

_M = TypeVar("_M", bound=BaseModel)
_P = ParamSpec("_P")
#: The error class each status code is raised as: the classes' own ``status_code`` (:mod:`strata.errors`).
_BY_STATUS: dict[int, type[StrataError]] = {
    error.status_code: error
    for error in (
        InvalidInput,
        Unauthorized,
        Forbidden,
        NotFound,
        VersionConflict,
        PreconditionRequired,
        RateLimited,
        LLMError,
        StoreUnavailable,
    )
}
#: Errors that share a status with another (502: the LLM or the embedding endpoint), by the
#: ``error`` name of the answer's body.
_NAMED: list[type[StrataError]] = [EmbedderError, *_BY_STATUS.values()]
_BY_NAME: dict[str, type[StrataError]] = {error.__name__: error for error in _NAMED}


#: A 404 whose body is not Strata's JSON comes from Serve's proxy: for a few seconds after
#: Serve's processes restart, the proxy answers before the application's routes are back.
_NOT_SERVED = "Strata's routes are not served yet (Serve is starting or recovering): retry in a moment"


@dataclass(frozen=True)
class _Call(Generic[_M]):
    method: str
    path: str
    result: type[_M]
    body: BaseModel | None = None
    if_match: int | None = None
    params: dict[str, Any] | None = None
    #: A read sent as a POST (``/v1/context``, ``/v1/search``): retried without an Idempotency-Key.
    read: bool = False

    @property
    def writes(self) -> bool:
        return self.method != "GET" and not self.read

    def request(self, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """The request's method, path, body (JSON bytes, or None), headers and query parameters."""
        headers = {"If-Match": f'"{self.if_match}"'} if self.if_match is not None else {}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        content = None
        if self.body is not None:
            content = self.body.model_dump_json(exclude_none=True).encode()
            headers["Content-Type"] = "application/json"
        params = {k: _param(v) for k, v in (self.params or {}).items() if v is not None}
        return {"method": self.method, "url": self.path, "content": content, "headers": headers, "params": params}

    def parse(self, status: int, content: bytes) -> _M:
        """The answer's model, or the error its status and body say."""
        if status >= 400:
            raise _error(status, content)
        return self.result.model_validate_json(content)


def _error(status: int, content: bytes) -> StrataError:
    """The error an answer of ``status`` >= 400 with body ``content`` says."""
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        if status == 404:  # Serve's proxy, not Strata: the routes are not back yet
            return StoreUnavailable(_NOT_SERVED, retry_after_s=1, status=503)
        data = {"message": content[:500].decode(errors="replace")}
    message = data.get("message") or str(data)[:500]
    details = {k: v for k, v in data.items() if k not in ("message", "error")}
    kind = _BY_NAME.get(str(data.get("error")), _BY_STATUS.get(status, StrataError))
    if kind.status_code != status:  # a name another server gave: the status decides
        kind = _BY_STATUS.get(status, StrataError)
    return kind(message, status=status, **details)


def _param(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


# The API, one request spec per method; the clients below bind each to a transport.


def _record_turn(
    session_id: str,
    user: str | None = None,
    agent: str | None = None,
    *,
    timestamp: datetime | None = None,
    turn_id: str | None = None,
    speaker: str | None = None,
    metadata: dict[str, Any] | None = None,
    expected_version: int | None = None,
) -> _Call[RecordTurnsResult]:
    body = TurnIn(
        user=user, agent=agent, timestamp=timestamp, turn_id=turn_id, speaker=speaker, metadata=metadata or {}
    )
    return _Call("POST", f"/v1/sessions/{session_id}/turns", RecordTurnsResult, body, expected_version)


def _record_turns(
    session_id: str, turns: Sequence[TurnIn | dict[str, Any]], *, expected_version: int | None = None
) -> _Call[RecordTurnsResult]:
    body = TurnBatchIn(turns=[t if isinstance(t, TurnIn) else TurnIn(**t) for t in turns])
    return _Call("POST", f"/v1/sessions/{session_id}/turns/batch", RecordTurnsResult, body, expected_version)


def _build_context(
    message: str,
    session_id: str,
    *,
    task_type: str = "general",
    max_tokens: int | None = None,
    reference_time: datetime | None = None,
    top_k: int | None = None,
    layers: list[Layer] | None = None,
) -> _Call[ContextResult]:
    body = ContextRequest(
        message=message,
        session_id=session_id,
        task_type=task_type,
        max_tokens=max_tokens,
        reference_time=reference_time,
        top_k=top_k,
        layers=layers,
    )
    return _Call("POST", "/v1/context", ContextResult, body, read=True)


def _search(
    query: str,
    *,
    layers: list[Layer] | None = None,
    top_k: int = 10,
    session_id: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    reference_time: datetime | None = None,
    weights: dict[RetrievalPath, float] | None = None,
    min_cosine: float | None = None,
    doc_ids: list[str] | None = None,
) -> _Call[SearchResult]:
    time_range = TimeRangeIn(start=start, end=end) if (start or end) else None
    body = SearchRequest(
        query=query,
        layers=layers,
        top_k=top_k,
        session_id=session_id,
        time_range=time_range,
        reference_time=reference_time,
        weights=weights,
        min_cosine=min_cosine,
        doc_ids=doc_ids,
    )
    return _Call("POST", "/v1/search", SearchResult, body, read=True)


def _index_document(
    text: str,
    *,
    doc_id: str | None = None,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    expected_version: int | None = None,
    wait: bool = True,
    ttl_s: float | None = None,
) -> _Call[DocumentOut]:
    body = DocumentIn(text=text, doc_id=doc_id, title=title, metadata=metadata or {}, ttl_s=ttl_s)
    return _Call("POST", "/v1/documents", DocumentOut, body, expected_version, {"wait": wait})


def _get_document(doc_id: str, *, include_text: bool = False) -> _Call[DocumentOut]:
    return _Call("GET", f"/v1/documents/{doc_id}", DocumentOut, params={"include_text": include_text})


def _list_documents(*, after: str | None = None, limit: int = 50) -> _Call[DocumentList]:
    return _Call("GET", "/v1/documents", DocumentList, params={"after": after, "limit": limit})


def _delete_document(doc_id: str, *, expected_version: int | None = None) -> _Call[DocumentDeleted]:
    return _Call("DELETE", f"/v1/documents/{doc_id}", DocumentDeleted, if_match=expected_version)


def _entity(name: str) -> _Call[EntityOut]:
    return _Call("GET", "/v1/entities", EntityOut, params={"name": name})


def _get_working(session_id: str) -> _Call[WorkingState]:
    return _Call("GET", f"/v1/sessions/{session_id}/working", WorkingState)


def _add_working_items(
    session_id: str,
    items: Sequence[WorkingItemIn | dict[str, Any]],
    *,
    task: str | None = None,
    expected_version: int | None = None,
) -> _Call[WorkingState]:
    body = WorkingItemsIn(items=[i if isinstance(i, WorkingItemIn) else WorkingItemIn(**i) for i in items], task=task)
    return _Call("POST", f"/v1/sessions/{session_id}/working/items", WorkingState, body, expected_version)


def _forget_session(session_id: str) -> _Call[ForgetResult]:
    return _Call("DELETE", f"/v1/sessions/{session_id}", ForgetResult)


def _forget_turn(session_id: str, turn_id: str) -> _Call[ForgetResult]:
    return _Call("DELETE", f"/v1/sessions/{session_id}/turns/{turn_id}", ForgetResult)


def _list_sessions(*, after: str | None = None, limit: int = 50) -> _Call[SessionList]:
    return _Call("GET", "/v1/sessions", SessionList, params={"after": after, "limit": limit})


def _list_turns(
    session_id: str, *, after: str | None = None, limit: int = 50, newest_first: bool = False
) -> _Call[SessionTurns]:
    params = {"after": after, "limit": limit, "newest_first": newest_first or None}
    return _Call("GET", f"/v1/sessions/{session_id}/turns", SessionTurns, params=params)


def _extract_skill(
    task: str, trace: Sequence[TraceStepIn | dict[str, Any] | str], *, outcome: str | None = None,
    ttl_s: float | None = None,
) -> _Call[SkillOut]:
    body = SkillExtractIn(task=task, trace=list(trace), outcome=outcome, ttl_s=ttl_s)  # type: ignore[arg-type]
    return _Call("POST", "/v1/skills:extract", SkillOut, body)


def _find_skills(
    task: str | None = None,
    *,
    top_k: int = 5,
    min_success_rate: float | None = None,
    after: str | None = None,
    limit: int = 50,
) -> _Call[SkillList]:
    params = {"task": task, "top_k": top_k, "min_success_rate": min_success_rate, "after": after, "limit": limit}
    return _Call("GET", "/v1/skills", SkillList, params=params)


def _get_skill(skill_id: str) -> _Call[SkillOut]:
    return _Call("GET", f"/v1/skills/{skill_id}", SkillOut)


def _record_outcome(
    skill_id: str, success: bool, *, notes: str | None = None, expected_version: int | None = None
) -> _Call[SkillOut]:
    body = OutcomeIn(success=success, notes=notes)
    return _Call("POST", f"/v1/skills/{skill_id}/outcomes", SkillOut, body, expected_version)


def _update_skill(skill_id: str, changes: SkillPatch | dict[str, Any], *, expected_version: int) -> _Call[SkillOut]:
    body = changes if isinstance(changes, SkillPatch) else SkillPatch(**changes)
    return _Call("PATCH", f"/v1/skills/{skill_id}", SkillOut, body, expected_version)


def _delete_skill(skill_id: str, *, expected_version: int | None = None) -> _Call[SkillDeleted]:
    return _Call("DELETE", f"/v1/skills/{skill_id}", SkillDeleted, if_match=expected_version)


def _skill_history(skill_id: str) -> _Call[SkillHistory]:
    return _Call("GET", f"/v1/skills/{skill_id}/history", SkillHistory)


def _skill_job(job_id: str) -> _Call[SkillJobOut]:
    return _Call("GET", f"/v1/skill-jobs/{job_id}", SkillJobOut)


def _post_interaction(interaction: InteractionIn | dict[str, Any]) -> _Call[InteractionResult]:
    body = interaction if isinstance(interaction, InteractionIn) else InteractionIn(**interaction)
    return _Call("POST", "/v1/interactions", InteractionResult, body)


def _audit(*, since: datetime | None = None, after: str | None = None, limit: int = 100) -> _Call[AuditHistory]:
    params = {"since": since.isoformat() if since else None, "after": after, "limit": limit}
    return _Call("GET", "/v1/audit", AuditHistory, params=params)


def _health() -> _Call[Health]:
    return _Call("GET", "/healthz", Health)


def _export(layers: Sequence[Layer] | None = None) -> tuple[str, dict[str, Any]]:
    """``GET /v1/export``'s path and query (by default every layer the key may read)."""
    return "/v1/export", {"layers": list(layers)} if layers else {}


async def _split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of a byte stream, however its chunks cut them (a line may be megabytes: a document)."""
    rest = b""
    async for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            yield line.decode()
    if rest:
        yield rest.decode()


def _attempts(call: _Call[Any], policy: Retry, keys: bool) -> tuple[dict[str, Any], Attempts]:
    """The request to send (once, or again for each retry: the same bytes and key) and its attempts."""
    key = str(uuid.uuid4()) if keys and call.writes else None
    attempts = Attempts(policy, retriable=not call.writes or key is not None, keyed=key is not None)
    return call.request(idempotency_key=key), attempts


def _sync(spec: Callable[_P, _Call[_M]]) -> Callable[Concatenate[StrataClient, _P], _M]:
    def method(self: StrataClient, /, *args: _P.args, **kwargs: _P.kwargs) -> _M:
        call = spec(*args, **kwargs)
        request, attempts = _attempts(call, self._retry, self._idempotency_keys)
        while True:
            retry_after = None
            try:
                response = self._http.request(**request)
                retry_after = response.headers.get("retry-after")
                return call.parse(response.status_code, response.content)
            except (StrataError, httpx.TransportError) as exc:
                delay_s = wait_s(attempts, exc, retry_after)
                if delay_s is None:
                    raise
            time.sleep(delay_s)

    method.__name__ = spec.__name__.removeprefix("_")
    method.__doc__ = f"``{method.__name__}`` over HTTP, blocking."
    return method


def _async(spec: Callable[_P, _Call[_M]]) -> Callable[Concatenate[AsyncStrataClient, _P], Coroutine[Any, Any, _M]]:
    async def method(self: AsyncStrataClient, /, *args: _P.args, **kwargs: _P.kwargs) -> _M:
        call = spec(*args, **kwargs)
        request, attempts = _attempts(call, self._retry, self._idempotency_keys)
        while True:
            retry_after = None
            try:
                status, content, retry_after = await self._http.send(**request)
                return call.parse(status, content)
            except (StrataError, httpx.TransportError) as exc:
                delay_s = wait_s(attempts, exc, retry_after)
                if delay_s is None:
                    raise
            await asyncio.sleep(delay_s)

    method.__name__ = spec.__name__.removeprefix("_")
    method.__doc__ = f"``{method.__name__}`` over HTTP, awaitable."
    return method


class _AsyncSender(Protocol):
    async def send(
        self, *, method: str, url: str, content: bytes | None, headers: dict[str, str], params: dict[str, Any]
    ) -> tuple[int, bytes, str | None]:
        """The answer's status, body and ``Retry-After`` header."""
        ...

    def lines(self, url: str, params: dict[str, Any]) -> AsyncIterator[str]:
        """A GET's answer a line at a time; an error answer raised as its error."""
        ...

    async def aclose(self) -> None: ...


class _Httpx:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def send(
        self, *, method: str, url: str, content: bytes | None, headers: dict[str, str], params: dict[str, Any]
    ) -> tuple[int, bytes, str | None]:
        response = await self._client.request(method, url, content=content, headers=headers, params=params)
        return response.status_code, response.content, response.headers.get("retry-after")

    async def lines(self, url: str, params: dict[str, Any]) -> AsyncIterator[str]:
        async with self._client.stream("GET", url, params=params) as response:
            if response.status_code >= 400:
                raise _error(response.status_code, await response.aread())
            async for line in _split_lines(response.aiter_bytes()):
                yield line

    async def aclose(self) -> None:
        await self._client.aclose()


class _Aiohttp:
    """Requests over aiohttp; its failures raised as the ``httpx.HTTPError`` the httpx path raises.

    The session is opened by the first request, on the event loop that sends it: aiohttp binds
    a session to the loop it was made on, so a request from another loop (a client kept across
    ``asyncio.run`` calls) opens a session of its own. A session is closed by :meth:`aclose`,
    or else when its loop shuts down: frameworks run an async adapter's calls in loops of their
    own (``asyncio.run`` per call), which no caller can close a client in, and a loop that ends
    with a session open prints "Unclosed client session"."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout_s: float) -> None:
        self._base = base_url.rstrip("/")
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closer: AsyncGenerator[None, None] | None = None

    async def _open(self, loop: asyncio.AbstractEventLoop) -> aiohttp.ClientSession:
        self._session = session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        self._loop = loop
        # An async generator started in a loop is closed by the loop's shutdown_asyncgens()
        # (asyncio.run calls it before closing the loop): its `finally` closes the session then.
        self._closer = _closing(session)
        await anext(self._closer)
        return session

    async def _current(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._session
        if session is None or session.closed or self._loop is not loop:
            session = await self._open(loop)
        return session

    async def lines(self, url: str, params: dict[str, Any]) -> AsyncIterator[str]:
        session = await self._current()
        # A stream's whole may take minutes (100k turns): the timeout bounds each read instead.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout.total, sock_read=self._timeout.total)
        try:
            async with session.get(self._base + url, params=params or None, timeout=timeout) as response:
                if response.status >= 400:
                    raise _error(response.status, await response.read())
                async for line in _split_lines(response.content.iter_any()):
                    yield line
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(f"GET {url}: {exc}") from exc
        except TimeoutError as exc:
            raise httpx.TimeoutException(f"GET {url}: nothing read for {self._timeout.total:g} s") from exc
        except aiohttp.ClientError as exc:
            raise httpx.TransportError(f"GET {url}: {type(exc).__name__}: {exc}") from exc

    async def send(
        self, *, method: str, url: str, content: bytes | None, headers: dict[str, str], params: dict[str, Any]
    ) -> tuple[int, bytes, str | None]:
        session = await self._current()
        where = f"{method} {url}"
        try:
            async with session.request(
                method, self._base + url, data=content, headers=headers, params=params or None
            ) as response:
                return response.status, await response.read(), response.headers.get("Retry-After")
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(f"{where}: {exc}") from exc
        except TimeoutError as exc:  # aiohttp's timeouts are TimeoutErrors (some also ClientErrors)
            raise httpx.TimeoutException(f"{where}: no answer within {self._timeout.total:g} s") from exc
        except aiohttp.ClientError as exc:
            raise httpx.TransportError(f"{where}: {type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        """Close the session (one of another loop, still open, closes when that loop shuts down)."""
        if self._closer is not None and self._loop is asyncio.get_running_loop():
            await self._closer.aclose()
        self._session, self._closer = None, None


async def _closing(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await session.close()


class StrataClient:
    """Synchronous HTTP client. ``with StrataClient(url, api_key) as c: c.build_context(...)``.

    Args:
        timeout_s: per attempt.
        retry: when a call is tried again (:class:`~strata_serve.retry.Retry`; ``NO_RETRY``: never).
        idempotency_keys: send an ``Idempotency-Key`` with each write, so that it can be retried.
        transport: how requests reach ``base_url``; by default over the network
            (``httpx.MockTransport`` in a test, say).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 30.0,
        retry: Retry = Retry(),  # noqa: B008 (frozen: one shared default is safe)
        idempotency_keys: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._retry, self._idempotency_keys = retry, idempotency_keys
        self._http = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout_s, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    record_turn = _sync(_record_turn)
    record_turns = _sync(_record_turns)
    build_context = _sync(_build_context)
    search = _sync(_search)
    get_working = _sync(_get_working)
    add_working_items = _sync(_add_working_items)
    forget_session = _sync(_forget_session)
    forget_turn = _sync(_forget_turn)
    list_sessions = _sync(_list_sessions)
    list_turns = _sync(_list_turns)
    index_document = _sync(_index_document)
    get_document = _sync(_get_document)
    list_documents = _sync(_list_documents)
    delete_document = _sync(_delete_document)
    entity = _sync(_entity)
    extract_skill = _sync(_extract_skill)
    find_skills = _sync(_find_skills)
    get_skill = _sync(_get_skill)
    record_outcome = _sync(_record_outcome)
    update_skill = _sync(_update_skill)
    delete_skill = _sync(_delete_skill)
    skill_history = _sync(_skill_history)
    skill_job = _sync(_skill_job)
    post_interaction = _sync(_post_interaction)
    audit = _sync(_audit)
    health = _sync(_health)

    def export(self, *, layers: Sequence[Layer] | None = None) -> Iterator[ExportItem]:
        """The key's tenant exported (``GET /v1/export``), one parsed line at a time as it streams:
        the :class:`~strata.schema.export.ExportHeader`, each record, the
        :class:`~strata.schema.export.ExportEnd`. Memory holds one line, whatever the tenant's size.

        Args:
            layers: only these layers (default: every layer the key may read).

        Raises:
            strata.errors.InvalidInput: a line this version cannot read, or a stream cut short
                before its end line.
        """
        path, params = _export(layers)
        attempts = Attempts(self._retry, retriable=True, keyed=False)
        while True:  # retried until its first line: a stream half read is not sent again
            started = False
            try:
                # httpx's timeout bounds each read, not the whole stream (which may take minutes).
                with self._http.stream("GET", path, params=params) as response:
                    if response.status_code >= 400:
                        raise _error(response.status_code, response.read())
                    reader = ExportReader()
                    for line in response.iter_lines():
                        if (item := reader.read(line)) is not None:
                            started = True
                            yield item
                    reader.close()
                    return
            except (StrataError, httpx.TransportError) as exc:
                if started or isinstance(exc, InvalidInput) or (delay_s := wait_s(attempts, exc, None)) is None:
                    raise
            time.sleep(delay_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncStrataClient:
    """Asynchronous HTTP client with the same methods, each awaitable.

    Args:
        timeout_s: per attempt.
        retry: when a call is tried again (:class:`~strata_serve.retry.Retry`; ``NO_RETRY``: never).
        idempotency_keys: send an ``Idempotency-Key`` with each write, so that it can be retried.
        transport: how requests reach ``base_url``; by default over the network.
            ``httpx.ASGITransport(app)`` sends them to an ASGI app in this process (the MCP
            endpoint calls the API it is mounted in so), through all of its middleware.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 30.0,
        retry: Retry = Retry(),  # noqa: B008 (frozen: one shared default is safe)
        idempotency_keys: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._retry, self._idempotency_keys = retry, idempotency_keys
        headers = {"Authorization": f"Bearer {api_key}"}
        self._http: _AsyncSender = (
            _Aiohttp(base_url, headers, timeout_s)
            if transport is None
            else _Httpx(httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout_s, transport=transport))
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    record_turn = _async(_record_turn)
    record_turns = _async(_record_turns)
    build_context = _async(_build_context)
    search = _async(_search)
    get_working = _async(_get_working)
    add_working_items = _async(_add_working_items)
    forget_session = _async(_forget_session)
    forget_turn = _async(_forget_turn)
    list_sessions = _async(_list_sessions)
    list_turns = _async(_list_turns)
    index_document = _async(_index_document)
    get_document = _async(_get_document)
    list_documents = _async(_list_documents)
    delete_document = _async(_delete_document)
    entity = _async(_entity)
    extract_skill = _async(_extract_skill)
    find_skills = _async(_find_skills)
    get_skill = _async(_get_skill)
    record_outcome = _async(_record_outcome)
    update_skill = _async(_update_skill)
    delete_skill = _async(_delete_skill)
    skill_history = _async(_skill_history)
    skill_job = _async(_skill_job)
    post_interaction = _async(_post_interaction)
    audit = _async(_audit)
    health = _async(_health)

    async def export(self, *, layers: Sequence[Layer] | None = None) -> AsyncIterator[ExportItem]:
        """The key's tenant exported (``GET /v1/export``), one parsed line at a time as it
        streams (``async for item in client.export()``): as :meth:`StrataClient.export`."""
        path, params = _export(layers)
        attempts = Attempts(self._retry, retriable=True, keyed=False)
        while True:  # retried until its first line: a stream half read is not sent again
            started = False
            try:
                reader = ExportReader()
                async for line in self._http.lines(path, params):
                    if (item := reader.read(line)) is not None:
                        started = True
                        yield item
                reader.close()
                return
            except (StrataError, httpx.TransportError) as exc:
                if started or isinstance(exc, InvalidInput) or (delay_s := wait_s(attempts, exc, None)) is None:
                    raise
            await asyncio.sleep(delay_s)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
