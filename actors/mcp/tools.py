"""Tools from MCP servers: ``mcp_tools(...)`` offers the tools of an MCP server to a turn.

``mcp_tools(command=[...])`` (a stdio server) or ``mcp_tools(url="http://...")`` (Streamable
HTTP) connects once, in the caller's process, to read the server's ``tools/list``: each tool
becomes a greenroom ``Tool`` with the server's name, description and input schema, usable
with ``run(tools=...)`` beside any other. Needs the ``mcp`` package (``greenroom[mcp]``),
imported only here, when this is called.

- **Where calls run**: inline, as tasks on the event loop thread of the TurnHost that runs
  the turn, through that process's one session with the server (``mcp_session``): started
  by the first call, shared by every call of every turn of the host, kept across turns,
  replaced when the server dies. Calls in flight then fail with ``{"ok": false, "error":
  "MCP server 'x' exited during the call (...)"}``; the next call starts it again. A call
  an HTTP server refused because it no longer knows the session is sent again on a new one.
- **Results**: the structured content if the server sent one, else the content (one text
  block as its text) becomes ``{"ok": true, "data": ...}``; an ``isError`` result becomes
  ``{"ok": false, "error": <its text>}``. Progress notifications become ``ToolProgress``
  events (``{"progress", "total", "message"}``). Arguments are checked by the server.
- **Stop** cancels the call's task at once: the ``mcp`` client sends
  ``notifications/cancelled`` for the request, and the call ends ``interrupted``. **Cancel**
  is cooperative: a call not yet sent is not sent; one in flight runs to its end (after
  ``grace`` the cancel becomes a stop).
- **Approval** (``requires_approval=``): ``True`` for every tool, a set of the server's tool
  names, or a module-level predicate on a call's arguments, as for ``@tool``;
  ``actors.requires_approval(t, when)`` gates one tool of the list.
- **Secrets** never travel: a tool's ``ToolSpec.config`` (persisted with its turn) holds the
  server's command, URL and plain settings; ``env_from`` and ``headers_env`` name variables
  that the process that connects (the TurnHost, which inherits the environment of the
  process that started the Runtime, or of the node) reads when it connects.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from messages import ToolSpec

from ..errors import ConfigurationError, ToolDefinitionError
from ..tools.context import ToolContext
from ..tools.definition import Tool
from .session import ServerParams

__all__ = ["mcp_tools"]

Approval = bool | Collection[str] | Callable[[dict[str, Any]], bool]
_FACTORY = "actors.mcp:load_mcp_tool"
_SECRET_HEADERS = {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"}


def mcp_tools(
    command: str | Sequence[str] | None = None,
    *,
    url: str | None = None,
    name: str | None = None,
    prefix: str = "",
    requires_approval: Approval = False,
    env: Mapping[str, str] | None = None,
    env_from: Sequence[str] = (),
    cwd: str | None = None,
    headers: Mapping[str, str] | None = None,
    headers_env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    call_timeout: float | None = None,
) -> list[Tool]:
    """The tools of one MCP server, as greenroom tools, in the order the server lists them.

    Args:
        command: a stdio server: its command line (a list, or a string split like a shell's).
        url: a Streamable HTTP server's endpoint (give ``command`` or ``url``).
        name: the server's name in tool messages (default: the name it gives itself).
        prefix: put before every tool name (for two servers with the same names); characters
            a model does not accept in a name become ``_``.
        requires_approval: ``True``, a set of the server's tool names, or a predicate.
        env: variables for a stdio server; plain settings only, they travel with the turn.
        env_from: names of variables copied into a stdio server's environment when it
            starts (its secrets); a stdio server otherwise gets only ``HOME``, ``PATH``, ...
        cwd: a stdio server's working directory.
        headers: HTTP headers, plain settings only; ``Authorization`` and the like are refused.
        headers_env: HTTP header -> name of the variable that holds its whole value.
        timeout: seconds to connect and list (here), and to connect (in a host).
        call_timeout: seconds a call may take; past it the call is stopped (the client sends
            ``notifications/cancelled``) and fails saying so. Default: the turn's
            ``TurnOptions.tool_timeout`` (300 s unless set).
    """
    server = _server_params(command, url, name, env, env_from, cwd, headers, headers_env, timeout)
    own_name, listed = _listed(server)
    if name is None and own_name:
        server = server.model_copy(update={"label": own_name})
    approval = _approval_of(requires_approval, [t.name for t in listed], server)
    tools: list[Tool] = []
    for t in listed:
        schema = dict(t.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        tools.append(
            MCPTool(
                server,
                t.name,
                name=_tool_name(prefix + t.name),
                description=t.description or t.title or "",
                parameters=schema,
                approval=approval(t.name),
                timeout=call_timeout,
            )
        )
    seen: set[str] = set()
    for made in tools:
        if made.name in seen:
            raise ToolDefinitionError(f"{server.where} lists two tools named {made.name!r} once made valid names")
        seen.add(made.name)
    return tools


class MCPTool(Tool):
    """One tool of an MCP server: an ``async def`` that runs inline in the turn's host,
    through the host's session with the server. Made by ``mcp_tools``; as plain data, its
    spec names the server in ``config`` and ``load_mcp_tool`` as its factory."""

    def __init__(
        self,
        server: ServerParams,
        mcp_name: str,
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        approval: bool | Callable[[dict[str, Any]], bool],
        timeout: float | None = None,
    ) -> None:
        self.server = server
        self.mcp_name = mcp_name
        super().__init__(
            self._call, name=name, description=description, requires_approval=approval, inline=True, timeout=timeout
        )
        self.parameters = parameters

    async def _call(self, arguments: dict[str, Any]) -> Any:
        from .client import call  # the mcp package, imported on the host's loop at its first call

        ctx = ToolContext.current()
        ctx.cancellation.throw_if_requested()  # a cancel before the request leaves: it never does
        return await call(self.server, self.mcp_name, arguments, ctx.report_progress)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as they are: the server checks them against its schema."""
        return {"arguments": dict(arguments)}

    @property
    def ref(self) -> str:
        return _FACTORY

    @property
    def spec(self) -> ToolSpec:
        approval, approval_ref = self._approval_spec()
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            ref=_FACTORY,
            approval=approval,  # type: ignore[arg-type]
            approval_ref=approval_ref,
            approvers=self.approvers,
            is_async=True,
            inline=True,
            config={"server": self.server.model_dump(mode="json"), "tool": self.mcp_name},
            timeout=self.timeout,
        )

    def __repr__(self) -> str:
        return f"<MCPTool {self.name} of {self.server.where}>"


