"""The rules of a turn, as plain code: what each message does, and what the turn does next.

Runs in: whichever process hosts the turn (a TurnHost), and in the command line, which
checks a command against a stored turn with these same rules.

``rules.TurnRules`` takes a turn's state and one input and returns decisions
(``decisions``), through a handler module per concern (``stream``, ``running``,
``approvals``, ``stopping``: free functions over ``core.Rules``); ``priority.next_action`` is the whole priority (cancel > approval-resume >
max-rounds > the next LLM call). Nothing here performs I/O, reads a clock it was not given,
or knows of actors: tests drive it directly.

May import: ``messages`` and ``actors.errors`` only.
"""
