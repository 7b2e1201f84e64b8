"""Sessions: a chat whose history is kept in a store, opened again by a new Runtime, and a
message that rolls back the turn it interrupts; on the built-in scripted provider.

python examples/08_sessions.py
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from actors import Runtime, TextDelta, TurnHandle
from actors.testing import ScriptedProvider, say


def main() -> None:
    held = threading.Event()  # the scripted model's third answer waits for this
    script = [say("Hello Ada!"), say("You are Ada."), say("Paris is a city of", hold_after=1, hold=held), say("Rome!")]
    with ScriptedProvider(script) as model, tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "chat.db")
        with Runtime(model.provider(), store=store) as runtime:
            chat = runtime.session(system="Answer in one sentence.")
            for text in ["Hi, I am Ada.", "What is my name?"]:
                print(text, "->", chat.run(text).result(timeout=60).text)
            session_id = chat.session_id
        with Runtime(model.provider(), store=store) as runtime:  # another Runtime: the store has the chat
            chat = runtime.session(session_id, on_busy="rollback")
            print("turns so far:", len(chat.turns))
            paris = chat.run("Tell me about Paris")
            assert isinstance(paris, TurnHandle)  # a turn started (only enqueue's message may wait: a Queued)
            paris.wait_for(lambda e: isinstance(e, TextDelta), timeout=60)  # it is answering
            rome = chat.run("No, about Rome")  # rolls the Paris turn back
            print("Paris:", paris.result(timeout=60, final=True).finish_reason, "| Rome:", rome.result(timeout=60).text)
            print([(m.role, m.content) for m in chat.wait_idle(timeout=60)][-2:])
            held.set()


if __name__ == "__main__":
    main()
