"""What a turn does next: the priority cancel > approval-resume > max-rounds > next LLM call,
in one pure function of the turn's situation.

``next_action`` is called everywhere the loop can move (after an input that can move it:
a start, a model's answer, a call's end, a decision that completes a batch, a stop or
cancel, a timer; not after a delta, a progress report or a decision that leaves a batch
open) and the rules carry out what it returns, then ask again, until it says ``wait`` or
``step``. The first row whose condition holds decides (the conditions are the fields of
``Situation``; a test reads this table and checks it against the code for every
combination of them):

    ====  =============================================  ==========  ==========  ======================================
    row   condition                                      at a step   otherwise   meaning
    ====  =============================================  ==========  ==========  ======================================
     1    finished                                       wait        wait        nothing happens after the end
     2    stop and (streaming or running)                halt        halt        a stop acts at once: abort, interrupt
     3    stop and stopping                              wait        wait        for every stopped call's end
     4    stop                                           stop        stop        Error and Finish(stopped), once
     5    cancel and (streaming or running or stopping)  wait        wait        a cancel lets them finish
     6    cancel and answered                            cancel      cancel      the answer was the boundary
     7    cancel                                         cancel      step        at the next step, before the rest
     8    streaming                                      wait        wait        the response comes first
     9    commit_due                                     resume      resume      approvals commit after the window
    10    running or stopping                            wait        wait        the batch is not done
    11    batch_done                                     collect     collect     tool messages, then round += 1
    12    undecided and not paused                       pause       pause       Finish(awaiting_approval), once
    13    undecided or decided                           wait        wait        for decisions, for the window
    14    answered                                       answer      answer      Finish(stop) or Finish(length)
    15    not rounds_left                                max_rounds  step        max rounds, at a step
    16    True                                           stream      step        the next LLM call, at a step
    ====  =============================================  ==========  ==========  ======================================

``step`` means: send the turn a ``TakeStep`` at the tail of its mailbox, so that whatever
is already queued (a stop, a cancel) is handled first; the loop goes on in that step. An
approval commits in a timer after ``approval_window`` (row 9), so a cancel sent right
behind an approval is handled before it (row 7 wins over row 9).

A stop acts in two parts. ``halt`` (row 2) aborts the stream and interrupts every running
call at once; each such call is then ``stopping`` until its tool process reports its end
(or a backstop timer closes it), and the turn ends (row 4) only once none is: so
``Finish(stopped)`` (``Finish(cancelled)`` after a cancel) means every call of the turn
has ended and its ``on_stop`` callbacks have run (returned, or passed their deadline). A
call stopped alone (``StopTool``, its time limit) is ``stopping`` too, and its batch waits
for it like for a running one (row 10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from messages import TurnState

__all__ = ["Action", "Situation", "next_action", "situation"]

Action = Literal[
    "wait", "halt", "stop", "cancel", "resume", "collect", "pause", "answer", "max_rounds", "stream", "step"
]


@dataclass(frozen=True)
class Situation:
    """The facts ``next_action`` decides on."""

    finished: bool = False
    stop: bool = False
    cancel: bool = False
    streaming: bool = False
    running: bool = False
    stopping: bool = False  # a stopped call's process has not reported its end yet
    commit_due: bool = False  # decided approvals whose window has passed
    batch_done: bool = False  # a batch exists and every call in it has ended
    undecided: bool = False  # a call waits for approval
    paused: bool = False  # Finish(awaiting_approval) was emitted for this batch
    decided: bool = False  # decisions wait for their window
    answered: bool = False  # the model's response had no tool calls
    rounds_left: bool = True
    at_step: bool = False


def next_action(s: Situation) -> Action:
    """What the turn does next; see the module docstring for the table."""
    if s.finished:
        return "wait"
    if s.stop:
        if s.streaming or s.running:
            return "halt"
        return "wait" if s.stopping else "stop"
    if s.cancel:
        if s.streaming or s.running or s.stopping:
            return "wait"
        return "cancel" if s.at_step or s.answered else "step"
    if s.streaming:
        return "wait"
    if s.commit_due:
        return "resume"
    if s.running or s.stopping:
        return "wait"
    if s.batch_done:
        return "collect"
    if s.undecided and not s.paused:
        return "pause"
    if s.undecided or s.decided:
        return "wait"
    if s.answered:
        return "answer"
    if not s.rounds_left:
        return "max_rounds" if s.at_step else "step"
    return "stream" if s.at_step else "step"


def situation(state: TurnState, *, at_step: bool, commit_due: bool, answered: bool) -> Situation:
    """The facts of ``state``; the three flags are what the current input brought."""
    batch = state.batch or []
    statuses = {c.status for c in batch}
    return Situation(
        finished=state.phase == "finished",
        stop=state.stop is not None,
        cancel=state.cancel is not None,
        streaming=state.phase == "streaming",
        running="running" in statuses,
        stopping="stopping" in statuses,
        commit_due=commit_due and state.commit_pending,
        batch_done=bool(batch) and statuses == {"done"},
        undecided="pending_approval" in statuses,
        paused=state.paused,
        decided="decided" in statuses,
        answered=answered,
        rounds_left=state.round < state.options.max_rounds,
        at_step=at_step,
    )
