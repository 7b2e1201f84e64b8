"""greenroom's exceptions. Errors cross actors as data (``Error`` events, ``ControlReply``),
never as exception objects; these are raised in the caller's own process.

    GreenroomError
    ├── ConfigurationError          misuse: a bad tool definition, option or argument
    │   └── ToolDefinitionError     a tool that cannot be offered or loaded
    ├── ToolContextError            ToolContext.current() outside a running tool
    ├── RuntimeClosedError          the Runtime was used after it shut down
    ├── ControlRejected             the turn refused a command (code: unknown_call, duplicate, ...),
    │   │                           or a session a message (busy, started, unknown_message)
    │   └── Overloaded              run() found its host's queue full (code: overloaded), naming the limit
    ├── UnknownSession (LookupError) runtime.session(id): no session with that id
    ├── TurnTimeout                 a wait on a turn ran out of time (and only that)
    ├── HostUnreachable             a command could not be delivered to its turn's host
    ├── ReaderDropped               the turn's host stopped sending to this handle (it fell behind)
    ├── ChildTurnFailed             run_subagent's child turn ended without an answer
    ├── StoreError                  the turn store refused or failed an operation
    │   ├── StoreUnavailable        it could not be reached or did not answer: safe to retry
    │   ├── SnapshotError           one turn's record is corrupted or of an unknown version
    │   └── Fenced                  another host has taken the turn over: this one may not write
    ├── TransportAuthError          a frame or a peer failed authentication
    └── ToolError                   raised in a tool: its call fails with exactly this message
    messages.codec.CodecError       (ValueError) bytes that are not a greenroom message

    ToolCancelled (BaseException)   raised inside a tool by throw_if_requested(); like
                                    trio.Cancelled it is not an Exception, so a tool's
                                    ``except Exception`` does not swallow it
"""

from __future__ import annotations

from messages.codec import CodecError

__all__ = [
    "ChildTurnFailed",
    "CodecError",
    "ConfigurationError",
    "ControlRejected",
    "Fenced",
    "GreenroomError",
    "HostUnreachable",
    "Overloaded",
    "ReaderDropped",
    "RuntimeClosedError",
    "SnapshotError",
    "StoreError",
    "StoreUnavailable",
    "ToolCancelled",
    "ToolContextError",
    "ToolDefinitionError",
    "ToolError",
    "TransportAuthError",
    "TurnTimeout",
    "UnknownSession",
]


class GreenroomError(Exception):
    """Base of every greenroom exception."""


class ConfigurationError(GreenroomError):
    """The library was used in a way it does not support."""


class ToolDefinitionError(ConfigurationError):
    """A tool cannot be offered to a model or loaded by another process."""


class ToolContextError(GreenroomError):
    """``ToolContext.current()`` was called where no tool is running."""


class RuntimeClosedError(GreenroomError):
    """The Runtime has shut down."""


class ControlRejected(GreenroomError):
    """A turn refused a command and changed nothing; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Overloaded(ControlRejected):
    """``run()`` was refused at once: its turn's host runs ``max_running`` turns and its queue
    holds ``max_queued``; the message says which host and its limits. Nothing was started;
    ``run(..., wait=True)`` waits for room instead."""

    def __init__(self, message: str) -> None:
        super().__init__("overloaded", message)


class UnknownSession(GreenroomError, LookupError):
    """``runtime.session(session_id)`` named a session that neither this Runtime nor its store
    has (``create=True`` makes it instead); nothing was created."""

    def __init__(self, session_id: str, where: str) -> None:
        super().__init__(f"no session {session_id!r} in {where}: runtime.session(id, create=True) makes one")
        self.session_id = session_id

    def __str__(self) -> str:  # LookupError's would quote the message
        return str(self.args[0])


class TurnTimeout(GreenroomError, TimeoutError):
    """Waiting on a turn took longer than the timeout given."""


class HostUnreachable(GreenroomError):
    """A command could not be delivered to the host of its turn, even after the transport's
    retries (the host's process is gone, or the network to it is); it was not applied."""


class ReaderDropped(GreenroomError):
    """The turn's host stopped sending events to this handle: it had not read them for too
    long after the turn ended (``TurnOptions.reader_grace``). The turn itself was not
    affected; with a store, ``attach`` reads its events again."""


class ChildTurnFailed(GreenroomError):
    """A child turn started by ``run_subagent`` ended without an answer (error, max rounds,
    length, or no answer in time)."""


class StoreError(GreenroomError):
    """The turn store could not read or write."""


class StoreUnavailable(StoreError):
    """The turn store could not be reached, or did not answer in time. A write that failed so
    may or may not have been committed; every write of greenroom's is idempotent, so it is
    retried. A handle raises it for a turn whose store stayed unreachable past its bound
    (``Runtime(store_wait=...)``); the store keeps the turn's last good state."""


class SnapshotError(StoreError):
    """One turn's stored record cannot be read; other turns are unaffected."""


class Fenced(StoreError):
    """A write for a turn whose owner or epoch is no longer the writer's: another host has
    taken the turn over (its host was cut off, or presumed lost). Nothing was written; the
    writer stops the turn's work."""


class TransportAuthError(GreenroomError):
    """A frame or a peer did not authenticate with the deployment's key."""


class ToolError(GreenroomError):
    """Raised in a tool to fail its call with exactly this message: the tool message is
    ``{"ok": false, "error": message, "data": null}``, without the exception's type name
    (MCP tools use it for an ``isError`` result and a server that went away)."""


class ToolCancelled(BaseException):
    """Raised in a tool by ``throw_if_requested()`` once stop or cancel was requested."""

    def __init__(self, mode: str, reason: str) -> None:
        super().__init__(f"tool call {mode}: {reason}")
        self.mode = mode
        self.reason = reason
