"""The priority table in ``actors.turn.priority``'s docstring is what the code runs, for every
combination of the facts it decides on that a turn can be in.

The facts are 18 flags, so 262,144 combinations; most cannot happen (5,776 remain). Rather than list
those, ``IMPOSSIBLE`` names the few constraints that rule them out, each with the reason it holds;
one test checks every combination that satisfies them all.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterator

from actors.turn import priority
from actors.turn.priority import Action, Situation, next_action

FLAGS = [f.name for f in dataclasses.fields(Situation)]
ROW = re.compile(r"^\s+(\d+)\s{2,}(.+?)\s{2,}(\w+)\s{2,}(\w+)\s{2,}(.+)$")

Row = tuple[str, str, str]  # (condition, action at a step, action otherwise)
Facts = dict[str, bool]


def docstring_table(doc: str) -> list[Row]:
    """(condition, action at a step, action otherwise) of each row of the table in ``doc``, in order."""
    rows = [ROW.match(line) for line in doc.splitlines()]
    return [(m.group(2), m.group(3), m.group(4)) for m in rows if m]


TABLE = docstring_table(priority.__doc__ or "")


def _batch_open(f: Facts) -> bool:
    return (
        f["running"] or f["stopping"] or f["batch_done"] or f["undecided"] or f["decided"] or f["awaiting"]
        or f["commit_due"]
    )  # fmt: skip


# Each holds for every Situation the rules ever ask about (``situation()`` of their state).
IMPOSSIBLE: dict[str, Callable[[Facts], bool]] = {
    # ``finished`` and ``streaming`` are two values of the one ``state.phase``
    "finished and streaming": lambda f: f["finished"] and f["streaming"],
    # the end closes every open call and clears the batch (``_end`` -> ``_append_tool_messages``)
    "finished with a batch open": lambda f: f["finished"] and _batch_open(f),
    # a stream starts only once no call is open (rows 6-11 come first), and a batch opens only
    # when the stream has completed
    "streaming with a batch open": lambda f: f["streaming"] and _batch_open(f),
    # ``batch_done`` means every call of the batch has ended
    "batch_done with a call not done": lambda f: (
        f["batch_done"] and (f["running"] or f["stopping"] or f["undecided"] or f["decided"])
    ),
    # a wait for approvals is for a batch with calls in it, and it ends with the batch
    "awaiting without a call": lambda f: (
        f["awaiting"] and not (f["running"] or f["stopping"] or f["batch_done"] or f["undecided"] or f["decided"])
    ),
    # the three come from three inputs: a TakeStep, the commit timer (or the approval timeout),
    # a completed response; the rules handle one input at a time
    "two inputs at once": lambda f: f["at_step"] + f["commit_due"] + f["answered"] > 1,
    # ``answered`` is the response just completed without tool calls: the stream has ended and
    # no batch was opened
    "answered while streaming, finished or with a batch": lambda f: (
        f["answered"] and (f["streaming"] or f["finished"] or _batch_open(f))
    ),
    # the end drops input that never entered and a pause never resumed (``TurnRules.end``)
    "finished with input or a pause": lambda f: f["finished"] and (f["input"] or f["pause"] or f["held"] or f["abort"]),
    # ``abort`` is what queued input or a pause sent "now" asks for: it comes with one of them
    "abort without input or a pause": lambda f: f["abort"] and not (f["input"] or f["pause"]),
    # ``pause`` is a pause asked for and not in effect; ``held`` is one in effect
    "a pause both asked for and in effect": lambda f: f["pause"] and f["held"],
    # a pause takes effect only where the turn would call the model next (row 17): nothing
    # streams, no batch is open, and it stays so until it is resumed (or ended)
    "held with a stream, a batch or an answer": lambda f: f["held"] and (f["streaming"] or _batch_open(f) or f["answered"]),
}


def possible() -> Iterator[Facts]:
    """Every combination of the flags that no constraint of ``IMPOSSIBLE`` rules out."""
    for values in itertools.product([False, True], repeat=len(FLAGS)):
        facts = dict(zip(FLAGS, values))
        if not any(rule(facts) for rule in IMPOSSIBLE.values()):
            yield facts


POSSIBLE = list(possible())
COUNT = 5776  # of 262,144: the situations a turn can be in


def _compiled(table: list[Row]) -> list[tuple[object, str, str]]:
    return [(compile(c, "<table>", "eval"), at_step, otherwise) for c, at_step, otherwise in table]


def expected(table: list[Row], facts: Facts) -> str:
    """The action of the first row of ``table`` whose condition holds."""
    return _first(_compiled(table), facts)


def _first(rows: list[tuple[object, str, str]], facts: Facts) -> str:
    return next(
        at_step if facts["at_step"] else otherwise
        for condition, at_step, otherwise in rows
        if eval(condition, {"True": True}, facts)  # type: ignore[arg-type]  # noqa: S307 - the docstring's own conditions
    )


def mismatches(table: list[Row], decide: Callable[[Situation], Action]) -> list[tuple[str, str, str]]:
    """(the flags that hold, the table's action, the code's action) wherever the two differ."""
    rows = _compiled(table)
    out: list[tuple[str, str, str]] = []
    for facts in POSSIBLE:
        want, got = _first(rows, facts), decide(Situation(**facts))
        if want != got:
            out.append((" ".join(k for k, v in facts.items() if v), want, got))
    return out


def test_the_table_has_its_nineteen_rows_and_names_only_real_facts() -> None:
    assert len(TABLE) == 19
    names = {w for condition, _, _ in TABLE for w in re.findall(r"[A-Za-z_]+", condition)} - {"and", "or", "not"}
    assert names <= set(FLAGS) | {"True"}


def test_next_action_is_the_first_row_of_the_table_that_holds_in_every_possible_situation() -> None:
    assert mismatches(TABLE, next_action) == []


def test_every_row_decides_some_possible_situation() -> None:
    """No row is dead, and the constraints rule out no row's every case."""
    rows = [compile(c, "<table>", "eval") for c, _, _ in TABLE]
    first = {next(i for i, c in enumerate(rows) if eval(c, {"True": True}, f)) for f in POSSIBLE}  # noqa: S307
    assert sorted(first) == list(range(len(TABLE)))


