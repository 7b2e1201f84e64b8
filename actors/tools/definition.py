"""Tools: plain functions offered to a model, loadable by import path in any process.

``@tool`` turns a sync or ``async def`` function into a ``Tool``: its JSON schema comes from
the signature and type hints (through pydantic), its description from the docstring, and
its ``spec`` (a plain ``ToolSpec``) names it by import path, so that a ToolActor in another
process, or on another host, loads the same function. Define tools at module level.

Approval: ``requires_approval=True`` on the decorator, ``requires_approval(existing_tool)``
to gate a tool you did not write, or a predicate on the call's parsed arguments
(``requires_approval=outside_sandbox``). A predicate runs in the TurnActor's process and
must be importable too (a module-level function, not a lambda); one that raises is taken
as "needs approval". ``approvers={"reviewer", "ops"}`` names who may decide a gated tool's
calls (the decision's ``by``): a decision by anyone else, or naming nobody, is refused
``not_allowed`` and changes nothing.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from messages import ToolSpec
from messages.principals import check_principal

from ..errors import ToolDefinitionError
from .refs import import_ref, ref_of

__all__ = ["Approval", "Tool", "requires_approval", "tool", "tool_specs"]


def _doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The docstring's summary paragraph(s) and the per-argument lines of an ``Args:`` section."""
    doc = inspect.getdoc(fn) or ""
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    for line in doc.splitlines():
        header = re.fullmatch(r"(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?):\s*", line.strip())
        if header and not line.startswith(" "):
            section = header.group(1)
            continue
        if section is None:
            summary_lines.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            m = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            if m:
                params[m.group(1)] = m.group(2).strip()
    return "\n".join(summary_lines).strip(), params


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


class Tool:
    """A function offered to a model. Calling a ``Tool`` calls the function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool | Callable[[dict[str, Any]], bool] = False,
        requires: dict[str, Any] | None = None,
        retry_safe: bool = False,
        inline: bool = False,
        isolate: bool = False,
        timeout: float | None = None,
        approvers: Collection[str] | None = None,
    ) -> None:
        if not callable(fn):
            raise ToolDefinitionError(f"a tool needs a function, got {fn!r}")
        if getattr(fn, "__name__", "") == "<lambda>":
            raise ToolDefinitionError(
                "a lambda has no import path: define it at module level (with def), so that the runtime's "
                "processes can import it"
            )
        self.fn = fn
        self.name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ToolDefinitionError(f"tool name {self.name!r} must match [A-Za-z0-9_-]{{1,64}}")
        summary, arg_docs = _doc_parts(fn)
        self.description = description if description is not None else summary
        self.is_async = inspect.iscoroutinefunction(fn)
        self.requires = dict(requires or {})
        self.retry_safe = retry_safe
        if inline and not self.is_async:
            raise ToolDefinitionError(f"tool {self.name!r}: inline=True is for async def tools only")
        if inline and isolate:
            raise ToolDefinitionError(f"tool {self.name!r}: a tool is either inline or isolated, not both")
        self.inline = inline
        self.isolate = isolate
        if timeout is not None and timeout <= 0:
            raise ToolDefinitionError(f"tool {self.name!r}: timeout must be a positive number of seconds")
        self.timeout = timeout
        self.approval: bool | Callable[[dict[str, Any]], bool] = requires_approval
        self.approvers = _approvers(self.name, approvers, requires_approval)
        self.args_model = self._build_model(arg_docs)
        try:
            self.parameters = _strip_titles(self.args_model.model_json_schema())
        except Exception as exc:  # pydantic raises several kinds for a type with no schema
            raise ToolDefinitionError(f"tool {self.name!r}: its parameters have no JSON schema: {exc}") from None
        self.parameters.setdefault("properties", {})
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def _build_model(self, arg_docs: dict[str, str]) -> type[BaseModel]:
        try:
            sig = inspect.signature(self.fn)
            hints = _type_hints(self.fn)
        except (TypeError, ValueError, NameError) as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: cannot read its signature: {exc}") from None
        fields: dict[str, Any] = {}
        for pname, p in sig.parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ToolDefinitionError(f"tool {self.name!r}: *args and **kwargs cannot be described to a model")
            annotation = hints.get(pname, Any)
            default = ... if p.default is p.empty else p.default
            fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
        try:
            return create_model(f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        except Exception as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: its parameters have no JSON schema: {exc}") from None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"

    # -- the plain-data face ---------------------------------------------------------------

    @property
    def ref(self) -> str:
        return ref_of(self.fn)

    @property
    def spec(self) -> ToolSpec:
        """This tool as plain data. Raises ``ToolDefinitionError`` if it cannot be imported."""
        ref = self.ref
        loaded = import_ref(ref)
        if loaded is not self and getattr(loaded, "fn", loaded) is not self.fn:
            raise ToolDefinitionError(
                f"tool {self.name!r}: {ref!r} does not lead back to it; define tools at module level"
            )
        approval, approval_ref = self._approval_spec()
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            ref=ref,
            approval=approval,  # type: ignore[arg-type]
            approval_ref=approval_ref,
            approvers=self.approvers,
            requires=self.requires,
            retry_safe=self.retry_safe,
            is_async=self.is_async,
            inline=self.inline,
            isolate=self.isolate,
            timeout=self.timeout,
        )

    def _approval_spec(self) -> tuple[str, str | None]:
        """``(ToolSpec.approval, ToolSpec.approval_ref)`` of this tool."""
        if callable(self.approval):
            approval_ref = ref_of(self.approval)
            if import_ref(approval_ref) is not self.approval:
                raise ToolDefinitionError(f"tool {self.name!r}: approval predicate {approval_ref!r} is not importable")
            return "predicate", approval_ref
        return ("always" if self.approval else "never"), None

    # -- running -------------------------------------------------------------------------

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments to call the function with; ``ValueError`` says what is wrong."""
        try:
            model = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            raise ValueError(f"Invalid arguments for tool '{self.name}': {_describe(exc)}") from None
        return {name: getattr(model, name) for name in type(model).model_fields}


