"""Who is where: the directory of each node, the membership of a deployment, ``greenroom node``.

Runs in: the directory actor of each node (its own process), and ``greenroom node``.

``directory.DirectoryActor`` starts a node's TurnHosts and ToolPool, keeps the table of
nodes (``membership``), places a supervisor's turns and routes commands by turn id
(``routes``), has its hosts recover their turns (``recovery``); ``locator`` tells a member
where the leader's directory is; ``names`` holds what every process agrees on (the
directory's global name, the leader's capability, a node's name).

May import: ``host``, ``tools``, ``store``, ``wire``, ``lifecycle`` and the shared
modules; never ``client``.
"""
