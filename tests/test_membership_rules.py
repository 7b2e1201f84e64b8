"""The leader's table of nodes as plain code (``cluster.membership``): a node is announced
once, when the first of the convention and its directory's registration has it; a leave is announced at once;
a registration that comes after its node left (sent before: a drain's, say) brings nothing
back, and the same node joining again is taken at its next registration. No actor system."""

from __future__ import annotations

from typing import Any

from actors.cluster.membership import Membership
from actors.wire.protocol import NodeRecord
from messages import MembershipChanged

NODE = "10.0.0.2:1900"
CAPS = {"sandbox": True}


def table() -> tuple[Membership, list[tuple[str, bool]]]:
    """The leader's membership with one watcher, and the (node, joined) it was told."""
    told: list[tuple[str, bool]] = []

    def send(to: Any, message: Any) -> None:
        assert isinstance(message, MembershipChanged)
        told.append((message.node, message.joined))

    m = Membership(send)
    m.register(NodeRecord(node="10.0.0.1:1900", capabilities={}, pool="pool-1"), local=True)
    m.watch("the runtime")
    return m, told


def record(draining: bool = False, hosts: tuple[str, ...] = ("host-a",)) -> NodeRecord:
    return NodeRecord(node=NODE, capabilities=CAPS, pool="pool-2", hosts=hosts, draining=draining)


def joined(m: Membership, told: list[tuple[str, bool]]) -> None:
    m.convention_update(NODE, CAPS, True)
    assert m.accepts(record())
    assert m.register(record())
    assert told == [(NODE, True)]
    assert [h for h, _ in m.hosts(None)] == [f"{NODE}/0"]


def test_a_node_is_announced_once_whichever_comes_first_the_convention_or_its_registration() -> None:
    m, told = table()
    joined(m, told)
    m2, told2 = table()
    assert m2.accepts(record()) and m2.register(record())  # the registration first: it names the capabilities
    m2.convention_update(NODE, CAPS, True)
    assert told2 == [(NODE, True)]


def test_a_registration_that_comes_after_its_node_left_brings_nothing_back() -> None:
    m, told = table()
    joined(m, told)
    late = record(draining=True)  # the drain's registration, overtaken by the leave
    assert m.convention_update(NODE, CAPS, False)
    assert told == [(NODE, True), (NODE, False)]
    assert not m.accepts(late)
    assert [r.node for r in m.records()] == ["10.0.0.1:1900"]
    assert m.hosts(None) == []
    assert told == [(NODE, True), (NODE, False)]  # nothing announced after the leave


def test_a_node_that_joins_again_is_taken_at_its_next_registration() -> None:
    m, told = table()
    joined(m, told)
    m.convention_update(NODE, CAPS, False)
    assert not m.accepts(record())
    m.convention_update(NODE, CAPS, True)
    again = record(hosts=("host-b",))
    assert m.accepts(again)
    assert m.register(again)
    assert told == [(NODE, True), (NODE, False), (NODE, True)]
    assert m.hosts(None) == [(f"{NODE}/0", "host-b")]
