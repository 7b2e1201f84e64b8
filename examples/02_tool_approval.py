"""Human approval of tool calls: pause the turn, approve or deny each call, resume.

Interactive: press ``a`` to approve, ``d`` to deny, ``r`` to deny with a reason, ``x`` to
deny this and every other undecided call. Unattended: ``--approve-all`` or ``--deny-all``
(with ``--reason``). Calls that need no approval run at once and are never asked about.

    python examples/02_tool_approval.py
    python examples/02_tool_approval.py --deny-all --reason "not today"
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from actors import Runtime, tool
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.testing.demo import print_event
from messages import ToolApprovalRequest, ToolApprovalResponse


def outside_sandbox(arguments: dict[str, Any]) -> bool:
    """Writes inside /tmp/sandbox/ are fine; anywhere else needs a human."""
    return not str(arguments.get("path", "")).startswith("/tmp/sandbox/")


@tool(requires_approval=outside_sandbox)
def write_file(path: str, text: str) -> str:
    """Write text to a file (pretend)."""
    return f"wrote {len(text)} bytes to {path}"


@tool(requires_approval=True)
def send_email(to: str, subject: str) -> str:
    """Send an email (pretend). Always needs approval."""
    return f"sent '{subject}' to {to}"


def read_key(prompt: str) -> str:
    print(prompt, end=" ", flush=True)
    if not sys.stdin.isatty():
        line = sys.stdin.readline()
        return line.strip()[:1].lower()
    import termios
    import tty

    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        key = sys.stdin.read(1).lower()
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
    print(key)
    return key


def decide(request: ToolApprovalRequest, args: argparse.Namespace) -> tuple[str, str | None]:
    """('approve' | 'deny' | 'deny_rest', reason)."""
    if args.approve_all:
        return "approve", None
    if args.deny_all:
        return "deny", args.reason
    while True:
        key = read_key(f"\n{request.name}({json.dumps(request.arguments)}): [a]pprove [d]eny [r]eason [x] deny rest?")
        if key == "a":
            return "approve", None
        if key == "d":
            return "deny", None
        if key == "r":
            return "deny", input("reason: ").strip() or None
        if key == "x":
            return "deny_rest", None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--approve-all", action="store_true")
    group.add_argument("--deny-all", action="store_true")
    parser.add_argument("--reason", default=None, help="the reason given with --deny-all")
    args = parser.parse_args(argv)

    script = [
        use_tools(
            call("write_file", {"path": "/tmp/sandbox/notes.txt", "text": "draft"}),
            call("write_file", {"path": "/etc/motd", "text": "hello"}),
            call("send_email", {"to": "boss@example.com", "subject": "Report"}),
            text="I'll save the notes, update the motd and email the report.",
        ),
        say("Done with what I was allowed to do."),
    ]
    with ScriptedProvider(script) as model, Runtime(model.provider()) as runtime:
        turn = runtime.run("Save my notes, update the motd, email the report.", tools=[write_file, send_email])
        while True:
            for event in turn.events(timeout=60):
                print_event(event)
            result = turn.result()
            if result.finish_reason != "awaiting_approval":
                break
            decisions: list[ToolApprovalResponse] = []
            deny_rest = False
            for request in result.pending_approvals:
                verdict, reason = decide(request, args)
                if verdict == "deny_rest":
                    deny_rest = True
                    break
                decisions.append(
                    ToolApprovalResponse(call_id=request.call_id, approved=verdict == "approve", reason=reason)
                )
            turn.respond(decisions, deny_rest=deny_rest)
        print("\nfinal history:")
        for m in result.messages:
            print(
                f"  [{m.role}] {m.content if m.content is not None else ''}{' ' + str([c.name for c in m.tool_calls]) if m.tool_calls else ''}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
