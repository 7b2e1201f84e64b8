"""``python -m actors.testing``: serve the scripted model until interrupted (see ``main``)."""

from __future__ import annotations

import json
import sys
import threading

from actors.errors import ToolDefinitionError
from actors.testing.server import ScriptedProvider
from actors.tools.refs import import_ref

__all__ = ["main"]

DEMO_RESPONDER = "actors.testing.demo:demo_responder"


def main(argv: list[str] | None = None) -> int:
    """Serve the scripted model until interrupted (SIGINT, SIGTERM):

        python -m actors.testing [--host 127.0.0.1] [--port 0] [--responder module:function]

    ``--host`` is the only address it listens on: give one every node of a cluster reaches
    (``10.0.0.1``) and any number of runtimes and nodes share it, with no key. The replies
    come from ``--responder`` (a function taking a ``Request``, returning a ``Reply``),
    by default the demo's (``demo_responder``: a prompt that mentions ``build`` runs
    ``run_shell("sleep 30; echo built")``; any other asks for the weather in Paris and Oslo
    and to ``remove_file`` the prompt's last word, which needs approval; the tools are
    ``actors.testing.demo``'s, importable wherever greenroom is installed). Prints one line,
    ``{"host": ..., "port": ..., "base_url": "http://HOST:PORT/v1"}``, once it listens;
    an address it cannot listen on is one line on stderr and exit status 2."""
    import argparse
    import signal as _signal


    parser = argparse.ArgumentParser(prog="python -m actors.testing", description="Serve the scripted model.")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="the port (default: 0, a free one)")
    parser.add_argument(
        "--responder", default=DEMO_RESPONDER, help=f"module:function taking a Request, returning a Reply ({DEMO_RESPONDER})"
    )
    args = parser.parse_args(argv)
    try:
        responder = import_ref(args.responder)
        provider = ScriptedProvider(responder=responder, host=args.host, port=args.port)
    except (ToolDefinitionError, ValueError, OSError, OverflowError) as exc:
        print(f"python -m actors.testing: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    with provider:
        host, port = args.host, provider.port
        print(json.dumps({"host": host, "port": port, "base_url": f"http://{host}:{port}/v1"}), flush=True)
        for sig in (_signal.SIGINT, _signal.SIGTERM):
            _signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
