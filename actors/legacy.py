"""Module paths of greenroom 0.1.0, still importable: they name the module that replaced each.

Names outlive a layout: a durable turn's snapshot names its tools' modules, a node of the
previous release names actor classes by module when it asks another node to create one,
and users' code imports from modules. Every module that moved in the 0.2 folder layout is
listed here; importing its old path gives the new module itself (the same object, so
classes and functions are identical under both names). The four old modules that became
packages (``actors.tools``, ``actors.store``, ``actors.mcp``, ``actors.telemetry``)
re-export their old names instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

MOVED: dict[str, str] = {
    "actors.answers": "actors.turn.rules",
    "actors.approvals": "actors.turn.approvals",
    "actors.async_runtime": "actors.client.async_runtime",
    "actors.calls": "actors.turn.calls",
    "actors.commands": "actors.tools.commands",
    "actors.decisions": "actors.turn.decisions",
    "actors.directory_actor": "actors.cluster.directory",
    "actors.endpoint": "actors.client.endpoint",
    "actors.frames": "actors.wire.frames",
    "actors.handle": "actors.client.handle",
    "actors.held": "actors.host.held",
    "actors.history": "actors.turn.history",
    "actors.hosts": "actors.client.routing",
    "actors.inbound": "actors.client.receiving",
    "actors.inbox": "actors.handoff",
    "actors.internal": "actors.wire.protocol",
    "actors.kernel": "actors.mailbox",
    "actors.lifeline": "actors.lifecycle.lifeline",
    "actors.llm_actor": "actors.host.llm_actor",
    "actors.mcp_client": "actors.mcp.client",
    "actors.mcp_session": "actors.mcp.session",
    "actors.membership": "actors.cluster.membership",
    "actors.names": "actors.cluster.names",
    "actors.node": "actors.cluster.node",
    "actors.outbox": "actors.host.outbox",
    "actors.owner": "actors.lifecycle.owner",
    "actors.priority": "actors.turn.priority",
    "actors.processes": "actors.lifecycle.processes",
    "actors.runtime": "actors.client.runtime",
    "actors.stopping": "actors.turn.rules",
    "actors.store_files": "actors.store.files",
    "actors.stream": "actors.client.stream",
    "actors.subagents": "actors.tools.subagents",
    "actors.telemetry_export": "actors.telemetry.export",
    "actors.text": "actors.turn.sanitize",
    "actors.thespian_compat": "actors.wire.thespian_compat",
    "actors.tool_actor": "actors.tools.tool_actor",
    "actors.tool_context": "actors.tools.context",
    "actors.tool_pool": "actors.tools.pool",
    "actors.tool_runner": "actors.host.tool_runner",
    "actors.tool_worker": "actors.tools.worker",
    "actors.trace": "actors.debug_trace",
    "actors.transport": "actors.wire.transport",
    "actors.tree": "actors.lifecycle.tree",
    "actors.turn_actor": "actors.host.turn_actor",
    "actors.turn_host": "actors.host.turn_host",
    "actors.turn_input": "actors.client.inputs",
    "actors.turn_rules": "actors.turn.rules",
    "actors.turn_trace": "actors.telemetry.turn_spans",
    "actors.wire_format": "actors.providers.formats",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # the target module is already executed


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Make the old paths importable in this process (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
