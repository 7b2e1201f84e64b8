"""OpenTelemetry: spans recorded as plain data where the work happens (``spans``,
``turn_spans`` in a TurnHost), exported by the owner's TracerProvider (``export``).

Runs in: every TurnHost and tool process (recording), the owner (exporting).

May import: ``turn`` (the decisions it watches), ``messages`` and the shared modules.

``from actors.telemetry import ...`` keeps the names of ``spans``.
"""

from .spans import *
from .spans import __all__
