"""The ownership protocol (``store.ownership``): the lease on an injected clock, the heir, reconcile;
and the claim and fence in the SQL of both stores."""

from __future__ import annotations

import pytest

from actors.errors import ConfigurationError, Fenced
from actors.store import open_store
from actors.store.base import HostRecord, Owner, Route
from actors.store.ownership import (
    DRAINED,
    FENCE_AFTER,
    LEASE,
    Drain,
    Heirs,
    Lease,
    heir,
    host_of,
    identity,
    reconcile,
)
from messages import ChatMessage, ProviderConfig, TurnState

from .stores import save


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_fences_once_at_its_fence_point_counted_from_the_renewals_start() -> None:
    clock = Clock()
    lease = Lease(clock)
    started = clock()
    clock.now += 0.8  # the database took 0.8 s to answer: the lease still runs from the request's start
    assert lease.confirmed(started, LEASE) is False
    assert (lease.fence_at, lease.expires_at) == (started + FENCE_AFTER, started + LEASE)
    clock.now = started + FENCE_AFTER - 0.001
    assert not lease.must_fence()
    clock.now = started + FENCE_AFTER
    assert (lease.must_fence(), lease.must_fence(), lease.fenced) == (True, False, True)


def test_a_renewal_after_a_fence_regains_the_lease_and_says_so() -> None:
    clock = Clock()
    lease = Lease(clock)
    lease.confirmed(clock(), LEASE)
    clock.now += 3.0
    assert lease.must_fence()
    renewed = clock()
    assert lease.confirmed(renewed, LEASE) is True  # the host reconciles its turns
    assert not lease.fenced and lease.fence_at == renewed + FENCE_AFTER
    assert lease.confirmed(renewed + 1, LEASE) is False


def test_a_lease_that_ran_out_unfenced_is_a_lapse_too() -> None:
    clock = Clock()
    lease = Lease(clock)
    first = clock()
    lease.confirmed(first, LEASE)
    clock.now = first + LEASE + 1  # no fence check ran (the host was busy), and the lease ran out
    assert lease.confirmed(clock(), LEASE) is True


def test_an_answer_that_comes_after_its_own_fence_point_counts_for_nothing() -> None:
    clock = Clock()
    lease = Lease(clock)
    first = clock()
    lease.confirmed(first, LEASE)
    late = clock()  # a renewal starts, and the database pauses
    clock.now = late + FENCE_AFTER + 0.5
    assert lease.must_fence()
    assert lease.confirmed(late, LEASE) is False  # too late to count: still fenced, the fence point unmoved
    assert lease.fenced and lease.fence_at == first + FENCE_AFTER


def test_an_older_renewal_answered_after_a_newer_one_moves_nothing() -> None:
    clock = Clock()
    lease = Lease(clock)
    older = clock()
    clock.now += 0.5
    newer = clock()
    lease.confirmed(newer, LEASE)
    lease.confirmed(older, LEASE)
    assert lease.fence_at == newer + FENCE_AFTER


def test_before_any_renewal_the_lease_counts_from_the_hosts_start() -> None:
    clock = Clock()
    born = clock()
    lease = Lease(clock)
    assert lease.fence_at == born + FENCE_AFTER
    clock.now = born + FENCE_AFTER
    assert lease.must_fence()


def test_a_shorter_lease_granted_by_the_database_moves_the_fence_earlier() -> None:
    clock = Clock()
    lease = Lease(clock)
    started = clock()
    lease.confirmed(started, 2.0)
    assert lease.fence_at == started + 2.0 and lease.expires_at == started + 2.0


