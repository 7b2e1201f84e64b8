"""How greenroom's processes talk: the hardened Thespian transport, its frames, the Thespian
internals it leans on, and the messages its own processes exchange.

Runs in: every process of a tree (installed in the owner before anything forks).

May import: ``messages`` and the shared modules (``errors``, ``logs``, ``debug_trace``),
and ``telemetry.spans`` for the span records hosts send their owner.
"""
