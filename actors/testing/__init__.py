"""A real HTTP server that plays a model: scripted replies over the providers' wire formats.

Runs in: tests, examples, benchmarks and the demo (the owner's process, or one of its own:
``python -m actors.testing [--host H --port P]``, the demo's replies served to every node of
a cluster); never in a TurnHost or a tool process.

``ScriptedProvider`` listens on ``127.0.0.1`` (or ``host``) and answers ``POST /v1/chat/completions``
(OpenAI-compatible SSE) and ``POST /v1/messages`` (Anthropic Messages SSE) from a script:
a list of ``Reply`` objects taken in order, or a ``responder(request) -> Reply`` function.
A reply is written as a real chunked HTTP stream and can misbehave on purpose: delays
between chunks, a stall (the server then waits for the client to hang up), a cut without
the end of the body, a malformed data line, an HTTP error with ``Retry-After``. A reply can
also come as one non-streaming JSON response, as from a server that ignores ``stream: true``
(``non_streaming=True``), or as any bytes with any status and content type (``raw_response``).

Every request is recorded (``requests``) with an event set when the client disconnected
before the reply was complete, so tests can see that a stop really closed the connection.
A request whose history breaks the tool-call pairing rule is refused with HTTP 400, as
OpenAI does.

Builders: ``say(text)``, ``call(name, args)`` with ``use_tools(...)``, ``fail(status)``,
``raw_response(status, content_type, body)``.

The network as it really behaves: ``FaultRelay`` (``relay``) sits between processes (or
nodes) and, frame by frame of Thespian's transport, passes, cuts after delivery (a lost
ACK), duplicates, delays, stalls or resets, as a seeded ``FaultPolicy`` of ``Rule``s says
(``faults``); ``netns.relayed(policy)`` runs the calling thread in a fresh network namespace
whose every TCP connection goes through one (root, iproute2 and nftables needed).
"""

from .faults import CUT, DUPLICATE, PASS, RESET, STALL, Fault, FaultPolicy, Frame, Rule, delay
from .relay import FaultRelay
from .script import Chunk, Raw, Reply, Text, ToolArgs, ToolStart, call, fail, raw_response, say, use_tools
from .server import Request, ScriptedProvider

__all__ = [
    "CUT",
    "DUPLICATE",
    "PASS",
    "RESET",
    "STALL",
    "Chunk",
    "Fault",
    "FaultPolicy",
    "FaultRelay",
    "Frame",
    "Raw",
    "Reply",
    "Request",
    "Rule",
    "ScriptedProvider",
    "Text",
    "ToolArgs",
    "ToolStart",
    "call",
    "delay",
    "fail",
    "raw_response",
    "say",
    "use_tools",
]
