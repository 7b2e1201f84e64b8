"""A supervisor: a plain Thespian actor that runs three turns and steers them by policy.

It starts the turns through the directory (so it receives all their events as messages),
approves or denies their tool calls by a policy, and stops the turn that goes over its
budget of rounds or seconds. No facade is involved once the turns are started.

    python examples/04_supervisor.py
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from actors import DIRECTORY_NAME, DirectoryActor, Runtime, Supervisor, tool
from actors.testing import Request, ScriptedProvider, call, say, use_tools
from actors.tools.definition import tool_specs
from messages import (
    ChatMessage,
    Finish,
    ProviderConfig,
    StartTurn,
    StopTurn,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallStarted,
    TurnEvent,
)


@tool(requires_approval=True)
def delete_path(path: str) -> str:
    """Delete a path (pretend). Needs approval."""
    return f"deleted {path}"


@tool(requires_approval=True)
def send_email(to: str, subject: str) -> str:
    """Send an email (pretend). Needs approval."""
    return f"sent {subject!r} to {to}"


@tool
def poll(service: str) -> str:
    """Poll a service (pretend); the model may call it again and again."""
    return f"{service}: not ready"


def policy(request: ToolApprovalRequest) -> tuple[bool, str | None]:
    """Approve emails inside the company and deletes under /tmp; deny the rest."""
    args = request.arguments or {}
    if request.name == "send_email":
        ok = str(args.get("to", "")).endswith("@example.com")
        return ok, None if ok else "emails leave the company only with a human"
    if request.name == "delete_path":
        ok = str(args.get("path", "")).startswith("/tmp/")
        return ok, None if ok else "only /tmp may be deleted"
    return False, "no policy for this tool"


@dataclass(frozen=True)
class Supervise:
    """Start these turns; stop any that goes beyond ``max_rounds`` or ``max_seconds``."""

    turns: list[StartTurn]
    max_rounds: int
    max_seconds: float


@dataclass
class Report:
    finishes: dict[str, str] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    events: int = 0


class BudgetSupervisor(Supervisor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.report = Report()
        self.started: dict[str, float] = {}
        self.asker: Any = None

    def receiveMsg_Supervise(self, msg: Supervise, sender: Any) -> None:
        self.asker, self.plan = sender, msg
        self.directory = self.createActor(DirectoryActor, globalName=DIRECTORY_NAME)
        for start in msg.turns:
            self.started[start.turn_id] = time.monotonic()
            self.send(self.directory, start)  # its events come back to this actor
        self.wakeupAfter(timedelta(seconds=0.5))

    def receiveMsg_TurnEvent(self, event: TurnEvent, sender: Any) -> None:
        self.report.events += 1
        if isinstance(event, ToolApprovalRequest):
            approved, reason = policy(event)
            self.report.decisions.append(
                f"{event.turn_id[-4:]} {event.name}: {'approved' if approved else 'denied: ' + str(reason)}"
            )
            self.send(
                self.directory,
                ToolApprovalResponse(turn_id=event.turn_id, call_id=event.call_id, approved=approved, reason=reason),
            )
        elif isinstance(event, ToolCallStarted) and event.round >= self.plan.max_rounds:
            self._stop(event.turn_id, f"over budget: {event.round + 1} rounds")
        elif isinstance(event, Finish) and event.terminal:
            self.report.finishes[event.turn_id] = event.finish_reason
            if len(self.report.finishes) == len(self.plan.turns):
                self.send(self.asker, self.report)

    def receiveMsg_WakeupMessage(self, msg: Any, sender: Any) -> None:
        now = time.monotonic()
        for turn_id, since in self.started.items():
            if turn_id not in self.report.finishes and now - since > self.plan.max_seconds:
                self._stop(turn_id, f"over budget: {self.plan.max_seconds:g} s")
        if len(self.report.finishes) < len(self.plan.turns):
            self.wakeupAfter(timedelta(seconds=0.5))

    def _stop(self, turn_id: str, reason: str) -> None:
        if turn_id not in self.report.stopped:
            self.report.stopped.append(turn_id)
            self.send(self.directory, StopTurn(turn_id=turn_id, reason=reason))


def model(request: Request) -> Any:
    """A scripted model: what each of the three turns asks for."""
    first = request.messages[0]["content"]
    tool_results = [m for m in request.messages if m["role"] == "tool"]
    if "tidy" in first:
        if not tool_results:
            return use_tools(call("delete_path", {"path": "/tmp/cache"}), call("delete_path", {"path": "/etc"}))
        return say("Tidied what I was allowed to.")
    if "report" in first:
        if not tool_results:
            return use_tools(call("send_email", {"to": "boss@example.com", "subject": "Weekly report"}))
        return say("Report sent.")
    return use_tools(call("poll", {"service": "build"}), text="Still waiting...")  # never ends on its own


def main() -> None:
    with ScriptedProvider(responder=model) as scripted, Runtime(scripted.provider()) as runtime:
        provider: ProviderConfig = scripted.provider()
        prompts = ["tidy up the disk", "send the weekly report", "wait for the build"]
        tools = tool_specs([delete_path, send_email, poll])
        turns = [StartTurn(messages=[ChatMessage.user(p)], tools=tools, provider=provider) for p in prompts]
        supervisor = runtime.actor_system.createActor(BudgetSupervisor)
        report = runtime.actor_system.ask(supervisor, Supervise(turns, max_rounds=3, max_seconds=30), 60)
        assert isinstance(report, Report), report
        for start, prompt in zip(turns, prompts):
            print(f"{prompt!r:28} -> {report.finishes[start.turn_id]}")
        for line in report.decisions:
            print("decision:", line.split(" ", 1)[1])
        print(f"stopped over budget: {len(report.stopped)} turn(s); events received as messages: {report.events}")


if __name__ == "__main__":
    main()
