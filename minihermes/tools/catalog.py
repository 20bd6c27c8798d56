"""Toolsets and the catalogue one tool executor runs: built-in tools, and tools registered at run time.

A ``Toolset`` is a named group of ``Tool`` records (``compute``, ``memory``, ``kanban``, ...); it checks its
tools once, when it is built (names, classification, input schemas: Draft 2020-12, compiled once), and
declares when a turn offers them (``offered``, the ``intents`` that call for it, its ``purpose`` as
``find_tools`` lists it). A ``Catalog`` is the toolsets one executor was given. Every tool the executor runs is a ``ToolDef``: a built-in
tool, or a registration (``register_tool``) whose *handler kind* is ``service_link`` (an HTTP endpoint behind
a configured link), ``python`` (a function the embedding program registered in this process, see
``minihermes.tools.local``) or a built-in tool of the catalogue (with pinned ``fixed_input``).

Registered tools take the access class of their effects (``read`` or ``write``), or their kind's declaration
when they are built on a built-in tool, and its review by default (``review_by_default`` in the config may
change it, but a tool with an owner cannot turn it off). A tool with an ``owner`` (one a user's turn wrote)
is listed to and run by that principal only, and its output is untrusted. Every input is validated before a
tool runs, and the error names the offending field.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from minihermes.runtime import InvalidArgument

from ._schema import CompiledSchema, check_schema
from .contract import (
    ACCESS_OF_EFFECTS,
    CORE,
    EFFECTS,
    MUTATING,
    OFFERED,
    READ,
    TOOL_NAME,
    TOOLSET_NAME,
    TRUST,
    TRUSTED,
    UNTRUSTED,
    EffectsOf,
    ExecutorEnv,
    Handler,
    Inline,
    Permission,
    PermissionSpec,
    Tool,
    ToolEnv,
    ToolFailure,
    resolve_permission,
)

LINK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
MAX_DESCRIPTION_CHARS = 2000
MAX_TIMEOUT = 600.0
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

SERVICE_LINK = "service_link"
PYTHON = "python"

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

# handler_config keys each kind accepts (anything else is refused, naming the key).
_COMMON_CONFIG = {"effects", "trust", "timeout", "review_by_default"}
_CONFIG_KEYS: dict[str, set[str]] = {
    SERVICE_LINK: _COMMON_CONFIG | {"link_name", "path", "method"},
    PYTHON: _COMMON_CONFIG | {"function", "capabilities"},
}
_BUILTIN_CONFIG_KEYS = _COMMON_CONFIG | {"fixed_input"}
_UNTRUSTED_CAPABILITIES = frozenset({"network", "web", "filesystem", "files", "untrusted"})


# ------------------------------------------------------------------------------------------------ tools


@dataclass(frozen=True, slots=True, eq=False)
class ToolDef:
    """One tool as the executor runs it. Built from a built-in ``Tool`` or a stored registration."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler_type: str
    handler_config: dict[str, Any]
    builtin: bool
    effects: str
    trust: str
    review: bool
    schema: CompiledSchema = field(repr=False)
    effects_declared: bool = False
    requires: str | None = None
    """An actor the tool needs (see ``Tool.requires``)."""
    permission: PermissionSpec = None
    """What a call needs (see ``Tool.permission``)."""
    owner: str = ""
    """The principal a self-written, not yet promoted tool belongs to; empty for the tenant's tools."""
    handler: Handler | None = field(default=None, repr=False)
    """The code of a built-in tool, or of the built-in tool a registration is built on."""
    base: ToolDef | None = field(default=None, repr=False)
    """For a registration on a built-in tool: that tool (its schema must hold too)."""
    toolset: str = ""
    effects_of: EffectsOf | None = field(default=None, repr=False)
    """The effects of one call given its input (``Tool.effects_of``; a registration inherits its kind's)."""
    inline: Inline | None = field(default=None, repr=False)
    """A built-in's in-place run (``Tool.inline``); None for registrations."""
    timeout_of: Callable[[ExecutorEnv], float] | None = field(default=None, repr=False)
    """A built-in's timeout as a function of the executor's settings (``Tool.timeout``)."""
    offered: str = CORE
    """When a turn offers it (``Tool.offered``); a registered tool is offered whenever it is listed."""

    def permission_for(self, args: Any = None) -> Permission:
        """What one call needs in the permission model: the ``(actor, op)`` or the access class."""
        merged = args if isinstance(args, dict) else {}
        if not self.builtin:
            merged = {**merged, **self.handler_config.get("fixed_input", {})}
        return resolve_permission(self.permission, merged)

    def visible_to(self, principal: str) -> bool:
        """A tenant tool is everybody's; an owned one only its owner's."""
        return not self.owner or self.owner == principal

    @property
    def input_dependent(self) -> bool:
        """Whether a call's effects depend on its input (then they cannot be cached per tool)."""
        return self.effects_of is not None and not self.effects_declared

    def effects_for(self, args: Any = None) -> str:
        """The effects of one call (``Tool.effects_of``: an ``http_request`` GET is a read even though the
        tool can write); a registration's pinned input counts."""
        if self.effects_of is not None and not self.effects_declared:
            merged = {
                **(args if isinstance(args, dict) else {}),
                **self.handler_config.get("fixed_input", {}),
            }
            return self.effects_of(merged)
        return self.effects

    def listing(self) -> dict[str, Any]:
        """The entry ``list_tools`` shows (what the LLM sees, plus the classification, the toolset: a
        built-in's group, empty for a registered tool, and when a turn offers it)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "effects": self.effects,
            "trust": self.trust,
            "toolset": self.toolset,
            "offered": self.offered,
        }

    def describe(self, args: Any = None) -> dict[str, Any]:
        """Everything the guardrails need to decide on a call."""
        effects = self.effects_for(args)
        return {
            "status": "ok",
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "handler_type": self.handler_type,
            "handler_config": self.handler_config,
            "builtin": self.builtin,
            "effects": effects,
            "trust": self.trust,
            "review_by_default": self.review and effects == MUTATING,
            "input_dependent": self.input_dependent,
            "permission": _permission_view(self.permission_for(args)),
            "owner": self.owner,
        }

    def input_error(self, args: Any) -> dict[str, Any] | None:
        """None when ``args`` fits the schema, else a structured ``invalid_input`` error naming the field."""
        return self.schema.input_error(args)


def _permission_view(permission: Permission) -> dict[str, str]:
    if isinstance(permission, tuple):
        return {"actor": permission[0], "op": permission[1]}
    return {"access": permission}


def builtin_def(tool: Tool) -> ToolDef:
    """The executor's form of a built-in tool (its schema checked and compiled, its facts read once)."""
    if not TOOL_NAME.match(tool.name):
        raise ValueError(f"invalid tool name {tool.name!r}")
    if tool.effects not in EFFECTS or tool.trust not in TRUST:
        raise ValueError(f"tool {tool.name!r}: effects must be one of {EFFECTS}, trust one of {TRUST}")
    if not callable(tool.handler):
        raise ValueError(f"tool {tool.name!r}: handler must be an async function (args, env)")
    if tool.offered and tool.offered not in OFFERED:
        raise ValueError(f"tool {tool.name!r}: offered must be one of {OFFERED}")
    for fact in ("effects_of", "inline"):
        if getattr(tool, fact) is not None and not callable(getattr(tool, fact)):
            raise ValueError(f"tool {tool.name!r}: {fact} must be a function of the input")
    timeout = tool.timeout
    timeout_of = timeout if callable(timeout) else None
    if (
        timeout_of is None
        and timeout is not None
        and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0)
    ):
        raise ValueError(f"tool {tool.name!r}: timeout must be seconds or a function of the executor's env")
    check_schema(tool.input_schema)
    return ToolDef(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        handler_type=tool.name,
        handler_config={"timeout": timeout} if timeout and timeout_of is None else {},
        builtin=True,
        effects=tool.effects,
        trust=tool.trust,
        review=tool.review,
        schema=CompiledSchema(tool.input_schema),
        requires=tool.requires,
        permission=tool.permission,
        handler=tool.handler,
        toolset=tool.toolset,
        effects_of=tool.effects_of,
        inline=tool.inline,
        timeout_of=timeout_of,
        offered=tool.offered or CORE,
    )


