"""What a turn starts with, checked before anything is sent: its history, tools, provider.

Whatever would fail later, in another process, where the person who made the mistake can
no longer see it, fails here with a message that says why and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from messages import ProviderConfig, ToolSpec, TurnOptions

from ..errors import ConfigurationError, ToolDefinitionError
from ..placement import requirement
from ..providers.formats import History, history
from ..tools.definition import tool_specs

__all__ = ["History", "checked_options", "checked_provider", "checked_requires", "checked_tools", "history"]


def checked_provider(provider: ProviderConfig | None) -> ProviderConfig:
    """The turn's provider, refused now if it cannot work: none given, or a key variable
    that is not set (a server that needs no key says ``api_key_env=None``)."""
    if provider is None:
        raise ConfigurationError("no provider: pass provider= to Runtime() or to run()")
    if provider.api_key_env and not os.environ.get(provider.api_key_env):
        raise ConfigurationError(
            f"the provider's key variable ${provider.api_key_env} is not set in this process; set it, or "
            "pass api_key_env=None for a server that needs no key"
        )
    return provider


def checked_requires(requires: object) -> dict[str, Any]:
    """``requires`` as a turn keeps it, wherever it goes on (``placement.requirement``):
    ``ConfigurationError`` unless it maps names to JSON values."""
    if requires is None:
        return {}
    if not isinstance(requires, dict) or not all(isinstance(k, str) for k in requires):
        raise ConfigurationError(f"requires must be a dict of capability names to values, not {requires!r}")
    try:
        requirement(requires)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    return dict(requires)


def checked_options(options: TurnOptions, provider: ProviderConfig) -> TurnOptions:
    """The turn's options, refused now if its cost budget cannot be counted: ``max_cost``
    needs the model's prices (a budget of zero or less is refused by ``TurnOptions`` itself)."""
    if options.max_cost is not None and not provider.priced:
        raise ConfigurationError(
            f"max_cost={options.max_cost:g} needs the prices of model {provider.model!r}: set input_price and "
            "output_price (per million tokens) in its ProviderConfig"
        )
    return options


def checked_tools(tools: Iterable[Any], main_names: set[str], elsewhere: str | None = None) -> list[ToolSpec]:
    """Tool specs (functions are wrapped as tools), refusing at once a tool the runtime's
    processes could not import: a lambda or a closure (``tools.ref_of``), a tool defined in
    ``__main__`` after the runtime started (``main_names`` is what ``__main__`` held then),
    or one in ``__main__`` that must run on another node; and a tool or an approval
    predicate in ``__main__`` when the turn may be placed on another node (``elsewhere``
    says which: there the tool would fail, and the predicate would not load, so that every
    call of its tool would ask for approval)."""
    specs = tool_specs(tools)
    for spec in specs:
        module, _, name = spec.ref.partition(":")
        predicate = spec.approval_ref if spec.approval == "predicate" and spec.approval_ref else None
        if predicate is not None and predicate.partition(":")[0] == "__main__":
            where = predicate.partition(":")[2]
            if elsewhere is not None:
                raise ToolDefinitionError(
                    f"the approval predicate {where!r} of tool {spec.name!r} is defined in __main__, which "
                    f"another node cannot import, and this turn may be placed on {elsewhere}: there every call "
                    "of the tool would ask for approval; define the predicate in a module (a .py file)"
                )
            if where.split(".")[0] not in main_names:
                raise ToolDefinitionError(
                    f"the approval predicate {where!r} of tool {spec.name!r} was defined in __main__ after the "
                    "Runtime started, so its hosts cannot import it: define it before starting the Runtime, or in "
                    "a module (a .py file)"
                )
        if module != "__main__":
            continue
        if spec.requires:
            raise ToolDefinitionError(
                f"tool {spec.name!r} is defined in __main__, which a node cannot import: "
                "define tools that run on other nodes in a module (a .py file)"
            )
        if elsewhere is not None:
            raise ToolDefinitionError(
                f"tool {spec.name!r} is defined in __main__, which another node cannot import, and this turn "
                f"may be placed on {elsewhere}: define the tool in a module (a .py file), or keep the turn on this "
                "node with requires= (a capability only this node has)"
            )
        if name.split(".")[0] not in main_names:
            raise ToolDefinitionError(
                f"tool {spec.name!r} was defined in __main__ after the Runtime started, so its processes "
                "cannot import it: define it before starting the Runtime, or in a module (a .py file)"
            )
    return specs
