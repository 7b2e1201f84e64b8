"""What the fault relay costs a turn: a two-round turn (a tool call, then text), N times, in a
network namespace without the relay, with every connection through it (no fault), and with
every connection but the provider's through it; the three Runtimes run side by side and
take turns, so that the load of the machine weighs on each alike.

    python bench/relay_overhead.py [--turns 100]     (root, iproute2, nftables)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import Runtime  # noqa: E402
from actors.testing import FaultRelay, ScriptedProvider  # noqa: E402
from actors.testing.netns import Namespace, interpose  # noqa: E402
from bench.common import summary_ms  # noqa: E402
from bench.turn_overhead import lookup, responder  # noqa: E402  (the same turn)


@contextlib.contextmanager
def setting(name: str) -> Iterator[tuple[Runtime, FaultRelay | None]]:
    with Namespace() as ns:
        with ns.entered(), ScriptedProvider(responder=responder) as provider:
            relay = None
            with contextlib.ExitStack() as stack:
                if name != "direct":
                    relay = stack.enter_context(FaultRelay())
                    stack.enter_context(interpose(relay, [provider.port] if name == "relayed, provider direct" else []))
                with Runtime(provider.provider(), hosts=1, tool_processes=2) as rt:
                    yield rt, relay  # the caller stays in the namespace: nested settings unwind in order


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    names = ("direct", "relayed", "relayed, provider direct")
    took: dict[str, list[float]] = {name: [] for name in names}
    with contextlib.ExitStack() as stack:
        running = {name: stack.enter_context(setting(name)) for name in names}
        for i in range(args.turns + 5):
            for name, (rt, _) in running.items():
                start = time.perf_counter()
                result = rt.run("look alpha up", tools=[lookup]).result(timeout=30)
                assert result.finish_reason == "stop", result.finish_reason
                if i >= 5:  # the first turns warm the tool processes up
                    took[name].append(time.perf_counter() - start)
        out = {name: summary_ms(took[name]) for name in names}
        for name, (_, relay) in running.items():
            if relay is not None:
                out[name]["relay"] = dict(relay.counts)
    base = out["direct"]["p50_ms"]
    for name, figures in out.items():
        print(
            f"{name:<26} p50 {figures['p50_ms']:6.1f} ms  p99 {figures['p99_ms']:6.1f} ms  x{figures['p50_ms'] / base:.2f}"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
