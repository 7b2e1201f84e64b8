"""Quickstart: one turn with a tool, on the built-in scripted provider.

python examples/01_quickstart.py
"""

from __future__ import annotations

from actors import Runtime, tool
from actors.testing import ScriptedProvider, call, say, use_tools


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main() -> None:
    # A scripted model: first it calls add(2, 3), then it answers.
    with ScriptedProvider([use_tools(call("add", {"a": 2, "b": 3})), say("2 + 3 = 5.")]) as model:
        with Runtime(model.provider()) as runtime:
            turn = runtime.run("What is 2 + 3?", tools=[add])
            for event in turn.events(timeout=60):
                print(
                    event.kind,
                    event.model_dump(exclude={"turn_id", "parent_turn_id", "root_turn_id", "kind", "messages"}),
                )
            result = turn.result()
            print(result.finish_reason, "->", result.text)


if __name__ == "__main__":
    main()
