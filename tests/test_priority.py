"""The priority table in ``actors.priority``'s docstring is what the code runs, for every
combination of the facts it decides on."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest

from actors import priority
from actors.turn.priority import Situation, next_action

FLAGS = [f.name for f in dataclasses.fields(Situation)]
ROW = re.compile(r"^\s+(\d+)\s{2,}(.+?)\s{2,}(\w+)\s{2,}(\w+)\s{2,}(.+)$")


def docstring_table() -> list[tuple[str, str, str]]:
    """(condition, action at a step, action otherwise) of each row, in order."""
    rows = [ROW.match(line) for line in (priority.__doc__ or "").splitlines()]
    return [(m.group(2), m.group(3), m.group(4)) for m in rows if m]


TABLE = docstring_table()


def test_the_table_has_its_fourteen_rows_and_names_only_real_facts() -> None:
    assert len(TABLE) == 14
    names = {w for condition, _, _ in TABLE for w in re.findall(r"[A-Za-z_]+", condition)} - {"and", "or", "not"}
    assert names <= set(FLAGS) | {"True"}


@pytest.mark.parametrize(
    "values",
    list(itertools.product([False, True], repeat=len(FLAGS))),
    ids=lambda v: "".join("1" if x else "0" for x in v),
)
def test_next_action_is_the_first_row_of_the_table_that_holds(values: tuple[bool, ...]) -> None:
    facts = dict(zip(FLAGS, values))
    expected = next(
        at_step if facts["at_step"] else otherwise
        for condition, at_step, otherwise in TABLE
        if eval(condition, {"True": True}, facts)
    )
    assert next_action(Situation(**facts)) == expected
