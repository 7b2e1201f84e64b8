"""Nodes of a deployment: who is in the convention and what they can run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Message

__all__ = ["ListNodes", "MembershipChanged", "NodeInfo", "NodeList", "WatchMembership"]


class NodeInfo(Message):
    """A node (one Thespian admin), the capabilities it advertises, whether it is the
    leader (the node of the Runtime that started the convention) and how many TurnHosts it
    runs."""

    kind: Literal["node_info"] = "node_info"
    node: str
    capabilities: dict[str, Any] = Field(default_factory=dict)
    leader: bool = False
    hosts: int = 0


class MembershipChanged(Message):
    """A node joined the leader's convention, or left it (gracefully or by being missed)."""

    kind: Literal["membership_changed"] = "membership_changed"
    node: str
    joined: bool
    capabilities: dict[str, Any] = Field(default_factory=dict)
    at: float = 0.0


class WatchMembership(Message):
    """Ask the directory for every later ``MembershipChanged`` (and the current members)."""

    kind: Literal["watch_membership"] = "watch_membership"


class ListNodes(Message):
    """Ask the directory for the current members; answered with ``NodeList``."""

    kind: Literal["list_nodes"] = "list_nodes"
    request_id: str | None = None


class NodeList(Message):
    kind: Literal["node_list"] = "node_list"
    request_id: str | None = None
    nodes: list[NodeInfo] = Field(default_factory=list)