@dataclass(frozen=True, slots=True, init=False)
class Toolset:
    """A named group of built-in tools (``Toolset("kanban", [...])``), checked once when it is built.

    Each tool's ``toolset`` is this name, and its ``offered`` this toolset's unless it declares its own.
    ``offered``: ``core`` (the default: a plain turn offers it) or ``on_request`` (offered when the
    configuration names the toolset, when the user's message matches one of ``intents``, regular
    expressions matched case-insensitively, or when the model asks ``find_tools`` for it). ``purpose``: what
    it is for, in a few words (``find_tools`` lists it; empty: its first tool's description)."""

    name: str
    tools: tuple[Tool, ...]
    defs: Mapping[str, ToolDef] = field(repr=False, compare=False)
    offered: str = CORE
    intents: tuple[str, ...] = ()
    purpose: str = ""

    def __init__(
        self,
        name: str,
        tools: Iterable[Tool],
        *,
        offered: str = CORE,
        intents: Iterable[str] = (),
        purpose: str = "",
    ) -> None:
        if not TOOLSET_NAME.match(name):
            raise ValueError(f"invalid toolset name {name!r} (lower case letters, digits and '_')")
        if offered not in OFFERED:
            raise ValueError(f"toolset {name!r}: offered must be one of {OFFERED}")
        patterns = tuple(intents)
        for pattern in patterns:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as e:
                raise ValueError(
                    f"toolset {name!r}: intent {pattern!r} is not a regular expression: {e}"
                ) from None
        named: list[Tool] = []
        for tool in tools:
            if tool.toolset and tool.toolset != name:
                raise ValueError(f"tool {tool.name!r} belongs to toolset {tool.toolset!r}, not {name!r}")
            if not tool.toolset or not tool.offered:
                tool = dataclasses.replace(tool, toolset=name, offered=tool.offered or offered)
            named.append(tool)
        defs: dict[str, ToolDef] = {}
        for tool in named:
            if tool.name in defs:
                raise ValueError(f"toolset {name!r} has two tools named {tool.name!r}")
            defs[tool.name] = builtin_def(tool)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "tools", tuple(named))
        object.__setattr__(self, "defs", defs)
        object.__setattr__(self, "offered", offered)
        object.__setattr__(self, "intents", patterns)
        object.__setattr__(self, "purpose", purpose)

    def facts(self) -> dict[str, Any]:
        """What a turn's toolset selection reads of it (``list_tools``' ``toolsets``): JSON data."""
        return {"offered": self.offered, "intents": list(self.intents), "purpose": self.purpose}


