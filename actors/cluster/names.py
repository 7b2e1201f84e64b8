"""Names: the directory's global name, the leader's capability, a node's name and capabilities.

(Which host runs which turn is ``placement``: rendezvous hashing over the hosts.)
"""

from __future__ import annotations

from typing import Any

__all__ = ["DIRECTORY_NAME", "LEADER_CAPABILITY", "json_capabilities", "node_name"]

DIRECTORY_NAME = "greenroom.directory"
LEADER_CAPABILITY = "greenroom.leader"

_THESPIAN_KEYS = ("Thespian", "Python Version", "Admin Port", "Convention Address.IPv4", "greenroom.")


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
