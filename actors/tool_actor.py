"""ToolActor: runs exactly one tool call and owns that call's cancellation registrations.

The TurnActor spawns one ToolActor per call and sends it one ``RunTool``. The tool runs in
a worker thread (an ``async def`` tool in its own event loop there), so the actor keeps
handling messages while it runs:

- ``InterruptTool(mode="cancel")`` sets the call's flag; the tool sees it at its next
  ``throw_if_requested()``;
- ``InterruptTool(mode="stop")`` sets the flag, runs the ``on_stop`` callbacks at once on
  this actor's thread, cancels an async tool's task, then the actor exits as soon as the
  tool returns or ``stop_grace`` has passed (a blocking tool ends with the process);
- on ``ActorExitRequest`` a call still running is stopped the same way first.

Outcomes become tool messages as the seeds do it: a result is ``{"ok": true, "data": ...}``,
an exception ``{"ok": false, "error": "...", "data": null}``; arguments that do not fit the
tool's parameters come back as such an error saying what was wrong. The actor answers with
exactly one ``ToolResult`` (none after a stop: the turn has written the interrupted
message itself) and the turn then tells it to exit.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorTypeDispatcher, ThespianWatch

from messages import (
    CancelTurn,
    Finish,
    InterruptTool,
    ReportProgress,
    RunTool,
    StopTurn,
    ToolAlive,
    ToolResult,
    TurnEvent,
)

from .errors import ToolCancelled, ToolDefinitionError
from .plumbing import Inbox
from .tool_context import ToolContext
from .tools import Tool, error_result, load_tool, ok_result
from .turn_rules import interrupted_content

__all__ = ["ToolActor", "run_tool_inline"]


def log() -> logging.Logger:
    """This module's logger, looked up at call time: Thespian replaces the logging manager
    in every actor process, so a logger created before the fork would log nowhere."""
    return logging.getLogger("greenroom.tools")


def run_tool_inline(tool: Tool, kwargs: dict[str, Any], ctx: ToolContext, on_loop: Any = None) -> tuple[str, str]:
    """Run ``tool`` in this thread with ``ctx`` current; return ``(outcome, content)``.

    ``on_loop(loop, task)`` is called with an async tool's loop and task, so another thread
    can cancel the task.
    """
    token = ctx._activate()
    try:
        if tool.is_async:
            loop = asyncio.new_event_loop()
            try:
                task = loop.create_task(tool.fn(**kwargs))
                if on_loop is not None:
                    on_loop(loop, task)
                value = loop.run_until_complete(task)
            finally:
                loop.close()
        else:
            value = tool.fn(**kwargs)
        return "success", ok_result(value)
    except ToolCancelled as exc:
        what = "the call was stopped" if exc.mode == "stop" else "the call was cancelled"
        return "interrupted", interrupted_content(what, exc.reason)
    except asyncio.CancelledError:
        return "interrupted", interrupted_content("the call was stopped", ctx.cancellation.reason or "cancelled")
    except Exception as exc:
        return "failed", error_result(f"{type(exc).__name__}: {exc}")
    except BaseException as exc:  # SystemExit and friends from a tool must not kill the actor
        return "failed", error_result(f"{type(exc).__name__}: {exc}")
    finally:
        ctx.cancellation._close()
        ToolContext._deactivate(token)


class ToolActor(ActorTypeDispatcher):
    """One tool call, in its own process; see the module docstring for the lifecycle."""

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: dict[str, Any], requirements: dict[str, Any] | None) -> bool:
        """Runs on a node whose capabilities match every requirement of the tool."""
        return all(capabilities.get(k) == v for k, v in (requirements or {}).items())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inbox = Inbox()
        self._run: RunTool | None = None
        self._turn: Any = None
        self._ctx: ToolContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._progress_seq = 0
        self._children: dict[str, Any] = {}  # child turn id -> ChildTurn
        self._directory: Any = None
        self._finished = False
        self._stopping = False
        self._exiting = False

    def receiveMessage(self, message: Any, sender: Any) -> Any:
        super().receiveMessage(message, sender)
        return ThespianWatch([self._inbox.fd])

    def receiveMsg_RunTool(self, run: RunTool, sender: Any) -> None:
        if self._run is not None:
            return  # one call per actor; a redelivery changes nothing
        self._run, self._turn = run, sender
        if run.heartbeat is not None:
            self._alive()
        try:
            tool = load_tool(run.spec)
            kwargs = tool.validate(run.arguments)
        except ToolDefinitionError as exc:
            return self._answer("failed", error_result(f"Tool '{run.spec.name}' could not be loaded: {exc}"))
        except ValueError as exc:
            return self._answer("failed", error_result(str(exc)))
        self._ctx = ToolContext(
            turn_id=run.turn_id,
            root_turn_id=run.root_turn_id,
            call_id=run.call.id,
            tool_name=run.spec.name,
            idempotency_key=run.idempotency_key,
            attempt=run.attempt,
            stop_grace=run.stop_grace,
            progress=lambda data: self._inbox.put(("progress", data)),
            provider=run.provider,
            child_starter=lambda child: self._inbox.put(("child", child)),
        )
        ctx = self._ctx
        thread = threading.Thread(target=self._work, args=(tool, kwargs, ctx), name=f"tool {run.call.id}", daemon=True)
        thread.start()

    def _work(self, tool: Tool, kwargs: dict[str, Any], ctx: ToolContext) -> None:
        outcome = run_tool_inline(tool, kwargs, ctx, on_loop=self._remember_loop)
        self._inbox.put(("result", outcome))

    def _remember_loop(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self._loop, self._task = loop, task
        if self._stopping:
            loop.call_soon_threadsafe(task.cancel)

    def receiveMsg_WatchMessage(self, msg: Any, sender: Any) -> None:
        for kind, payload in self._inbox.drain():
            if kind == "progress":
                self._progress(payload)
            elif kind == "child":
                self._start_child(payload)
            elif kind == "result":
                self._finished = True
                if self._stopping:
                    self._exit()
                else:
                    self._answer(*payload)

    def _progress(self, data: Any) -> None:
        if not self._stopping and self._run is not None:
            self.send(
                self._turn,
                ReportProgress(turn_id=self._run.turn_id, call_id=self._run.call.id, seq=self._progress_seq, data=data),
            )
            self._progress_seq += 1

    # -- sub-agents: child turns started by the tool ---------------------------------------

    def _start_child(self, child: Any) -> None:
        if self._directory is None:
            from .directory_actor import DIRECTORY_NAME, DirectoryActor

            self._directory = self.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
        self._children[child.start.turn_id] = child
        self.send(self._directory, child.start)
        if self._ctx is not None and self._ctx.cancellation.requested:
            self._steer_children(self._ctx.cancellation.mode or "stop", self._ctx.cancellation.reason)

    def receiveMsg_TurnEvent(self, event: TurnEvent, sender: Any) -> None:
        child = self._children.get(event.turn_id)
        if child is None:
            return
        self._progress({"child_turn_id": event.turn_id, "event": event.model_dump(mode="json", exclude={"messages"})})
        if isinstance(event, Finish) and event.terminal:
            del self._children[event.turn_id]
            child.resolve(event)

    def _steer_children(self, mode: str, reason: str) -> None:
        """A stop or cancel of this call reaches the child turns it started."""
        if self._directory is None:
            return
        for turn_id in self._children:
            if mode == "stop":
                self.send(self._directory, StopTurn(turn_id=turn_id, reason=f"parent call stopped: {reason}"))
            else:
                self.send(self._directory, CancelTurn(turn_id=turn_id, reason=f"parent call cancelled: {reason}"))

    def _answer(self, outcome: str, content: str) -> None:
        assert self._run is not None
        self._finished = True
        self.send(
            self._turn,
            ToolResult(turn_id=self._run.turn_id, call_id=self._run.call.id, outcome=outcome, content=content),  # type: ignore[arg-type]
        )

    def receiveMsg_InterruptTool(self, msg: InterruptTool, sender: Any) -> None:
        if self._run is None or msg.call_id != self._run.call.id:
            return
        if self._ctx is None or self._finished:
            if msg.mode == "stop":
                self._exit()
            return
        if msg.mode == "cancel":
            self._ctx.cancellation._request("cancel", msg.reason)
            self._steer_children("cancel", msg.reason)
            return
        self._stop(msg.reason)
        self._steer_children("stop", msg.reason)
        self.wakeupAfter(timedelta(seconds=self._run.stop_grace + 0.2), payload="stop_grace")

    def _stop(self, reason: str) -> None:
        """Flag, callbacks, task cancellation: everything a stop does on this side, once."""
        if self._stopping or self._ctx is None:
            return
        self._stopping = True
        self._ctx.cancellation._request("stop", reason)
        if self._loop is not None and self._task is not None:
            try:
                self._loop.call_soon_threadsafe(self._task.cancel)
            except RuntimeError:
                pass  # the loop has closed: the tool already returned

    def _alive(self) -> None:
        """Heartbeat of a placed call: tell the turn this call still runs, and where."""
        assert self._run is not None and self._run.heartbeat is not None
        if self._finished or self._exiting:
            return
        self.send(self._turn, ToolAlive(turn_id=self._run.turn_id, call_id=self._run.call.id, node=str(self.myAddress)))
        self.wakeupAfter(timedelta(seconds=self._run.heartbeat), payload="heartbeat")

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        if msg.payload == "stop_grace":
            self._exit()
        elif msg.payload == "heartbeat" and not self._stopping:
            self._alive()

    def _exit(self) -> None:
        if not self._exiting:
            self._exiting = True
            self.send(self.myAddress, ActorExitRequest())

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        if self._ctx is not None and not self._finished:
            self._stop("the tool's actor is exiting")
            self._steer_children("stop", "the tool's actor is exiting")
        self._inbox.close()

    def receiveUnrecognizedMessage(self, msg: Any, sender: Any) -> None:
        log().debug("ToolActor ignored %r", type(msg).__name__)
