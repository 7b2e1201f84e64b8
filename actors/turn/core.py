"""What the handler modules see of a turn's rules: one ``Rules``, its state and its few verbs.

The rules of a turn are cut by what they are about: the model's stream (``stream``), the
calls as they run (``running``), the approvals (``approvals``), stop and cancel
(``stopping``), new input, pause and resume (``steering``), and ``TurnRules`` itself (``rules``), which takes every input, numbers the
events and asks ``priority.next_action`` what comes next. Each handler is a free function
``(rules, message) -> decisions`` over the ``Rules`` below, so no module needs another's
class and none imports ``rules``; ``TurnRules`` is the one ``Rules`` there is.
"""

from __future__ import annotations

from typing import Any, Protocol

from messages import RejectCode, ToolSpec, TurnEvent, TurnState
from messages.events import FinishReason

from .assembly import StreamAssembly
from .calls import CheckArguments, NeedsApproval
from .decisions import Decision, Emit

__all__ = ["Rules"]


class Rules(Protocol):
    """One turn's rules, as its handlers use them (``rules.TurnRules``)."""

    state: TurnState
    specs: dict[str, ToolSpec]  # the turn's tools by name
    assembly: StreamAssembly | None  # the stream in flight, if any
    needs_approval: NeedsApproval
    check_arguments: CheckArguments  # edited arguments against a tool's parameters
    alive: dict[str, float]  # when each running call last showed a sign of life (its idle bound)

    def now(self) -> float:
        """The clock the rules were given."""

    def emit(self, cls: type[TurnEvent], **fields: Any) -> Emit:
        """The next event of the turn (numbered here, and only here)."""

    def reply(
        self, command: Any, ok: bool, code: RejectCode | None, message: str, resumes_at: int | None = None
    ) -> list[Decision]:
        """The answer to ``command``'s sender: always for a refusal, for success only if asked."""

    def advance(self, *, at_step: bool = False, commit_due: bool = False, answered: str | None = None) -> list[Decision]:
        """Carry out ``priority.next_action`` until the turn waits."""

    def finish(self, reason: FinishReason, **fields: Any) -> Emit:
        """The run's ``Finish``: the history since the previous one (or all of it, if asked)."""

    def end(self, reason: FinishReason, error: tuple[str, str] | None = None) -> list[Decision]:
        """End the turn: close every open call, then ``Error`` if any, then ``Finish``."""
