"""The shape of the code base: the folders' import rules, no import cycle, no module that has
outgrown one reading."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("actors", "messages")
MAX_LINES = 400  # a module a maintainer can hold in one reading
LONGER: dict[str, int] = {}  # a module allowed more lines, and why (none: the turn's rules were cut by concern)

SHARED = {"errors", "logs", "handoff", "mailbox", "debug_trace", "legacy", "placement"}  # modules at the top of actors/
MAY_IMPORT: dict[str, set[str]] = {  # folder of actors/ -> the other folders it may import
    "turn": set(),
    "store": set(),
    "providers": set(),
    "wire": {"telemetry"},
    "telemetry": {"turn"},
    "tools": {"turn", "wire", "telemetry", "lifecycle", "providers"},
    "mcp": {"tools", "turn", "lifecycle", "telemetry"},
    "lifecycle": {"wire", "store", "providers"},
    "host": {"turn", "tools", "providers", "mcp", "store", "telemetry", "wire", "lifecycle"},
    "cluster": {"host", "tools", "store", "wire", "lifecycle", "telemetry", "turn"},
}
PURE = {"turn"}  # may not import even the shared modules: no I/O, no logging, no clock but the one given
CLIENT_IMPORTERS = {"actors", "testing", "console"}  # the public surface (actors/__init__), the test kit, the console


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports, wherever the import is (module level, functions,
    ``if TYPE_CHECKING``): a dependency is a dependency."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods}
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(base)
    return {m for m in found if m in mods and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _folder(module: str) -> str:
    """``turn`` for ``actors.turn.rules``; the module itself for ``actors.errors`` or ``messages.x``."""
    parts = module.split(".")
    if parts[0] == "actors" and len(parts) > 1 and (ROOT / "actors" / parts[1]).is_dir():
        return parts[1]
    return module


def _breaches(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, imported in sorted(graph.items()):
        here = _folder(module)
        for target in sorted(imported):
            there = _folder(target)
            if there == here or not target.startswith("actors"):
                continue
            if there == "client" and here not in CLIENT_IMPORTERS:
                out.append(f"{module} imports {target}: nothing imports client/ but the public surface")
            elif here in PURE:
                out.append(f"{module} imports {target}: {here}/ is pure")
            elif here in MAY_IMPORT and there not in MAY_IMPORT[here] and there.removeprefix("actors.") not in SHARED:
                out.append(f"{module} imports {target}: {here}/ may not import {there}")
    return out


def test_each_folder_imports_only_what_its_init_allows() -> None:
    assert _breaches(_graph()) == []


def test_the_folder_rules_see_a_breach() -> None:
    graph = {
        "actors.turn.rules": {"actors.logs"},
        "actors.tools.worker": {"actors.host.turn_host"},
        "actors.store.sqlite": {"actors.client.runtime"},
    }
    assert _breaches(graph) == [
        "actors.store.sqlite imports actors.client.runtime: nothing imports client/ but the public surface",
        "actors.tools.worker imports actors.host.turn_host: tools/ may not import host",
        "actors.turn.rules imports actors.logs: turn/ is pure",
    ]


def test_no_module_imports_itself_back_through_others() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_has_outgrown_one_reading() -> None:
    long = {
        rel: n
        for p in _modules().values()
        if (n := len(p.read_text().splitlines())) > LONGER.get(rel := str(p.relative_to(ROOT)), MAX_LINES)
    }
    assert long == {}