def test_the_heir_is_chosen_by_node_and_slot_and_the_newest_incarnation_of_a_slot() -> None:
    a, b = identity("n1:1/0", "aaa"), identity("n2:1/0", "bbb")
    records = [HostRecord(a, "n1:1", b"", 10.0), HostRecord(b, "n2:1", b"", 10.0)]
    chosen = {t: heir(t, records) for t in (f"turn_{n}" for n in range(200))}
    assert set(chosen.values()) == {a, b}  # both take some
    again = identity("n1:1/0", "ccc")  # n1's host restarted: its new incarnation renewed last
    chosen_again = {t: heir(t, [*records, HostRecord(again, "n1:1", b"", 12.0)]) for t in chosen}
    assert {t: host_of(h or "") for t, h in chosen_again.items()} == {t: host_of(h or "") for t, h in chosen.items()}
    assert a not in chosen_again.values() and again in chosen_again.values()
    assert heir("turn_x", []) is None


def test_a_host_that_drains_is_never_an_heir_and_the_others_share_its_turns() -> None:
    a, b, c = identity("n1:1/0", "a"), identity("n2:1/0", "b"), identity("n3:1/0", "c")
    records = [HostRecord(a, "n1:1", b"", 10.0), HostRecord(b, "n2:1", b"", 10.0), HostRecord(c, "n3:1", b"", 10.0)]
    draining = [records[0], records[1], HostRecord(c, "n3:1", b"", 10.0, draining=True)]
    before = {t: heir(t, records) for t in (f"turn_{n}" for n in range(300))}
    after = {t: Heirs(draining).of(t) for t in before}
    assert set(before.values()) == {a, b, c} and set(after.values()) == {a, b}
    assert Heirs([HostRecord(c, "n3:1", b"", 10.0, {"gpu": True}, draining=True)]).of("t", '{"gpu":true}') is None


def test_a_draining_hosts_durable_turn_is_handed_on_only_at_a_safe_boundary_before_the_bound() -> None:
    clock = Clock()
    drain = Drain(30.0, clock)
    assert drain.step(True, "tools", 1) == drain.step(True, "streaming", 1) == "wait"  # it finishes here first
    assert drain.step(True, "tools", 0) == drain.step(True, "idle", 0) == "hand_off"  # between two steps
    assert drain.step(True, "awaiting_approval", 1) == "wait"  # another call of its batch still runs
    assert drain.step(True, "awaiting_approval", 0) == drain.step(True, "paused", 0) == "hand_off"
    assert drain.step(True, "finished", 0) == "wait"
    clock.now += 30.0  # the bound: a call still running is interrupted, and the turn handed on
    assert drain.overdue and drain.step(True, "tools", 1) == "hand_off"


def test_a_draining_hosts_turn_that_is_not_durable_finishes_or_ends_at_the_bound() -> None:
    clock = Clock()
    drain = Drain(5, clock)
    assert (drain.step(False, "tools", 1), drain.step(False, "awaiting_approval", 0)) == ("wait", "wait")
    clock.now += 4.999
    assert drain.step(False, "idle", 0) == "wait"
    clock.now += 0.001
    assert drain.step(False, "tools", 1) == drain.step(False, "paused", 0) == "end"
    assert DRAINED.startswith("this node drained")


