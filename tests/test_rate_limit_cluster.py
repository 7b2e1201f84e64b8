"""Issue 32's rate limit across machines: two member nodes in network namespaces
(``tests.cluster_harness``), one PostgreSQL store, the leader running no turn of its own. The
limit is measured at the provider, which every node reaches on the bridge.

The tolerance: a window of the limit's length less 50 ms (the time from a grant in the store
to the request's arrival at the provider varies by a few milliseconds) never holds more
requests than the limit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.placement import rendezvous
from actors.testing import Reply, Request, fail, say
from actors.testing.netns import available
from actors.testing.postgres import binaries

from .cluster_harness import Cluster, leftovers
from .test_cluster_turns import live_nodes, polled, start_member
from .test_rate_limit import most_in_any_window

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(available() is not None, reason=str(available())),
    pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (initdb, pg_ctl)"),
]

REQUESTS, WINDOW = 6, 2.0  # 6 in any 2 s: the rules of 60 a minute, in seconds


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(3, tmp_path) as c:
        c.start_leader("--rate-limit", f"{REQUESTS}/{WINDOW}", hosts=0)
        for i in (1, 2):
            start_member(c, i)
        assert polled(lambda: live_nodes(c) == {1, 2}, timeout=60), live_nodes(c)
        yield c
    assert leftovers(c) == []


def test_two_nodes_on_one_store_never_send_more_than_the_limit_in_any_window(cluster: Cluster) -> None:
    c = cluster
    c.scripts.add("hello", say("hi"))
    done = c.ask(op="run_many", prefix="r", count=30, prompt="hello", timeout=120)
    assert set(done["finish"].values()) == {"stop"}
    assert {c.node_of(h) for h in done["hosts"].values()} == {1, 2}  # both nodes asked the provider
    assert any("rate_limited" in kinds for kinds in done["kinds"].values())
    assert c.provider is not None
    times = [r.received_at for r in c.provider.requests]
    assert len(times) == 30
    assert most_in_any_window(times, WINDOW - 0.050) <= REQUESTS
    assert max(times) - min(times) >= 4 * WINDOW - 0.1  # 30 at 6 a window: four windows after the first


def test_a_retry_after_seen_by_one_node_holds_the_other_node_back(cluster: Cluster) -> None:
    c = cluster
    answered: list[int] = []

    def once_429(request: Request) -> Reply:
        answered.append(1)
        return fail(429, "slow down", retry_after=2.0) if len(answered) == 1 else say("ok")

    c.scripts.add("slow", once_429)
    c.scripts.add("other", say("ok"))
    hosts = c.ask(op="placeable")["hosts"]
    a, b = (f"{c.nodes[i].name}/0" for i in (1, 2))
    assert sorted(hosts) == sorted([a, b])
    c.ask(op="run", turn_id=_on(a, hosts), prompt="slow")
    first = c.ask(op="wait_event", turn_id=_on(a, hosts), kind="turn_retrying", timeout=60)
    assert first["event"][1] == "turn_retrying"
    c.ask(op="run", turn_id=_on(b, hosts), prompt="other")
    waited = c.ask(op="wait_event", turn_id=_on(b, hosts), kind="rate_limited", timeout=60)
    assert waited["event"][1:] == ["rate_limited", "retry_after"]
    for tid in (_on(a, hosts), _on(b, hosts)):
        assert c.ask(op="result", turn_id=tid, timeout=60)["finish_reason"] == "stop"
    assert c.provider is not None
    times = [r.received_at for r in c.provider.requests]
    assert len(times) == 3 and min(times[1:]) >= times[0] + 1.9  # no node asked before Retry-After's end


def _on(host: str, hosts: list[str]) -> str:
    """The first turn id ``rate-N`` that placement puts on ``host`` (the same each time)."""
    n = 0
    while rendezvous(tid := f"rate-{n}", hosts) != host:
        n += 1
    return tid
