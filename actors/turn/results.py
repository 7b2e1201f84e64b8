"""The tool message a call ends with: what the model reads about its outcome.

Every tool call gets exactly one tool message (``ToolFinished.content`` is the same text):
a value becomes ``{"ok": true, "data": ...}``, a failure ``{"ok": false, "error": ...,
"data": null}``, as the seeds write them; a call interrupted by a stop or cancel says so
and why. These are the only three shapes; every process that ends a call uses this module. A call
whose arguments the approver edited says what it ran with: ``"edited_arguments"`` beside
the rest (``with_edited``), whatever its outcome.
A note about how the call ended (an ``on_stop`` callback that did not return in time, a
stopped call whose process never confirmed) is added by ``with_note``: to the error's text,
or as ``"note"`` beside the data of a call that had returned.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic_core import PydanticSerializationError, to_jsonable_python

__all__ = [
    "RECOVERED",
    "Recovery",
    "error_result",
    "interrupted_content",
    "ok_result",
    "unreported_note",
    "with_edited",
    "with_note",
]

Recovery = Literal["restart", "takeover", "store"]  # why a turn was loaded from its store
RECOVERED: dict[Recovery, tuple[str, str]] = {  # what happened to a call left running, and why the turn goes on
    "restart": ("the runtime stopped while the call ran", "recovered after a restart"),
    "takeover": ("its host was lost while the call ran", "another host took the turn over"),
    "store": ("its host lost the turn store while the call ran", "the turn went on once the store answered"),
}


def unreported_note(why: Recovery) -> str:
    """The note on a call that was being stopped when its turn was recovered (``why``): its
    process never reported how it ended."""
    return f"{RECOVERED[why][1]} before its process reported"


def ok_result(data: Any) -> str:
    """A successful call's tool message: ``{"ok": true, "data": ...}``; a value that is not
    JSON-serializable makes it an error saying so."""
    try:
        jsonable = to_jsonable_python(data)
    except PydanticSerializationError as exc:
        return error_result(f"the tool returned a value that is not JSON-serializable: {exc}")
    return json.dumps({"ok": True, "data": jsonable}, ensure_ascii=False)


def error_result(message: str) -> str:
    """A failed call's tool message: ``{"ok": false, "error": ..., "data": null}``."""
    return json.dumps({"ok": False, "error": message, "data": None}, ensure_ascii=False)


def interrupted_content(what: str, reason: str) -> str:
    """The tool message of a call that was interrupted: ``Interrupted: {what} ({reason})``."""
    return error_result(f"Interrupted: {what} ({reason})")


def with_note(content: str, note: str) -> str:
    """``content`` (a tool message of this module) with ``note`` added: ``"{error}; {note}"``
    for a failure, a ``"note"`` beside the data of a success; other text gets ``"; {note}"``."""
    if not note:
        return content
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("ok") is False and isinstance(body.get("error"), str):
        return error_result(f"{body['error']}; {note}")
    if isinstance(body, dict) and body.get("ok") is True:
        notes = [body["note"], note] if isinstance(body.get("note"), str) else [note]
        return json.dumps({**body, "note": "; ".join(notes)}, ensure_ascii=False)
    return f"{content}; {note}"


def with_edited(content: str, arguments: Any) -> str:
    """``content`` (a tool message of this module) saying the call ran with ``arguments``, as
    the approver edited them: ``"edited_arguments"`` beside its result or error; other text
    (a denial's ``Rejected: ...``) gets ``" (arguments edited at approval: {...})"``."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    edited = to_jsonable_python(arguments)
    if isinstance(body, dict) and isinstance(body.get("ok"), bool):
        return json.dumps({**body, "edited_arguments": edited}, ensure_ascii=False)
    return f"{content} (arguments edited at approval: {json.dumps(edited, ensure_ascii=False)})"
