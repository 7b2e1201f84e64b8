"""Who is where: the directory of each node, the membership of a deployment, ``greenroom node``.

Runs in: the directory actor of each node (its own process), and ``greenroom node``.

``directory.DirectoryActor`` starts a node's TurnHosts and ToolPool, finds a turn's host,
forwards commands, and watches membership (``membership``); ``names`` holds what every
process agrees on (the directory's global name, a turn's slot).

May import: ``host``, ``tools``, ``store``, ``wire``, ``lifecycle`` and the shared
modules; never ``client``.
"""