class Catalog:
    """The built-in tools of one executor: its toolsets' tools by name (a name is in one toolset only)."""

    __slots__ = ("facts", "tools", "toolsets")

    def __init__(self, toolsets: Iterable[Toolset]) -> None:
        self.tools: dict[str, ToolDef] = {}
        self.toolsets: dict[str, tuple[str, ...]] = {}
        self.facts: dict[str, dict[str, Any]] = {}
        """Each toolset's offering facts (``Toolset.facts``), by name."""
        for toolset in toolsets:
            if not isinstance(toolset, Toolset):
                raise ValueError(f"toolsets: {toolset!r} is not a Toolset")
            if toolset.name in self.toolsets:
                raise ValueError(f"toolsets: {toolset.name!r} is given twice")
            for name, tool in toolset.defs.items():
                if name in self.tools:
                    raise ValueError(
                        f"toolsets: {toolset.name!r} and {self.tools[name].toolset!r} both have {name!r}"
                    )
                self.tools[name] = tool
            self.toolsets[toolset.name] = tuple(toolset.defs)
            self.facts[toolset.name] = toolset.facts()


# ---------------------------------------------------------------------------------------- registration


def _bad(field_name: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"register_tool: {message}", op="register_tool", field=field_name)


def _choice(config: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if value not in allowed:
        raise _bad(f"handler_config.{key}", f"handler_config.{key} must be one of {list(allowed)}")
    return str(value)


def _check_config(handler_type: str, config: dict[str, Any], kinds: Mapping[str, ToolDef]) -> None:
    allowed = _CONFIG_KEYS.get(handler_type, _BUILTIN_CONFIG_KEYS)
    for key in config:
        if key not in allowed:
            raise _bad(
                f"handler_config.{key}", f"unknown handler_config key '{key}' (allowed: {sorted(allowed)})"
            )
    _choice(config, "effects", EFFECTS)
    _choice(config, "trust", TRUST)
    timeout = config.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT
    ):
        raise _bad(
            "handler_config.timeout", f"handler_config.timeout must be a number in (0, {MAX_TIMEOUT:g}]"
        )
    if "review_by_default" in config and not isinstance(config["review_by_default"], bool):
        raise _bad("handler_config.review_by_default", "handler_config.review_by_default must be a boolean")
    if handler_type == SERVICE_LINK:
        link = config.get("link_name")
        if not isinstance(link, str) or not LINK_NAME.match(link):
            raise _bad("handler_config.link_name", "handler_config.link_name must name a service link")
        path = config.get("path")
        if not isinstance(path, str) or not path or "://" in path or path.startswith("//") or "\\" in path:
            raise _bad("handler_config.path", "handler_config.path must be a relative path on the link")
        if any(seg in (".", "..") for seg in path.split("?", 1)[0].split("/")):
            raise _bad("handler_config.path", "handler_config.path must not contain '.' or '..' segments")
        method = config.get("method", "GET")
        if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
            raise _bad("handler_config.method", f"handler_config.method must be one of {list(HTTP_METHODS)}")
    elif handler_type == PYTHON:
        fn = config.get("function")
        if not isinstance(fn, str) or not fn:
            raise _bad("handler_config.function", "handler_config.function must name a registered function")
        caps = config.get("capabilities", [])
        if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
            raise _bad("handler_config.capabilities", "handler_config.capabilities must be a list of strings")
    else:
        kind = kinds[handler_type]
        fixed = config.get("fixed_input", {})
        if not isinstance(fixed, dict):
            raise _bad("handler_config.fixed_input", "handler_config.fixed_input must be an object")
        if config.get("trust") == TRUSTED and kind.trust == UNTRUSTED:
            raise _bad("handler_config.trust", f"{handler_type} brings outside content: it cannot be trusted")
        if config.get("effects") == READ and kind.effects == MUTATING:
            raise _bad(
                "handler_config.effects", f"{handler_type} can change things: it cannot be declared read"
            )


