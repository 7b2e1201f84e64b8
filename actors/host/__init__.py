"""A TurnHost: one OS process that hosts many TurnActors and the LLMActor that streams for them.

Runs in: each TurnHost process (one per core, started by the directory).

``turn_host.TurnHost`` is the Thespian actor; inside it each ``turn_actor.TurnActor`` is an
in-process actor with its own mailbox (``mailbox``), running its ``turn.rules``;
``llm_actor`` streams from providers on worker threads; ``tool_runner`` sends calls to
tool processes (or runs inline async tools); ``outbox`` batches events to subscribers;
``held`` keeps commands that overtook their turn.

May import: ``turn``, ``tools``, ``providers``, ``mcp``, ``store``, ``telemetry``,
``wire``, ``lifecycle.processes`` and the shared modules; never ``client`` or ``cluster``.
"""
