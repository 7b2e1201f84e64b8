"""What runs in the owner's process: the ``Runtime`` and ``AsyncRuntime``, turn handles and
their event streams, and the one thread (the pump) that talks to the actor system.

Runs in: the application's process (the owner).

A ``Runtime`` starts the process tree (``lifecycle``), sends each turn's messages to its
host (``routing``), and hands what comes back (``receiving``) to the handles (``handle``,
``stream``).

May import: anything in ``actors``. Nothing imports ``client`` but the public surface
(``actors/__init__``), the command line and the test kit.
"""
