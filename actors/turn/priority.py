"""What a turn does next: the priority stop > cancel > new input or pause "now" >
approval-resume > pause > max-rounds > the next LLM call, in one pure function of the
turn's situation.

``next_action`` is called everywhere the loop can move (after an input that can move it:
a start, a model's answer, a call's end, a decision that completes a batch, a stop or
cancel, new input, a pause or a resume, a timer; not after a delta, a progress report or a
decision that leaves a batch open) and the rules carry out what it returns, then ask
again, until it says ``wait`` or ``step``. The first row whose condition holds decides (the
conditions are the fields of ``Situation``; a test reads this table and checks it against
the code for every combination of them):

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
     8    abort and streaming                            interrupt   interrupt   input or a pause "now": abort at once
     9    streaming                                      wait        wait        the response comes first
    10    commit_due                                     resume      resume      approvals commit after the window
    11    running or stopping                            wait        wait        the batch is not done
    12    batch_done                                     collect     collect     tool messages, then round += 1
    13    undecided and not awaiting                     await       await       Finish(awaiting_approval), once
    14    undecided or decided                           wait        wait        for decisions, for the window
    15    held                                           wait        wait        paused, until resumed
    16    answered and not input                         answer      answer      Finish(stop) or Finish(length)
    17    pause                                          hold        step        Finish(paused), at a step
    18    not rounds_left                                max_rounds  step        max rounds, at a step
    19    True                                           stream      step        the next LLM call (input first), at a step
    ====  =============================================  ==========  ==========  ======================================

``step`` means: send the turn a ``TakeStep`` at the tail of its mailbox, so that whatever
is already queued (a stop, a cancel) is handled first; the loop goes on in that step. An
approval commits in a timer after ``approval_window`` (row 10), so a cancel sent right
behind an approval is handled before it (row 7 wins over row 10).

A stop acts in two parts. ``halt`` (row 2) aborts the stream and interrupts every running
call at once; each such call is then ``stopping`` until its tool process reports its end
(or a backstop timer closes it), and the turn ends (row 4) only once none is: so
``Finish(stopped)`` (``Finish(cancelled)`` after a cancel, ``Finish(budget_exceeded)``
when the budget was spent: a stop of cause ``budget``) means every call of the turn has
ended and its ``on_stop`` callbacks have run (returned, or passed their deadline). A call
stopped alone (``StopTool``, its time limit, its idle bound, ``SendInput(stop_calls=True)``)
is ``stopping`` too, and its batch waits for it like for a running one (row 11).

New input waits for the next model call (row 19 appends it first); with ``when="now"`` (or
a pause ``now``: ``abort``) the stream in flight is aborted at once (row 8), its text kept,
and the turn goes on to its next step. Input keeps a turn that answered going (row 16),
but waits, like everything, for pending approvals (rows 13 and 14) and for a pause to be
resumed (row 15). A pause holds the turn where it would call the model next (row 17, at a
step, so that a stop or cancel already queued comes first), once its batch is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from messages import TurnState

__all__ = ["Action", "Situation", "next_action", "situation"]

Action = Literal[
    "wait", "halt", "stop", "cancel", "interrupt", "resume", "collect", "await", "hold", "answer", "max_rounds",
    "stream", "step",
]  # fmt: skip


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
    awaiting: bool = False  # Finish(awaiting_approval) was emitted for this batch
    decided: bool = False  # decisions wait for their window
    answered: bool = False  # the model's response had no tool calls
    rounds_left: bool = True
    at_step: bool = False
    input: bool = False  # input waits for the next model call
    abort: bool = False  # input or a pause asked for the stream in flight to end now
    pause: bool = False  # a pause is asked for and not in effect yet
    held: bool = False  # the turn is paused (Finish(paused) was emitted), until resumed


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
        return "interrupt" if s.abort else "wait"
    if s.commit_due:
        return "resume"
    if s.running or s.stopping:
        return "wait"
    if s.batch_done:
        return "collect"
    if s.undecided and not s.awaiting:
        return "await"
    if s.undecided or s.decided or s.held:
        return "wait"
    if s.answered and not s.input:
        return "answer"
    if s.pause:
        return "hold" if s.at_step else "step"
    if not s.rounds_left:
        return "max_rounds" if s.at_step else "step"
    return "stream" if s.at_step else "step"


def situation(state: TurnState, *, at_step: bool, commit_due: bool, answered: bool) -> Situation:
    """The facts of ``state``; the three flags are what the current input brought."""
    batch = state.batch or []
    statuses = {c.status for c in batch}
    held = state.phase == "paused"
    pause = state.hold is not None and not held
    now = (pause and state.hold is not None and state.hold.when == "now") or any(i.when == "now" for i in state.inputs)
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
        awaiting=state.paused,
        decided="decided" in statuses,
        answered=answered,
        rounds_left=state.round < state.options.max_rounds,
        at_step=at_step,
        input=bool(state.inputs),
        abort=now,
        pause=pause,
        held=held,
    )
