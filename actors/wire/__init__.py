"""How greenroom's processes talk: the hardened Thespian transport, its frames, the Thespian
internals it leans on, and the messages its own processes exchange.

Runs in: every process of a tree (installed in the owner before anything forks).

``transport`` hardens Thespian's TCP transport (signed or encrypted ``frames``, each bound
to its receiver's ``incarnation``, bounds, resends); ``thespian_compat`` lists and checks the Thespian internals greenroom patches;
``protocol`` holds the messages between greenroom's own processes; ``dispatch`` is the one
dispatch style of its actors; ``placement`` says which host a turn goes to.

May import: ``messages`` and the shared modules (``errors``, ``logs``, ``debug_trace``),
and ``telemetry.spans`` for the span records hosts send their owner.
"""
