"""A TurnHost: one OS process that hosts many TurnActors and the LLMActor that streams for them.

Runs in: each TurnHost process (``--hosts`` per node, one per core by default, started by
the node's directory).

``turn_host.TurnHost`` is the Thespian actor; inside it each ``turn_actor.TurnActor`` is an
in-process actor with its own mailbox (``actors.mailbox``), running its ``turn.rules``;
``registry`` keeps the host's turns by id (held, forwarded, found); ``llm_actor`` streams
from providers on the host's stream loop (one thread); ``tool_runner`` sends calls to tool processes (or runs
inline async tools); ``outbox`` batches events to subscribers (``answers``: a
start's answer to the Runtime rides with them) and ``subscriptions`` tracks each one's window; ``held`` keeps commands that overtook their turn; ``durable`` is the
host's side of its store (leases, takeover, the command inbox); ``timers`` keeps the turns'
timers behind a few Thespian wakeups; ``ports`` are the faces the parts see of the host.

May import: ``turn``, ``tools``, ``providers``, ``mcp``, ``store``, ``telemetry``,
``wire``, ``lifecycle.processes`` and the shared modules; never ``client`` or ``cluster``.
"""
