"""The console's ASGI app: the page, its JSON API, its live streams, its commands.

``console_app(runtime=..., store=..., key=...)`` returns the app behind its ``Guard``
(``security``): mount it in an existing ASGI application (``Mount("/greenroom", app)``) or
let ``serve`` run it. Routes, relative to where it is mounted:

- ``GET /``: the page (static HTML and script; turns are drawn from the API as text nodes);
- ``GET api/session``: the CSRF token the page sends with each command, who is signed in
  (``user``: a named user's name, or None for the anonymous token), and the source;
- ``GET api/turns``: the list and its numbers; ``GET api/turns/{id}``: one turn's events
  and view; unknown: 404 ``no turn {id}``;
- ``GET api/stream/turns`` and ``GET api/stream/turns/{id}?since=N``: server-sent events,
  the list (``turns``) or the turn's new events and view (``update``) whenever they change;
- ``POST api/turns/{id}/decide`` (``{"decisions": [{"turn_id", "call_id", "approved",
  "reason", "arguments"}]}``, one ``RespondToApprovals`` per turn named; ``arguments``: the
  call's, edited), ``.../stop``, ``.../cancel`` (``{"reason", "grace"}``),
  ``.../calls/{call_id}/stop``, ``.../input`` (``{"text", "when", "stop_calls",
  "deny_pending"}``), ``.../pause`` (``{"when", "reason"}``), ``.../resume``
  (``{"text"}``): the commands' ``ControlReply``s, status 200 when all were applied or queued in the store's inbox (the
  message says which: ``applied``, or ``queued (why)``, applied once a host or runtime takes
  the turn), 404 for an unknown turn or call, 409 for any other refusal, 504 when a runtime
  of another process did not answer. Each command is sent by the request's user (its
  ``by``: ``security``), so a call whose tool names its ``approvers`` is decided only by them
  (else 409, ``not_allowed``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from messages import (
    CancelTurn, ChatMessage, ControlReply, Message, PauseTurn, RespondToApprovals, ResumeTurn, SendInput, StopTool,
    StopTurn, ToolApprovalResponse,
)  # fmt: skip

from ..errors import RuntimeClosedError, TurnTimeout
from . import model
from .commands import queued
from .conversations import UnknownSession, session_json, sessions_json
from .numbers import numbers
from .security import Guard
from .sources import Source, UnknownTurn

__all__ = ["POLL", "build_app"]

STATIC = Path(__file__).with_name("static")
POLL = 0.1  # seconds between two looks for changes, per open stream


class Decision(BaseModel):
    turn_id: str = Field(min_length=1)
    call_id: str = Field(min_length=1)
    approved: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None


class Decide(BaseModel):
    decisions: list[Decision] = Field(min_length=1)


class StopBody(BaseModel):
    reason: str = Field(default="stopped from the console", min_length=1)


class CancelBody(BaseModel):
    reason: str = Field(default="cancelled from the console", min_length=1)
    grace: float | None = Field(default=None, ge=0)


class InputBody(BaseModel):
    text: str = Field(min_length=1)
    when: Literal["next_call", "now"] = "next_call"
    stop_calls: bool = False
    deny_pending: bool = False


class PauseBody(BaseModel):
    when: Literal["next_step", "now"] = "next_step"
    reason: str = Field(default="paused from the console", min_length=1)


class ResumeBody(BaseModel):
    text: str | None = None


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": message, "code": code}, status_code=status)


def _source(request: Request) -> Source:
    return request.app.state.source


def _user(request: Request) -> str | None:
    """Who sent the request (``security``: a named user, or None for the anonymous token)."""
    return request.scope.get("state", {}).get("user")


async def page(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


async def session(request: Request) -> Response:
    about = await run_in_threadpool(_source(request).about)
    return JSONResponse({"csrf": request.scope["state"]["csrf"], "user": _user(request), **about})


def _listing(source: Source) -> dict[str, Any]:
    rows = source.rows()
    return {"turns": rows, "numbers": numbers(rows, source.events, time.time()), **source.nodes(rows), **source.about()}


def _turn(source: Source, turn_id: str, since: int = 0) -> dict[str, Any]:
    events = source.events(turn_id)
    return {
        "events": [model.event_json(e, at) for e, at in events if e.seq >= since],
        "view": source.view(turn_id, events),
        "where": source.about()["where"],
    }


async def turns(request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(_listing, _source(request)))


async def turn(request: Request) -> Response:
    try:
        data = await run_in_threadpool(_turn, _source(request), request.path_params["turn_id"])
    except UnknownTurn as exc:
        return _error(404, str(exc), "unknown_turn")
    return JSONResponse(data)


async def sessions(request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(sessions_json, _source(request)))


async def one_session(request: Request) -> Response:
    try:
        data = await run_in_threadpool(session_json, _source(request), request.path_params["session_id"])
    except UnknownSession as exc:
        return _error(404, str(exc), "unknown_session")
    return JSONResponse(data)


def _sse(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


async def _closing(request: Request) -> bool:
    return bool(request.app.state.closing) or await request.is_disconnected()


async def stream_turns(request: Request) -> Response:
    source = _source(request)

    async def updates() -> AsyncIterator[str]:
        last: Any = object()
        while not await _closing(request):
            version = await run_in_threadpool(source.version)
            if version != last:
                last = version
                yield _sse("turns", await run_in_threadpool(_listing, source))
            await asyncio.sleep(POLL * 2)

    return StreamingResponse(updates(), media_type="text/event-stream")


async def stream_turn(request: Request) -> Response:
    source = _source(request)
    turn_id = request.path_params["turn_id"]
    try:
        since = max(0, int(request.query_params.get("since", "0")))
    except ValueError:
        return _error(400, "since must be a whole number", "invalid")

    async def updates() -> AsyncIterator[str]:
        nonlocal since
        last: Any = object()
        while not await _closing(request):
            try:
                version = await run_in_threadpool(source.turn_version, turn_id)
                if version != last:
                    last = version
                    data = await run_in_threadpool(_turn, source, turn_id, since)
                    if data["events"]:
                        since = data["events"][-1]["seq"] + 1
                    yield _sse("update", data)
            except UnknownTurn as exc:
                yield _sse("gone", {"error": str(exc)})
                return
            await asyncio.sleep(POLL)

    return StreamingResponse(updates(), media_type="text/event-stream")


async def _body(request: Request, cls: type[BaseModel]) -> BaseModel | JSONResponse:
    raw = await request.body()
    if len(raw) > 65536:
        return _error(413, "the body is larger than 64 KiB", "invalid")
    try:
        return cls.model_validate(json.loads(raw or b"{}"))
    except (ValueError, ValidationError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        where = ".".join(str(p) for p in first["loc"]) if first else ""
        detail = f"{where}: {first['msg']}" if first else str(exc)
        return _error(400, f"bad request body ({detail})", "invalid")


async def _send(request: Request, turn_id: str, commands: list[Message]) -> Response:
    """Check the turn exists, send each command, answer with their replies."""
    source = _source(request)
    try:
        for command in commands:
            await run_in_threadpool(source.events, getattr(command, "turn_id", turn_id))
    except UnknownTurn as exc:
        return _error(404, str(exc), "unknown_turn")
    replies: list[ControlReply] = []
    try:
        for command in commands:
            replies.append(await run_in_threadpool(source.send, command))
    except TurnTimeout as exc:
        return _error(504, str(exc), "timeout")
    except RuntimeClosedError as exc:
        return _error(503, str(exc), "closed")
    ok = all(r.ok for r in replies)
    codes = {r.code for r in replies if not r.ok}
    status = 200 if ok else 404 if codes <= {"unknown_turn", "unknown_call"} else 409
    notes = sorted({r.message for r in replies if queued(r)})  # in the store's inbox: said, never "applied"
    message = ("queued" if notes else "applied") + "".join(f" ({n})" for n in notes)
    if not ok:
        message = "; ".join(r.message for r in replies if not r.ok)
    body = {"ok": ok, "message": message, "replies": [r.model_dump(mode="json") for r in replies]}
    return JSONResponse(body, status_code=status)


async def decide(request: Request) -> Response:
    turn_id = request.path_params["turn_id"]
    body = await _body(request, Decide)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, Decide)
    by_turn: dict[str, list[ToolApprovalResponse]] = {}
    for d in body.decisions:
        response = ToolApprovalResponse(call_id=d.call_id, approved=d.approved, reason=d.reason or None, arguments=d.arguments)
        by_turn.setdefault(d.turn_id, []).append(response)
    by = _user(request)
    commands: list[Message] = [RespondToApprovals(turn_id=t, responses=r, by=by) for t, r in by_turn.items()]
    return await _send(request, turn_id, commands)


async def stop(request: Request) -> Response:
    turn_id = request.path_params["turn_id"]
    body = await _body(request, StopBody)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, StopBody)
    return await _send(request, turn_id, [StopTurn(turn_id=turn_id, reason=body.reason, by=_user(request))])


async def cancel(request: Request) -> Response:
    turn_id = request.path_params["turn_id"]
    body = await _body(request, CancelBody)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, CancelBody)
    command = CancelTurn(turn_id=turn_id, reason=body.reason, grace=body.grace, by=_user(request))
    return await _send(request, turn_id, [command])


async def stop_call(request: Request) -> Response:
    turn_id, call_id = request.path_params["turn_id"], request.path_params["call_id"]
    body = await _body(request, StopBody)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, StopBody)
    command = StopTool(turn_id=turn_id, call_id=call_id, reason=body.reason, by=_user(request))
    return await _send(request, turn_id, [command])


async def send_input(request: Request) -> Response:
    turn_id = request.path_params["turn_id"]
    body = await _body(request, InputBody)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, InputBody)
    command = SendInput(turn_id=turn_id, messages=[ChatMessage.user(body.text)], when=body.when,
                        stop_calls=body.stop_calls, deny_pending=body.deny_pending, by=_user(request))  # fmt: skip
    return await _send(request, turn_id, [command])


async def pause(request: Request) -> Response:
    turn_id = request.path_params["turn_id"]
    body = await _body(request, PauseBody)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, PauseBody)
    return await _send(request, turn_id, [PauseTurn(turn_id=turn_id, when=body.when, reason=body.reason, by=_user(request))])


async def resume(request: Request) -> Response:
    turn_id = request.path_params["turn_id"]
    body = await _body(request, ResumeBody)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, ResumeBody)
    messages = [ChatMessage.user(body.text)] if body.text else None
    return await _send(request, turn_id, [ResumeTurn(turn_id=turn_id, messages=messages, by=_user(request))])


def build_app(
    source: Source,
    token: str | None,
    *,
    hosts: set[str] | None = None,
    users: Mapping[str, str] | None = None,
    trust_proxy: bool = False,
) -> Guard:
    """The console over ``source``, behind its guard (``token``, anonymous, or a ``users``' own
    on every request; ``trust_proxy``: the forwarded scheme and host are its origin)."""
    app = Starlette(
        routes=[
            Route("/", page),
            Route("/api/session", session),
            Route("/api/turns", turns),
            Route("/api/sessions", sessions),
            Route("/api/sessions/{session_id}", one_session),
            Route("/api/turns/{turn_id}", turn),
            Route("/api/stream/turns", stream_turns),
            Route("/api/stream/turns/{turn_id}", stream_turn),
            Route("/api/turns/{turn_id}/decide", decide, methods=["POST"]),
            Route("/api/turns/{turn_id}/stop", stop, methods=["POST"]),
            Route("/api/turns/{turn_id}/cancel", cancel, methods=["POST"]),
            Route("/api/turns/{turn_id}/calls/{call_id}/stop", stop_call, methods=["POST"]),
            Route("/api/turns/{turn_id}/input", send_input, methods=["POST"]),
            Route("/api/turns/{turn_id}/pause", pause, methods=["POST"]),
            Route("/api/turns/{turn_id}/resume", resume, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC)),
        ]
    )
    app.state.source = source
    app.state.closing = False
    return Guard(app, token, hosts=hosts, users=users, trust_proxy=trust_proxy)