@pytest.mark.parametrize("within", [-1, -0.5, float("nan"), "60", True, None])
def test_a_drains_bound_must_be_a_number_of_seconds_not_below_zero(within: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Drain(within)  # type: ignore[arg-type]
    assert str(caught.value) == f"a drain's bound must be a number of seconds >= 0, not {within!r}"


def test_reconcile_names_the_turns_lost_to_another_owner_and_those_to_claim_back() -> None:
    me = identity("n1:1/0", "aaa")
    running = {"t1": Owner(me, 3), "t2": Owner(me, 1), "t3": Owner(me, 2)}
    routes = {
        "t1": Route("t1", me, 3, "running"),  # still ours
        "t2": Route("t2", identity("n2:1/0", "bbb"), 2, "running"),  # taken over
        "t3": Route("t3", me, 4, "running"),  # ours at a later epoch: claimed again meanwhile
    }
    r = reconcile(running, routes, ["t1", "t2", "t4"])
    assert (r.lost, r.again) == (["t2", "t3"], ["t4"])


def test_identity_keeps_the_hosts_node_and_slot() -> None:
    assert host_of(identity("10.0.0.2:1900/1", "abc")) == "10.0.0.2:1900/1"
    assert host_of("10.0.0.2:1900/1") == "10.0.0.2:1900/1"  # an owner from before incarnations


# -- claims and the fence in SQL, on both stores ---------------------------------------------------


def _turn(turn_id: str) -> TurnState:
    provider = ProviderConfig(base_url="http://127.0.0.1:1/v1", model="m")
    return TurnState(turn_id=turn_id, root_turn_id=turn_id, provider=provider, messages=[ChatMessage.user("hi")])


def test_a_claim_never_takes_a_turn_whose_owners_lease_is_live_whatever_its_address(store_location: str) -> None:
    store = open_store(store_location)
    try:
        old, new = identity("127.0.0.1:1900/0", "old"), identity("127.0.0.1:1900/0", "new")  # the same address
        store.hosts.renew(old, "127.0.0.1:1900", b"", 60.0)
        store.hosts.renew(new, "127.0.0.1:1900", b"", 60.0)
        save(store, _turn("t"), owner=Owner(old, 1))
        assert store.owners.claim("t", new) is None  # its owner's lease holds: not an orphan
        assert store.owners.claim("t", old) == 2  # its owner may claim it again
        store.hosts.drop(old)
        assert store.owners.claim("t", new) == 3  # gone: the other takes it
        route = store.owners.route("t")
        assert route is not None and (route.host_id, route.epoch) == (new, 3) and route.claimed_at is not None
        with pytest.raises(Fenced):
            save(store, _turn("t"), owner=Owner(old, 2))
    finally:
        store.close()


def test_a_claim_whose_load_failed_is_given_back_at_the_same_epoch(store_location: str) -> None:
    store = open_store(store_location)
    try:
        me = identity("127.0.0.1:1900/0", "me")
        save(store, _turn("t"))
        epoch = store.owners.claim("t", me)
        assert epoch == 1
        store.owners.release(Owner(me, epoch), "t")
        route = store.owners.route("t")
        assert route is not None and (route.host_id, route.epoch) == (None, 1)
        assert store.owners.orphans() == [("t", "")]
    finally:
        store.close()


def test_a_renewal_says_whether_the_host_drains_and_the_live_hosts_show_it(store_location: str) -> None:
    store = open_store(store_location)
    try:
        a, b = identity("n1:1/0", "a"), identity("n2:1/0", "b")
        store.hosts.renew(a, "n1:1", b"", 60.0, '{"gpu":true}', draining=True)
        store.hosts.renew(b, "n2:1", b"", 60.0)
        assert sorted((h.host_id, h.draining, h.capabilities) for h in store.hosts.live()) == [
            (a, True, {"gpu": True}),
            (b, False, {}),
        ]
        store.hosts.renew(a, "n1:1", b"", 60.0, '{"gpu":true}')  # a drain is said with every renewal
        assert {h.host_id: h.draining for h in store.hosts.live()} == {a: False, b: False}
    finally:
        store.close()


def test_a_slot_owns_the_turns_of_every_incarnation_of_it(store_location: str) -> None:
    store = open_store(store_location)
    try:
        save(store, _turn("t1"), owner=Owner(identity("n:1/0", "a"), 1))
        save(store, _turn("t2"), owner=Owner(identity("n:1/0", "b"), 1))
        save(store, _turn("t3"), owner=Owner(identity("n:1/01", "c"), 1))  # another slot, whose id starts alike
        assert sorted(store.owners.owned_by("n:1/0")) == ["t1", "t2"]
        assert store.owners.owned_by(identity("n:1/0", "a")) == ["t1"]
    finally:
        store.close()