def check_registration(
    name: Any,
    description: Any,
    input_schema: Any,
    handler_type: Any,
    handler_config: Any,
    kinds: Mapping[str, ToolDef],
) -> dict[str, Any]:
    """Check a ``register_tool`` request against the built-in tools ``kinds``; returns the record to store.
    Raises InvalidArgument naming the field."""
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise _bad("name", "name must start with a letter and use 1-64 letters, digits, '_' or '-'")
    if not isinstance(description, str) or not description.strip():
        raise _bad("description", "description must be a non-empty string (the LLM reads it)")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise _bad("description", f"description is longer than {MAX_DESCRIPTION_CHARS} characters")
    known = [SERVICE_LINK, PYTHON, *kinds]
    if handler_type not in known:
        raise _bad("handler_type", f"unknown handler_type {handler_type!r} (known: {', '.join(known)})")
    config = {} if handler_config is None else handler_config
    if not isinstance(config, dict):
        raise _bad("handler_config", "handler_config must be an object")
    try:
        json.dumps(config, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _bad("handler_config", f"handler_config is not JSON: {e}") from None
    _check_config(handler_type, config, kinds)
    schema = check_schema(input_schema)
    # Stored copies: a caller in this process cannot change a registered tool behind the executor's back.
    return {
        "name": name,
        "description": description,
        "input_schema": json.loads(json.dumps(schema)),
        "handler_type": handler_type,
        "handler_config": json.loads(json.dumps(config)),
    }


def build_registered(record: dict[str, Any], kinds: Mapping[str, ToolDef]) -> ToolDef:
    """The ToolDef of a checked registration record (classification derived from its kind and config).
    A KeyError when it is built on a tool ``kinds`` does not have."""
    handler_type = record["handler_type"]
    config: dict[str, Any] = record.get("handler_config") or {}
    declared = config.get("effects")
    permission: PermissionSpec
    base: ToolDef | None = None
    if handler_type == SERVICE_LINK:
        method = str(config.get("method", "GET")).upper()
        effects = declared or (READ if method == "GET" else MUTATING)
        trust, review = UNTRUSTED, True
        permission = ACCESS_OF_EFFECTS[effects]
    elif handler_type == PYTHON:
        effects = declared or MUTATING
        caps = set(config.get("capabilities") or ())
        trust = config.get("trust") or (UNTRUSTED if caps & _UNTRUSTED_CAPABILITIES else TRUSTED)
        review = False
        permission = ACCESS_OF_EFFECTS[effects]
    else:
        base = kinds[handler_type]
        effects = declared or base.effects
        trust = config.get("trust") or base.trust
        review = base.review
        permission = base.permission  # a wrapper of a built-in kind needs what the kind needs
    owner = str(record.get("owner") or "")
    reviewed = bool(config.get("review_by_default", review))
    if owner:
        trust = UNTRUSTED  # a user's own code: its output is data, like any outside content
        reviewed = reviewed or review  # and it cannot turn off its kind's review (only a tenant tool may)
    return ToolDef(
        name=record["name"],
        description=record["description"],
        input_schema=record["input_schema"],
        handler_type=handler_type,
        handler_config=config,
        builtin=False,
        effects=effects,
        trust=trust,
        review=reviewed,
        schema=CompiledSchema(record["input_schema"]),
        effects_declared=declared is not None,
        permission=permission,
        owner=owner,
        handler=base.handler if base is not None else None,
        base=base,
        effects_of=base.effects_of if base is not None else None,
    )


# ------------------------------------------------------------------------------------- running a tool


def _query_value(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, separators=(",", ":"))


async def _service_link(tool: ToolDef, args: dict[str, Any], env: ToolEnv) -> Any:
    """A service-link tool: input fills ``{placeholders}`` in the path, the rest is the query (GET,
    DELETE) or the JSON body."""
    config = tool.handler_config
    method = str(config.get("method", "GET")).upper()
    rest = dict(args)

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in rest:
            raise ToolFailure("invalid_input", f"input.{name}: required by the path", field=name)
        value = str(rest.pop(name))
        if value in (".", ".."):
            raise ToolFailure("invalid_input", f"input.{name}: not a valid path segment", field=name)
        return quote(value, safe="")

    path = _PLACEHOLDER.sub(fill, config["path"])
    link = config["link_name"]
    if method in ("GET", "DELETE"):
        params = {k: _query_value(v) for k, v in rest.items()}
        reply: dict[str, Any] = await env.host.http_fetch(
            link, method, path, json=None, params=params or None
        )
        return reply
    reply = await env.host.http_fetch(link, method, path, json=rest, params=None)
    return reply


async def _python(tool: ToolDef, args: dict[str, Any], env: ToolEnv) -> Any:
    """A function the embedding program registered (``minihermes.tools.local``). Plain functions run in a
    worker thread so a slow one cannot stall the event loop; a timeout abandons the thread's result."""
    from .local import get_local_tool

    name = tool.handler_config["function"]
    local = get_local_tool(name)
    if local is None:
        raise ToolFailure("unavailable", f"function '{name}' is not registered in this process")
    fn = local.fn
    if inspect.iscoroutinefunction(fn):
        return await fn(**args)
    result = await asyncio.to_thread(fn, **args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run_tool(tool: ToolDef, args: dict[str, Any], env: ToolEnv) -> Any:
    """Run one validated call of ``tool``."""
    if tool.handler_type == SERVICE_LINK:
        return await _service_link(tool, args, env)
    if tool.handler_type == PYTHON:
        return await _python(tool, args, env)
    base = tool.base
    if base is not None:
        # A registered tool on a built-in kind: pinned values win, and the kind's own schema must hold too.
        fixed = tool.handler_config.get("fixed_input") or {}
        args = {**args, **fixed}
        error = base.input_error(args)
        if error is not None:
            raise ToolFailure(error.pop("code"), error.pop("message"), **error)
    assert tool.handler is not None
    return await tool.handler(args, env)


def to_json_result(value: Any, max_chars: int, *, plain: bool = False) -> Any:
    """The result as plain JSON data, capped: what the LLM reads and what gets checkpointed. ``plain``:
    the value is known to be JSON data already (a built-in's), so only its size is checked."""
    try:
        text = json.dumps(value, default=str, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise ToolFailure(
            "invalid_output", f"the tool returned something that is not JSON data: {e}"
        ) from None
    if len(text) > max_chars:
        return {"truncated": True, "size": len(text), "preview": text[:max_chars]}
    if plain or isinstance(value, str | int | float | bool) or value is None:
        return value
    return json.loads(text)


__all__ = [
    "HTTP_METHODS",
    "LINK_NAME",
    "MAX_DESCRIPTION_CHARS",
    "MAX_TIMEOUT",
    "PYTHON",
    "SERVICE_LINK",
    "Catalog",
    "ToolDef",
    "Toolset",
    "build_registered",
    "builtin_def",
    "check_registration",
    "run_tool",
    "to_json_result",
]