def _approvers(name: str, approvers: Collection[str] | None, approval: Approval) -> list[str] | None:
    """``approvers`` checked (``ToolSpec.approvers``): principals, at least one, of a gated tool."""
    if approvers is None:
        return None
    if isinstance(approvers, str) or not isinstance(approvers, Collection):
        raise ToolDefinitionError(f"tool {name!r}: approvers is a set of principals, not {approvers!r}")
    if approval is False:
        raise ToolDefinitionError(f"tool {name!r}: approvers decide approvals; the tool needs requires_approval")
    if not approvers:
        raise ToolDefinitionError(f"tool {name!r}: approvers names at least one principal (None lets anyone decide)")
    try:
        return sorted({check_principal(a) for a in approvers})
    except ValueError as exc:
        raise ToolDefinitionError(f"tool {name!r}: approvers: {exc}") from None


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(fn, include_extras=True)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


Approval = bool | Callable[[dict[str, Any]], bool]


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: Approval = False,
    requires: dict[str, Any] | None = None,
    retry_safe: bool = False,
    inline: bool = False,
    isolate: bool = False,
    timeout: float | None = None,
    approvers: Collection[str] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: Approval = False,
    requires: dict[str, Any] | None = None,
    retry_safe: bool = False,
    inline: bool = False,
    isolate: bool = False,
    timeout: float | None = None,
    approvers: Collection[str] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make ``fn`` a ``Tool``; usable bare (``@tool``) or with options (``@tool(...)``).
    ``timeout`` (seconds) stops a call that runs longer and fails it, saying so; without it
    the turn's ``TurnOptions.tool_timeout`` applies. ``approvers`` (principals) are who may
    decide the calls of a tool that ``requires_approval``; None: anyone."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            requires_approval=requires_approval,
            requires=requires,
            retry_safe=retry_safe,
            inline=inline,
            isolate=isolate,
            timeout=timeout,
            approvers=approvers,
        )

    return wrap(fn) if fn is not None else wrap


def requires_approval(
    t: Tool | Callable[..., Any],
    when: Callable[[dict[str, Any]], bool] | None = None,
    *,
    approvers: Collection[str] | None = None,
) -> Tool:
    """A copy of ``t`` that needs approval, always or when ``when(arguments)`` is true,
    decided by ``approvers`` only if given (else by the tool's own, else by anyone)."""
    base = t if isinstance(t, Tool) else Tool(t)
    gated = object.__new__(type(base))  # an MCP server's tool stays one
    gated.__dict__.update(base.__dict__)
    gated.approval = when if when is not None else True
    if approvers is not None:
        gated.approvers = _approvers(base.name, approvers, gated.approval)
    return gated


def tool_specs(tools: Iterable[Tool | Callable[..., Any] | ToolSpec]) -> list[ToolSpec]:
    """``ToolSpec`` of each tool (plain functions are wrapped as tools)."""
    out = []
    for t in tools:
        if isinstance(t, ToolSpec):
            out.append(t)
        else:
            out.append((t if isinstance(t, Tool) else Tool(t)).spec)
    return out
