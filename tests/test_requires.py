"""Issue 32, item 5: a turn's ``requires`` holds on takeover. The rules (``placement``, the
heirs of ``store.ownership``) without any actor, and what both stores keep of them: each
turn's requirement, each host's capabilities, the migration from store schema 4."""

from __future__ import annotations

import pytest

from actors.placement import requirement, satisfies
from actors.store import open_store
from actors.store.base import STORE_SCHEMA, HostRecord, Owner
from actors.store.ownership import Heirs, heir, identity
from messages import ChatMessage, ProviderConfig, TurnState

from .stores import save, sql


def _turn(turn_id: str, requires: dict[str, object] | None = None) -> TurnState:
    provider = ProviderConfig(base_url="http://127.0.0.1:1/v1", model="m")
    return TurnState(
        turn_id=turn_id, root_turn_id=turn_id, provider=provider, messages=[ChatMessage.user("hi")],
        requires=dict(requires or {}),
    )  # fmt: skip


def _host(slot: str, incarnation: str, until: float = 10.0, **capabilities: object) -> HostRecord:
    return HostRecord(identity(slot, incarnation), slot.rpartition("/")[0], b"", until, dict(capabilities))


# -- the rules ---------------------------------------------------------------------------------


def test_a_requirement_is_one_canonical_text_and_a_host_satisfies_it_with_every_name_equal() -> None:
    assert (
        requirement({"zone": "eu", "gpu": True})
        == requirement({"gpu": True, "zone": "eu"})
        == '{"gpu":true,"zone":"eu"}'
    )
    assert requirement({}) == ""
    assert satisfies({"gpu": True, "zone": "eu", "extra": 1}, requirement({"gpu": True, "zone": "eu"}))
    assert not satisfies({"gpu": False, "zone": "eu"}, requirement({"gpu": True}))
    assert not satisfies({}, requirement({"gpu": True}))
    assert not satisfies({"gpu": 1.5}, requirement({"gpu": True}))
    assert satisfies({}, "")


def test_a_requirement_that_is_not_json_is_refused_saying_so() -> None:
    with pytest.raises(ValueError) as refused:
        requirement({"gpu": object()})
    assert str(refused.value).startswith(
        "requires must map names to JSON values (strings, numbers, booleans, null, lists): Object of type object"
    )
    with pytest.raises(ValueError, match="requires must map names to JSON values"):
        requirement({"ratio": float("nan")})


def test_an_orphan_goes_only_to_a_live_host_that_meets_its_requirement_or_to_none() -> None:
    plain, gpu = _host("n1:1/0", "a"), _host("n2:1/0", "b", gpu=True)
    heirs = Heirs([plain, gpu])
    needs = requirement({"gpu": True})
    assert {heirs.of(f"t{n}", needs) for n in range(100)} == {gpu.host_id}
    assert {heirs.of(f"t{n}") for n in range(100)} == {plain.host_id, gpu.host_id}  # no requirement: either
    assert Heirs([plain]).of("t1", needs) is None  # it waits for one
    assert heir("t1", [plain, gpu], needs) == gpu.host_id


def test_every_host_computes_the_same_heirs_whatever_the_order_it_reads_the_hosts_in() -> None:
    hosts = [_host(f"n{i}:1/0", f"i{i}") for i in range(7)]
    ids = [f"turn_{n}" for n in range(700)]
    forward, backward = Heirs(hosts), Heirs(list(reversed(hosts)))
    chosen = [forward.of(t) for t in ids]
    assert chosen == [backward.of(t) for t in ids]
    counts = sorted(chosen.count(h.host_id) for h in hosts)
    assert counts[0] >= 60 and counts[-1] <= 140, counts  # about 100 each


def test_of_two_incarnations_of_a_slot_the_one_renewed_last_is_the_heir() -> None:
    old, new = _host("n1:1/0", "old", until=10.0), _host("n1:1/0", "new", until=12.0)
    assert {Heirs([old, new]).of(f"t{n}") for n in range(20)} == {new.host_id}


# -- in the store ------------------------------------------------------------------------------


def test_the_store_keeps_a_turns_requirement_and_a_hosts_capabilities(store_location: str) -> None:
    store = open_store(store_location)
    try:
        me = identity("n2:1/0", "me")
        store.hosts.renew(me, "n2:1", b"", 60.0, requirement({"gpu": True}))
        save(store, _turn("t_gpu", {"gpu": True}))
        save(store, _turn("t_any"))
        assert store.owners.orphans() == [("t_gpu", '{"gpu":true}'), ("t_any", "")]
        route = store.owners.route("t_gpu")
        assert route is not None and route.requires == '{"gpu":true}'
        assert [(h.host_id, h.capabilities) for h in store.hosts.live()] == [(me, {"gpu": True})]
        assert store.log.load("t_gpu").requires == {"gpu": True}
        assert sorted(store.owners.claim_many(["t_gpu", "t_any", "t_unknown"], me)) == [("t_any", 1), ("t_gpu", 1)]
        assert store.owners.orphans() == []
    finally:
        store.close()


def test_claim_many_takes_only_the_turns_it_may_claim(store_location: str) -> None:
    store = open_store(store_location)
    try:
        other, me = identity("n1:1/0", "other"), identity("n2:1/0", "me")
        store.hosts.renew(other, "n1:1", b"", 60.0)
        store.hosts.renew(me, "n2:1", b"", 60.0)
        save(store, _turn("t_held"), owner=Owner(other, 1))  # its owner's lease is live
        save(store, _turn("t_free"))
        finished = _turn("t_done")
        finished.phase = "finished"
        save(store, finished)
        ids = [f"t_many{n}" for n in range(1203)]  # more than one statement's worth
        for turn_id in ids:
            save(store, _turn(turn_id))
        claimed = store.owners.claim_many(["t_held", "t_free", "t_done", *ids], me)
        assert sorted(claimed) == sorted([("t_free", 1)] + [(t, 1) for t in ids])
        route = store.owners.route("t_held")
        assert route is not None and (route.host_id, route.epoch) == (other, 1)
    finally:
        store.close()


def test_a_store_of_schema_4_gets_the_requirements_and_capabilities_when_opened(store_location: str) -> None:
    store = open_store(store_location)
    save(store, _turn("t_old"))
    store.close()
    drop = "ALTER TABLE {} DROP COLUMN {}"
    sql(store_location, drop.format("turns", "requires"))
    sql(store_location, drop.format("hosts", "capabilities"))
    sql(store_location, "UPDATE meta SET value = '4' WHERE key = 'schema'")
    store = open_store(store_location)
    try:
        store.hosts.renew(identity("n1:1/0", "a"), "n1:1", b"", 60.0)
        assert store.owners.orphans() == [("t_old", "")]  # required nothing: any host takes it
        assert [h.capabilities for h in store.hosts.live()] == [{}]
    finally:
        store.close()
    assert sql(store_location, "SELECT value FROM meta WHERE key = 'schema'") == [(str(STORE_SCHEMA),)] == [("8",)]
