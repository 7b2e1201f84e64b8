"""Every process greenroom starts ends with its owner: the process tree, the lifeline, the
owner's signals, and the ``/proc`` helpers that find and end processes by PID.

Runs in: the owner (``tree``, ``owner``) and every process of its tree (``lifeline``,
``processes``).

May import: ``wire``, ``store``, ``providers.client`` (to build what the tree inherits) and
the shared modules; ``owner`` knows ``client.Runtime`` only as a type.
"""
