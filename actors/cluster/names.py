"""Where things are: the directory's global name, and which host runs which turn.

A turn's host is a pure function of its id and the number of hosts (``slot_of``), so the
Runtime, the directory and the command line all reach it without a lookup, and a host that
is replaced keeps its slot.
"""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["DIRECTORY_NAME", "LEADER_CAPABILITY", "json_capabilities", "node_name", "slot_of"]

DIRECTORY_NAME = "greenroom.directory"
LEADER_CAPABILITY = "greenroom.leader"

_THESPIAN_KEYS = ("Thespian", "Python Version", "Admin Port", "Convention Address.IPv4", "greenroom.")


def slot_of(turn_id: str, hosts: int) -> int:
    """The slot (host index) of ``turn_id`` among ``hosts`` hosts; stable across processes."""
    return zlib.crc32(turn_id.encode("utf-8", "surrogatepass")) % max(1, hosts)


def node_name(admin_address: Any) -> str:
    """``host:port`` of a node's admin address."""
    details = getattr(admin_address, "addressDetails", None)
    sockname = getattr(details, "sockname", None)
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return f"{sockname[0]}:{sockname[1]}"
    return str(admin_address)


def json_capabilities(capabilities: dict[str, Any]) -> dict[str, Any]:
    """The capabilities a person set: plain JSON data, without Thespian's or greenroom's own."""
    out: dict[str, Any] = {}
    for k, v in (capabilities or {}).items():
        if k.startswith(_THESPIAN_KEYS):
            continue
        if isinstance(v, tuple):
            v = list(v)
        if isinstance(v, (str, int, float, bool, type(None), list)):
            out[k] = v
    return out
