"""The scripted provider's replies for a cluster: by prompt and round, whichever node asks."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from actors.testing import Reply, Request, fail


class Scripts:
    """The provider's responder: round ``k`` of a turn whose first user message is ``prompt``
    gets the ``k``-th reply added for that prompt (a reply, or a function of the request);
    ``k`` is the number of assistant messages the request carries. ``asked`` counts requests
    by (prompt, round)."""

    def __init__(self) -> None:
        self._replies: dict[str, list[Reply | Callable[[Request], Reply]]] = {}
        self._lock = threading.Lock()
        self.asked: Counter[tuple[str, int]] = Counter()

    def add(self, prompt: str, *replies: Reply | Callable[[Request], Reply]) -> None:
        with self._lock:
            self._replies[prompt] = list(replies)

    def __call__(self, request: Request) -> Reply:
        prompt = next((m.get("content") for m in request.messages if m.get("role") == "user"), None)
        rounds = sum(1 for m in request.messages if m.get("role") == "assistant")
        with self._lock:
            self.asked[(str(prompt), rounds)] += 1
            replies = self._replies.get(str(prompt), [])
        if rounds >= len(replies):
            return fail(400, f"no reply scripted for round {rounds} of {prompt!r}")
        reply = replies[rounds]
        return reply if isinstance(reply, Reply) else reply(request)