def test_the_constraints_leave_the_situations_a_turn_can_be_in() -> None:
    """Each constraint rules something out, and together they leave this many of 2**18."""
    assert len(POSSIBLE) == COUNT
    for name, rule in IMPOSSIBLE.items():
        others = [r for n, r in IMPOSSIBLE.items() if n != name]
        assert any(rule(f) and not any(o(f) for o in others) for f in _all()), name


def _all() -> Iterator[Facts]:
    for values in itertools.product([False, True], repeat=len(FLAGS)):
        yield dict(zip(FLAGS, values))


def test_the_check_fails_when_a_row_of_the_table_or_the_code_changes() -> None:
    streaming_first = [TABLE[8]] + TABLE[:8] + TABLE[9:]  # row 9 moved above stop, cancel and "now"
    wrong = mismatches(streaming_first, next_action)
    assert wrong and all("streaming" in f.split() and {"stop", "cancel", "abort"} & set(f.split()) for f, _, _ in wrong)
    assert any("abort" in f.split() and not {"stop", "cancel"} & set(f.split()) for f, _, _ in wrong)

    input_ignored = [r if r[0] != "answered and not input" else ("answered", "answer", "answer") for r in TABLE]
    wrong = mismatches(input_ignored, next_action)  # the table ends an answered turn that has input waiting
    assert wrong and {(want, got) for _, want, got in wrong} == {("answer", "step")}

    def ends_at_once(s: Situation) -> Action:  # the code ends a stopped turn before its calls have
        return "stop" if s.stop and not (s.finished or s.streaming or s.running) else next_action(s)

    wrong = mismatches(TABLE, ends_at_once)
    assert wrong and {(want, got) for _, want, got in wrong} == {("wait", "stop")}
    assert all("stopping" in f.split() for f, _, _ in wrong)

    def resumes_late(s: Situation) -> Action:  # the code asks ``running`` before ``commit_due``
        return "wait" if s.running and not (s.finished or s.stop or s.cancel) else next_action(s)

    wrong = mismatches(TABLE, resumes_late)
    assert wrong and {(want, got) for _, want, got in wrong} == {("resume", "wait")}


def test_new_input_and_a_pause_stand_where_the_table_says() -> None:
    """Stop and cancel come first; "now" aborts a stream; input keeps an answered turn going;
    pending approvals hold input and a pause; a paused turn waits, whatever is queued."""
    assert next_action(Situation(streaming=True, abort=True, input=True, stop=True)) == "halt"
    assert next_action(Situation(streaming=True, abort=True, input=True, cancel=True)) == "wait"
    assert next_action(Situation(streaming=True, abort=True, pause=True)) == "interrupt"
    assert next_action(Situation(streaming=True, input=True)) == "wait"
    assert next_action(Situation(answered=True, input=True)) == "step"
    assert next_action(Situation(input=True, at_step=True)) == "stream"
    assert next_action(Situation(undecided=True, awaiting=True, input=True, pause=True)) == "wait"
    assert next_action(Situation(held=True, input=True, at_step=True)) == "wait"
    assert next_action(Situation(held=True, cancel=True)) == "step"
    assert next_action(Situation(held=True, stop=True)) == "stop"
    assert next_action(Situation(pause=True, answered=True)) == "answer"
    assert next_action(Situation(pause=True, at_step=True, rounds_left=False)) == "hold"
