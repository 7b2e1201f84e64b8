"""What the scripted model answers to the prompts of the documentation's examples, page by page.

``SCRIPTS[page][prompt]`` lists the replies to a conversation that opens with ``prompt`` (its
first user message), one per round: the reply for a request is the one at the index of the
number of assistant messages the request already holds. A page's examples must ask exactly
its prompts (``tests/test_docs.py`` checks both ways), so an example that changes its prompt
or stops reaching the model fails.

``EXPECT[page]`` lists lines the page's examples must print: what their comments promise.
"""

from __future__ import annotations

import threading
from typing import Any

from actors.testing import Reply, Request, call, say, use_tools

ADD = "What is 2 + 3? Use the tool."
ADD_REPLIES = [
    use_tools(call("add", {"a": 2, "b": 3})),
    say("2 + 3 = 5."),
    use_tools(call("add", {"a": 5, "b": 4})),  # reference.md goes on from a saved history
    say("5 + 4 = 9."),
]
WEATHER = [
    use_tools(call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Oslo"})),
    say("Paris: 18 °C. Oslo: 18 °C."),
]
LONG = say(" ".join(["and then the story went on"] * 100), delay=0.01)
ESSAY = [say(" ".join(["Paris is a city of light and"] * 100), delay=0.01), say("Oslo is a city of fjords.")]
TRIP = [say(" ".join(["Day one: walk along the harbour, then"] * 100), delay=0.01), say("Day 1: the fjord. Day 2: the museums. Day 3: home.")]
BOB = [use_tools(call("transfer", {"to": "Bob", "amount": 200})), say("Sent Bob 20 euros.")]

SCRIPTS: dict[str, dict[str, list[Reply]]] = {
    "README.md": {
        "Weather in Paris and Oslo?": WEATHER,
        "Hi, I am Ada.": [say("Hello Ada!"), say("You are Ada.")],
        "Email the team that the build is green": [
            use_tools(
                call("send_email", {"to": "team@example.com", "subject": "The build is green"}),
                call("write_file", {"path": "/etc/motd", "text": "green"}),
            ),
            say("Emailed the team; the motd stays as it was."),
        ],
        "Index my 1000 pages": [use_tools(call("index_pages", {"pages": 1000})), say("Indexed.")],
        "Pay Alice 20 euros": [use_tools(call("pay", {"to": "Alice", "amount": 20})), say("Paid Alice 20 euros.")],
        "Write a long essay about Paris": ESSAY,
        "Plan a trip to Oslo, step by step": TRIP,
    },
    "docs/turns.md": {
        ADD: ADD_REPLIES,
        "Delete the branches old-1 and old-2": [
            use_tools(call("delete_branch", {"name": "old-1"}), call("delete_branch", {"name": "old-2"})),
            say("Deleted old-1; old-2 stays."),
        ],
        "Export everything, in 500 batches": [use_tools(call("export_all", {"batches": 500})), say("Exported.")],
        "Tell me a long story": [LONG],
        "Release version 2.0": [use_tools(call("release", {"version": "2.0"})), say("Released 2.0.")],
        "Write a long essay about Paris": ESSAY,
        "Plan a trip to Oslo, step by step": TRIP,
        "Send Bob 200 euros": BOB,
    },
    "docs/tools.md": {
        "Ping example.org, and tell me which process runs a call": [
            use_tools(call("ping", {"host": "example.org"}), call("process_id", {"label": "first"})),
            say("example.org answers."),
        ],
        "Reindex my 500 pages and run a 60 second build": [
            use_tools(call("reindex", {"pages": 500}), call("build", {"seconds": 60})),
            say("Done."),
        ],
        "Use the research tool: what is Paris?": [
            use_tools(call("research", {"question": "What is Paris?"})),
            say("Paris is a city on the Seine."),
        ],
        "What is Paris?": [use_tools(call("lookup", {"topic": "Paris"})), say("Paris is a city on the Seine.")],
    },
    "docs/providers.md": {"Say hello in French": [say("Bonjour !")]},
    "docs/durable.md": {
        "Clean up /tmp/old.log": [use_tools(call("remove_file", {"path": "/tmp/old.log"})), say("Removed it.")],
    },
    "docs/cluster.md": {
        "Email the weekly report to boss@example.com": [
            use_tools(call("send_email", {"to": "boss@example.com", "subject": "Weekly report"})),
            say("Sent."),
        ],
    },
    "docs/mcp.md": {
        "How many people live in Paris?": [use_tools(call("lookup_city", {"city": "Paris"})), say("2.1 million.")],
    },
    "docs/security.md": {ADD: ADD_REPLIES},
    "docs/tracing.md": {ADD: ADD_REPLIES},
    "docs/reference.md": {
        ADD: ADD_REPLIES,
        "Divide 6 by 3, and 1 by 0": [
            use_tools(call("divide", {"a": 6, "b": 3}), call("divide", {"a": 1, "b": 0})),
            say("6 / 3 = 2; 1 / 0 has no value."),
        ],
    },
}

EXPECT: dict[str, list[str]] = {
    "README.md": [
        "stop Paris: 18 °C. Oslo: 18 °C.",
        "Hello Ada!",
        "You are Ada.",
        "['text']",
        "stop Emailed the team; the motd stays as it was.",
        "stopped",
        "Paid Alice 20 euros.",
        "Oslo is a city of fjords.",
    ],
    "docs/turns.md": [
        "stop 1 38",
        "asks: delete_branch {'name': 'old-1'}",
        "refused: duplicate",
        "may decide: ['ops', 'reviewer']",
        "refused: not_allowed",
        "approved by reviewer",
        "cancelled",
        '{"ok": false, "error": "Interrupted: the call was cancelled (the supervisor winds down)", "data": null}',
        "True stop_turn",
        "stopped",
        "True ['user', 'assistant', 'user', 'assistant']",
        "paused",
        "stop",
        "invalid",
        '{"ok": true, "data": "sent 20 to Bob", "edited_arguments": {"to": "Bob", "amount": 20}}',
        "budget_exceeded",
        "['budget_warning', 'error']",
        "True Oslo is a city of fjords.",
        "['user', 'assistant', 'user', 'assistant'] 2",
        "2 + 3 = 5. 4",
    ],
    "docs/tools.md": [
        "convert - Convert an amount of US dollars.",
        "{'default': 'EUR', 'description': 'the currency to convert to', 'type': 'string'}",
        "{'amount': 9.0, 'currency': 'EUR'}",
        "__main__:convert",
        'ping success {"ok": true, "data": "example.org answers"}',
        'reindex {"ok": false, "error": "Interrupted: the call was stopped (the user pressed stop)", "data": null}',
        'build {"ok": false, "error": "Interrupted: the call was stopped (the user pressed stop)", "data": null}',
        "child: turn_started",
        "Paris is a city on the Seine.",
    ],
    "docs/providers.md": ["Bonjour !"],
    "docs/durable.md": ["awaiting_approval", "True", "stop"],
    "docs/cluster.md": ["{'sandbox': True}", "stop"],
    "docs/mcp.md": [
        "lookup_city - Population of a city, in millions.",
        'lookup_city {"ok": true, "data": {"city": "Paris", "population_m": 2.1}}',
    ],
    "docs/security.md": ["stop"],
    "docs/tracing.md": ["invoke_agent", "chat gpt-4o-mini", "execute_tool add", "handle request"],
    "docs/reference.md": [
        "{'role': 'user', 'content': [{'type': 'text', 'text': 'What is 2 + 3? Use the tool.'}]}",
        "True",
        "5 + 4 = 9.",
        'call_1 success {"ok": true, "data": 2.0}',
        'call_2 failed {"ok": false, "error": "ZeroDivisionError: float division by zero", "data": null}',
    ],
}


class DocsModel:
    """A responder for ``ScriptedProvider``: the replies of one page's scripts, and what was asked."""

    def __init__(self, page: str) -> None:
        self.scripts = SCRIPTS.get(page, {})
        self.asked: set[str] = set()
        self.unknown: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        messages = request.messages
        prompt = next((_text(m) for m in messages if m.get("role") == "user"), "")
        rounds = sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            replies = self.scripts.get(prompt)
            if replies is None or rounds >= len(replies):
                self.unknown.append(f"{prompt!r} at round {rounds}")
                return say("(the docs' test has no reply for this)")
            self.asked.add(prompt)
            return replies[rounds]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # Anthropic's blocks
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content or "")
