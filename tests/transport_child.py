"""A Runtime with a transport configuration of its own, in a process of its own (the
transport is configured once per process), steered line by line over stdin.

    python -m tests.transport_child '{"frame_timeout": 1, "encrypt": true}'

``key`` (hex) and ``admin_port`` in the settings go to the Runtime, the rest to its
``TransportConfig``. Prints ``{"pid", "sid", "admin_port"}``, then for each line: ``turn <word>`` runs a turn
whose prompt and answer contain the word and prints ``{"text": ...}``; ``quit`` closes.
"""

from __future__ import annotations

import json
import sys

from actors import Runtime
from actors.testing import ScriptedProvider, call, say, use_tools
from actors.wire.transport import TransportConfig

from . import tools_for_tests as T


def main() -> None:
    settings = json.loads(sys.argv[1])
    key = bytes.fromhex(settings.pop("key")) if "key" in settings else None
    admin_port = settings.pop("admin_port", None)
    config = TransportConfig(**settings)
    with (
        ScriptedProvider() as provider,
        Runtime(provider.provider(), transport=config, key=key, admin_port=admin_port) as rt,
    ):
        print(json.dumps({"pid": rt.admin_sid, "sid": rt.admin_sid, "admin_port": rt.admin_port}), flush=True)
        for line in sys.stdin:
            verb, _, word = line.strip().partition(" ")
            if verb == "quit":
                break
            provider.add(use_tools(call("add", {"a": 1, "b": 2})), say(f"the answer to {word} is three"))
            result = rt.run(f"tell me about {word}", tools=[T.add]).result(30)
            print(json.dumps({"text": result.text}), flush=True)


if __name__ == "__main__":
    main()