def load_mcp_tool(spec: ToolSpec) -> Tool:
    """The tool of ``spec`` in this process (``load_tool`` calls it); nothing is connected yet."""
    config = spec.config or {}
    try:
        server = ServerParams.model_validate(config["server"])
        mcp_name = str(config["tool"])
    except (KeyError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {spec.name!r}: its MCP server is not described: {exc}") from None
    return MCPTool(
        server,
        mcp_name,
        name=spec.name,
        description=spec.description,
        parameters=spec.parameters,
        approval=False,
        timeout=spec.timeout,
    )


# -- checking what the caller gave ----------------------------------------------------------


def _server_params(
    command: str | Sequence[str] | None,
    url: str | None,
    name: str | None,
    env: Mapping[str, str] | None,
    env_from: Sequence[str],
    cwd: str | None,
    headers: Mapping[str, str] | None,
    headers_env: Mapping[str, str] | None,
    timeout: float,
) -> ServerParams:
    if (command is None) == (url is None):
        raise ConfigurationError("mcp_tools() needs a command (a stdio server) or a url (Streamable HTTP), not both")
    argv = shlex.split(command) if isinstance(command, str) else list(command or [])
    if command is not None and not argv:
        raise ConfigurationError("mcp_tools(): the command is empty")
    if isinstance(env_from, str):
        raise ConfigurationError("mcp_tools(env_from=...) takes a list of variable names, not one string")
    for header in headers or {}:
        if header.lower() in _SECRET_HEADERS:
            raise ConfigurationError(
                f"header {header!r} carries a secret, and headers travel with the turn: name the variable that "
                f"holds its value instead, headers_env={{{header!r}: 'MY_VARIABLE'}}"
            )
    label = name or (os.path.basename(argv[0]) if argv else str(url))
    return ServerParams(
        label=label,
        command=argv,
        url=url,
        cwd=os.path.abspath(cwd) if cwd is not None else None,
        env=dict(env or {}),
        env_from=list(env_from),
        headers=dict(headers or {}),
        headers_env=dict(headers_env or {}),
        timeout=timeout,
    )


def _approval_of(
    requires_approval: Approval, names: list[str], server: ServerParams
) -> Callable[[str], bool | Callable[[dict[str, Any]], bool]]:
    if isinstance(requires_approval, bool) or callable(requires_approval):
        gate: bool | Callable[[dict[str, Any]], bool] = requires_approval
        return lambda _name: gate
    if isinstance(requires_approval, str):
        raise ConfigurationError(f"requires_approval={requires_approval!r}: give a set of tool names")
    chosen = set(requires_approval)
    unknown = sorted(chosen - set(names))
    if unknown:
        raise ToolDefinitionError(f"requires_approval names tools {server.where} does not list: {', '.join(unknown)}")
    return lambda name: name in chosen


def _tool_name(raw: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", raw)[:64] or "_"


def _listed(server: ServerParams) -> tuple[str | None, list[Any]]:
    """The server's own name and tools, read in a thread of its own (this thread may run a loop)."""
    from .client import failure, list_server_tools

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["listed"] = asyncio.run(list_server_tools(server))
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            box["error"] = exc

    thread = threading.Thread(target=work, name="greenroom mcp_tools", daemon=True)
    thread.start()
    thread.join()
    error = box.get("error")
    if error is not None:
        raise ToolDefinitionError(str(failure(server, error, "could not be listed"))) from None
    listed: tuple[str | None, list[Any]] = box["listed"]
    return listed
