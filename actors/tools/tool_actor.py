"""ToolActor: one tool call, its ``ToolContext`` and its cancellation registrations.

A ToolActor exists for exactly one call and ends with it. It is an in-process actor (a
mailbox of its own, ``mailbox.LocalActor``) in the process where the call runs: a pooled
tool process (``ToolWorker``) for sync tools and, by default, ``async def`` ones; the
TurnHost for an ``async def`` tool run inline. Its owner tells it ``InterruptTool``; the
tool itself runs on a thread (or as a task of the host's loop). It never calls Thespian:
everything it has to say (progress, a child turn to start, the outcome) goes through
``report(kind, payload)``, which its owner makes thread-safe.

- ``interrupt("cancel", reason)`` sets the call's flag; the tool sees it at its next
  ``throw_if_requested()``;
- ``interrupt("stop", reason)`` starts the ``on_stop`` callbacks at once, each on a thread
  of its own (``context.Cancellation``); once they have returned, or their deadline
  (``stop_grace / 2``) has passed, the tool sees its flag and an ``async def`` tool's task
  is cancelled;
- the outcome is reported exactly once, and only when the tool has returned *and* a stop's
  callbacks are over: ``("result", (outcome, content))``, where a value becomes
  ``{"ok": true, "data": ...}`` and an exception ``{"ok": false, "error": ...}``, as the
  seeds do it, with a note naming any callback that overstayed its deadline; arguments that
  do not fit the tool's parameters come back as such an error saying what was wrong. When
  the call ends its remaining registrations are dropped: none of its callbacks starts after
  its outcome is reported. ``abandon`` is its owner's last resort (the tool did not return
  within its stop grace).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from messages import InterruptTool, RunTool

from ..errors import ToolCancelled, ToolDefinitionError, ToolError
from ..mailbox import Kernel, LocalActor
from ..telemetry.spans import attach
from ..turn.results import error_result, interrupted_content, ok_result, with_note
from ..turn.sanitize import safe_text
from .context import ToolContext
from .definition import Tool
from .loading import load_tool

__all__ = ["ToolActor", "overstay_note", "run_tool_inline"]

Report = Callable[[str, Any], None]


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
    except BaseException as exc:
        return _outcome_of(exc, ctx)
    finally:
        ctx.cancellation._close()
        ToolContext._deactivate(token)


def _outcome_of(exc: BaseException, ctx: ToolContext) -> tuple[str, str]:
    if isinstance(exc, ToolCancelled):
        what = "the call was stopped" if exc.mode == "stop" else "the call was cancelled"
        return "interrupted", interrupted_content(what, exc.reason)
    if isinstance(exc, asyncio.CancelledError):
        return "interrupted", interrupted_content("the call was stopped", ctx.cancellation.reason or "cancelled")
    # SystemExit and friends from a tool must not end its process either
    error = safe_text(str(exc) if isinstance(exc, ToolError) else f"{type(exc).__name__}: {exc}")
    cancellation = ctx.cancellation
    if cancellation._stopped or cancellation.requested:  # it failed as it stopped: its processes had SIGTERM
        what = "the call was stopped" if cancellation._stopped else "the call was cancelled"
        return "interrupted", with_note(interrupted_content(what, cancellation._reason), f"it raised {error}")
    return "failed", error_result(error)


class ToolActor(LocalActor):
    """One call; ``start()`` runs it in a thread (or in ``loop`` for an inline async tool);
    ``tell(InterruptTool(...))`` stops or cancels it."""

    name = "ToolActor"

    def __init__(
        self,
        kernel: Kernel,
        run: RunTool,
        report: Report,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(kernel)
        self.run = run
        self._report = report
        self._host_loop = loop
        self._task: asyncio.Task[Any] | asyncio.Future[Any] | None = None
        self._task_loop: asyncio.AbstractEventLoop | None = None
        self.ctx: ToolContext | None = None
        self.finished = False
        self.stopping = False  # a stop has arrived (its callbacks may still run)
        self._lock = threading.Lock()
        self._phase = ""  # "running" while a stop's callbacks run, "over" once the tool sees its stop
        self._held: tuple[str, str] | None = None  # the tool's outcome, waiting for the callbacks
        self._reported = False

    @property
    def call_id(self) -> str:
        return self.run.call.id

    def receiveMsg_InterruptTool(self, message: InterruptTool, sender: Any) -> None:
        if message.call_id == self.call_id:
            self.interrupt(message.mode, message.reason, message.grace)

    def start(self) -> None:
        run = self.run
        try:
            tool = load_tool(run.spec)
            kwargs = tool.validate(run.arguments)
        except ToolDefinitionError as exc:
            return self._done(("failed", error_result(f"Tool '{run.spec.name}' could not be loaded: {exc}")))
        except ValueError as exc:
            return self._done(("failed", error_result(str(exc))))
        self.ctx = ToolContext(
            turn_id=run.turn_id,
            root_turn_id=run.root_turn_id,
            call_id=run.call.id,
            tool_name=run.spec.name,
            idempotency_key=run.idempotency_key,
            attempt=run.attempt,
            epoch=run.epoch,
            stop_grace=run.stop_grace,
            progress=self._progress,
            provider=run.provider,
            child_starter=lambda child: self._report("child", child),
            trace_context=run.trace_context,
            tokens_left=run.tokens_left,
            cost_left=run.cost_left,
        )
        if self._host_loop is not None and tool.is_async:
            self._host_loop.call_soon_threadsafe(self._start_task, tool, kwargs)
        else:
            threading.Thread(target=self._work, args=(tool, kwargs), name=f"tool {run.call.id}", daemon=True).start()

    def _work(self, tool: Tool, kwargs: dict[str, Any]) -> None:
        assert self.ctx is not None
        with attach(self.run.trace_context):  # the call's span is the tool's current span
            self._done(run_tool_inline(tool, kwargs, self.ctx, on_loop=self._remember_task))

    def _start_task(self, tool: Tool, kwargs: dict[str, Any]) -> None:
        """On the host's loop: run an inline ``async def`` tool as a task."""
        ctx = self.ctx
        assert ctx is not None and self._host_loop is not None

        async def call() -> Any:
            token = ctx._activate()  # a task has its own context: this stays with the call
            try:
                with attach(ctx.trace_context):
                    return await tool.fn(**kwargs)
            finally:
                ToolContext._deactivate(token)

        task = self._host_loop.create_task(call())
        self._remember_task(self._host_loop, task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        assert self.ctx is not None
        self.ctx.cancellation._close()
        if task.cancelled():
            self._done(_outcome_of(asyncio.CancelledError(), self.ctx))
            return
        exc = task.exception()
        self._done(_outcome_of(exc, self.ctx) if exc is not None else ("success", ok_result(task.result())))

    def _remember_task(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        with self._lock:
            self._task_loop, self._task = loop, task
            seen = self._phase == "over"
        if seen:
            loop.call_soon_threadsafe(task.cancel)

    def _done(self, outcome: tuple[str, str]) -> None:
        """The tool has returned: report its outcome now, or once its stop's callbacks are over."""
        with self._lock:
            if self._phase == "running":
                self._held = outcome
                return
        self._report_once(outcome)

    def _report_once(self, outcome: tuple[str, str]) -> None:
        """Report the call's one outcome, noting callbacks that overstayed; one too long for
        ``RunTool.max_result_bytes`` fails here, in the tool's process, before anything large
        crosses the wire."""
        with self._lock:
            if self._reported:
                return
            self._reported = True
        if self.ctx is not None:
            self.ctx.cancellation._close()  # the call ends: none of its callbacks starts from now on
            outcome = (outcome[0], with_note(outcome[1], overstay_note(self.ctx)))
        content = safe_text(outcome[1])
        size, limit = len(content.encode("utf-8", "replace")), self.run.max_result_bytes
        if size > limit:
            why = f"its result is {size:,} bytes, over the limit of {limit:,} (TurnOptions.max_result_bytes)"
            outcome = ("failed", error_result(f"Tool '{self.run.spec.name}' failed: {why}"))
        else:
            outcome = (outcome[0], content)
        self._report("result", outcome)

    def _progress(self, data: Any) -> None:
        """A progress report; one too long for the limit is replaced by a note saying so."""
        try:
            size = len(json.dumps(data, ensure_ascii=False, default=str).encode("utf-8", "replace"))
        except (TypeError, ValueError, RecursionError):
            size = 0  # not JSON: the codec says so where the event is made
        if size > self.run.max_result_bytes:
            data = {"dropped": f"a progress report of {size:,} bytes, over the limit of {self.run.max_result_bytes:,}"}
        self._report("progress", data)

    def interrupt(self, mode: str, reason: str, grace: float | None = None) -> None:
        """Cancel (cooperative) or stop (callbacks now; then the flag and the async task) this
        call; with ``grace``, the stop's callbacks have half of it, if that is less."""
        if self.ctx is None or self.finished:
            return
        if grace is not None:
            cancellation = self.ctx.cancellation
            cancellation.callback_deadline = min(cancellation.callback_deadline, grace / 2)
        if mode == "cancel":
            self.ctx.cancellation._request("cancel", reason)
            return
        if self.stopping:
            return
        self.stopping = True
        with self._lock:
            self._phase = "running"
        if not self.ctx.cancellation._request("stop", reason, then=self._stop_seen):
            self._stop_seen(())  # the tool has just returned: there is nothing to wait for

    def _stop_seen(self, overstayed: tuple[str, ...]) -> None:
        """A stop's callbacks are over (any thread): the tool sees its stop; an ``async def``
        tool's task is cancelled; an outcome that waited for this is reported."""
        with self._lock:
            self._phase = "over"
            held, self._held = self._held, None
            loop, task = self._task_loop, self._task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the loop has closed: the tool already returned
        if held is not None:
            self._report_once(held)

    def abandon(self, why: str) -> tuple[str, str] | None:
        """The tool did not return within its stop grace and its process ends it: the call's
        outcome to send instead (the tool's own if it had returned), or None if it was reported."""
        with self._lock:
            if self._reported:
                return None
            self._reported = True
            held, self._held = self._held, None
        ctx = self.ctx
        reason = ctx.cancellation._reason if ctx is not None else ""
        outcome = held or ("interrupted", interrupted_content(why, reason or "stopped"))
        if ctx is None:
            return outcome
        ctx.cancellation._close()
        late = ctx.cancellation.overstayed or ctx.cancellation._still_running()
        return outcome[0], safe_text(with_note(outcome[1], overstay_note(ctx, late)))


def overstay_note(ctx: ToolContext, names: tuple[str, ...] | None = None) -> str:
    """``on_stop callback close_index did not return within 1 s``, or ``""`` if none overstayed."""
    late = ctx.cancellation.overstayed if names is None else names
    if not late:
        return ""
    which = f"callback {late[0]}" if len(late) == 1 else f"callbacks {', '.join(late)}"
    return f"on_stop {which} did not return within {ctx.cancellation.callback_deadline:g} s"
