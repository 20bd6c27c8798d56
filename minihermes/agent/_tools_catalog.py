"""The tool catalogue: what each tool is, as the LLM and the guardrails see it.

A tool is a name, a description, a JSON Schema for its input and a *handler kind* (the code behind it): one of
the built-in kinds, ``service_link`` (an HTTP endpoint behind a configured link) or ``python`` (a function the
embedding program registered in this process). Every tool is classified for the guardrails:

- effects: ``read`` (idempotent, changes nothing) or ``mutating``;
- trust: ``trusted`` (computes, or reads our own state) or ``untrusted`` (brings outside content into the
  conversation: files, web, service links, terminal output). Untrusted output is data, never instructions;
- review: a mutating call goes to a person's review unless a policy says otherwise.

Schemas are checked at registration (Draft 2020-12) and compiled once; every input is validated before a tool
runs, and the error names the offending field.

Access (``minihermes.permissions``): every built-in kind declares what a call does in the permission model,
either the ``(actor, op)`` it performs (``("kanban", "delete")``: the caller needs the roles that op needs over
HTTP) or an access class (``"read"``, ``"write"``) for tools with no actor behind them (calculator, files in
the caller's own session workspace), or a function of the input for tools whose op depends on it. A kind that
declares nothing is admin-only. Tools registered at run time take the class of their effects (``read`` or
``write``), or their kind's declaration when they are built on a built-in kind. A tool with an ``owner`` (one
a user's turn wrote) is listed to and run by that principal only, and its output is untrusted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from minihermes.runtime import InvalidArgument

from ._tools_schema import CompiledSchema, check_schema

READ, MUTATING = "read", "mutating"
TRUSTED, UNTRUSTED = "trusted", "untrusted"
EFFECTS = (READ, MUTATING)
TRUST = (TRUSTED, UNTRUSTED)

TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
"""What every provider accepts as a function name."""
LINK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
MAX_DESCRIPTION_CHARS = 2000
MAX_TIMEOUT = 600.0
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

SERVICE_LINK = "service_link"
PYTHON = "python"

Permission = tuple[str, str] | str
"""What one call needs: the ``(actor, op)`` it performs, or an access class (``read``, ``write``, ``admin``)."""
PermissionSpec = Permission | Callable[[dict[str, Any]], Permission] | None
"""A kind's declaration: a permission, a function of the call's input giving one, or None (admin only)."""
ACCESS_OF_EFFECTS = {READ: "read", MUTATING: "write"}
CLOSED: Permission = "admin"


@dataclass(frozen=True, slots=True)
class Kind:
    """A built-in handler kind: the code behind a tool and how it is classified."""

    name: str
    description: str
    input_schema: dict[str, Any]
    effects: str
    trust: str
    review: bool = False
    """Mutating calls go to review by default."""
    requires: str | None = None
    """An actor this tool talks to: the tool is listed and runnable only on nodes that have it."""
    permission: PermissionSpec = None
    """What a call needs in the permission model (see the module docstring); None: admin only."""


def resolve_permission(spec: PermissionSpec, args: dict[str, Any]) -> Permission:
    """The permission one call with ``args`` needs (``CLOSED`` when nothing was declared)."""
    if spec is None:
        return CLOSED
    if callable(spec):
        return spec(args)
    return spec


def _http_permission(args: dict[str, Any]) -> Permission:
    return "read" if str(args.get("method") or "GET").upper() == "GET" else "write"


def _obj(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


_SCOPE = {"type": "string", "enum": ["global", "agent", "session"], "description": "Who may see it"}
_KEY = {"type": "string", "minLength": 1, "maxLength": 200, "description": "Short key, e.g. favourite_colour"}
_PATH = {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Path inside the workspace"}

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "calculator",
            "Evaluate an arithmetic expression exactly: + - * / // % ** and parentheses, sqrt, log, exp, "
            "sin/cos/tan, factorial, round, min, max, pi, e. Use it for every calculation.",
            _obj(
                {
                    "expression": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 500,
                        "description": "e.g. 42 * 17",
                    }
                },
                ["expression"],
            ),
            READ,
            TRUSTED,
            permission="read",
        ),
        Kind(
            "memory_store",
            "Remember a fact under a short key for later conversations (e.g. favourite_colour = teal). "
            "Tier core is shown in every conversation; reachable is recalled on demand; deep is archival.",
            _obj(
                {
                    "key": _KEY,
                    "value": {"type": ["string", "number", "boolean"], "description": "The fact to remember"},
                    "scope": _SCOPE,
                    "tier": {"type": "string", "enum": ["core", "reachable", "deep"]},
                    "agent_id": {"type": "string", "maxLength": 200},
                },
                ["key", "value"],
            ),
            MUTATING,
            TRUSTED,
            permission=("memory", "store_memory"),
        ),
        Kind(
            "memory_recall",
            "Recall a remembered fact by its exact key.",
            _obj({"key": _KEY, "scope": _SCOPE, "agent_id": {"type": "string", "maxLength": 200}}, ["key"]),
            READ,
            TRUSTED,
            permission=("memory", "recall_memory"),
        ),
        Kind(
            "memory_search",
            "Search remembered facts by words (best matches first). Use it when the exact key is unknown.",
            _obj(
                {
                    "query": {"type": "string", "minLength": 1, "maxLength": 500},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                },
                ["query"],
            ),
            READ,
            TRUSTED,
            permission=("memory", "search_memories"),
        ),
        Kind(
            "http_request",
            "Call an HTTP API through a configured service link (by link name and a path on it; never a URL). "
            "GET parameters go in params, a request body in json.",
            _obj(
                {
                    "link": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 64,
                        "description": "Service link name",
                    },
                    "method": {"type": "string", "enum": list(HTTP_METHODS)},
                    "path": {"type": "string", "minLength": 1, "maxLength": 2048},
                    "params": {"type": "object"},
                    "json": {},
                },
                ["link", "path"],
            ),
            MUTATING,  # per call: a GET is a read (see ToolDef.effects_for)
            UNTRUSTED,
            review=True,
            permission=_http_permission,  # through a link the admin configured: a GET reads
        ),
        Kind(
            "read_file",
            "Read a text file from this session's workspace folder.",
            _obj(
                {"path": _PATH, "max_bytes": {"type": "integer", "minimum": 1, "maximum": 1024 * 1024}},
                ["path"],
            ),
            READ,
            UNTRUSTED,
            permission="read",  # the caller's own session workspace
        ),
        Kind(
            "write_file",
            "Write a text file in this session's workspace folder (folders are created as needed).",
            _obj(
                {
                    "path": _PATH,
                    "content": {"type": "string", "maxLength": 5_000_000},
                    "overwrite": {"type": "boolean"},
                },
                ["path", "content"],
            ),
            MUTATING,
            TRUSTED,
            review=True,
            permission="write",
        ),
        Kind(
            "list_files",
            "List the files of a folder in this session's workspace.",
            _obj({"path": {**_PATH, "minLength": 0}, "recursive": {"type": "boolean"}}),
            READ,
            UNTRUSTED,
            permission="read",
        ),
        Kind(
            "terminal",
            "Run a shell command in an isolated sandbox whose only writable folder is this session's workspace "
            "(no network, limited CPU, memory and time). Returns exit code, stdout and stderr.",
            _obj(
                {
                    "command": {"type": "string", "minLength": 1, "maxLength": 10_000},
                    "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
                },
                ["command"],
            ),
            MUTATING,
            UNTRUSTED,
            review=True,
            permission="write",  # a sandbox whose only writable folder is the caller's session workspace
        ),
    )
}

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
    """One tool as the executor runs it. Built from a built-in kind or a stored registration."""

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
    """An actor the tool needs (see ``Kind.requires``)."""
    permission: PermissionSpec = None
    """What a call needs (see ``Kind.permission``)."""
    owner: str = ""
    """The principal a self-written, not yet promoted tool belongs to; empty for the tenant's tools."""

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
        return self.handler_type == "http_request" and not self.effects_declared

    def effects_for(self, args: Any = None) -> str:
        """The effects of one call: an ``http_request`` GET is a read even though the tool can write."""
        if self.input_dependent:
            merged = {
                **(args if isinstance(args, dict) else {}),
                **self.handler_config.get("fixed_input", {}),
            }
            return READ if str(merged.get("method") or "GET").upper() == "GET" else MUTATING
        return self.effects

    def listing(self) -> dict[str, Any]:
        """The entry ``list_tools`` shows (what the LLM sees, plus the classification)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "effects": self.effects,
            "trust": self.trust,
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


def _builtin_def(k: Kind) -> ToolDef:
    return ToolDef(
        name=k.name,
        description=k.description,
        input_schema=k.input_schema,
        handler_type=k.name,
        handler_config={},
        builtin=True,
        effects=k.effects,
        trust=k.trust,
        review=k.review,
        schema=CompiledSchema(k.input_schema),
        requires=k.requires,
        permission=k.permission,
    )


BUILTINS: dict[str, ToolDef] = {k.name: _builtin_def(k) for k in KINDS.values()}


def add_kind(kind: Kind) -> ToolDef:
    """Add a built-in kind (a subsystem's own tool, e.g. ``session_search``). Its schema is checked here;
    a name that is already taken is refused."""
    if not TOOL_NAME.match(kind.name):
        raise ValueError(f"invalid tool name {kind.name!r}")
    if kind.name in KINDS:
        raise ValueError(f"a built-in tool named {kind.name!r} already exists")
    if kind.effects not in EFFECTS or kind.trust not in TRUST:
        raise ValueError(f"tool {kind.name!r}: effects must be one of {EFFECTS}, trust one of {TRUST}")
    check_schema(kind.input_schema)
    KINDS[kind.name] = kind
    tool = BUILTINS[kind.name] = _builtin_def(kind)
    return tool


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


def _check_config(handler_type: str, config: dict[str, Any]) -> None:
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
        kind = KINDS[handler_type]
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
    name: Any, description: Any, input_schema: Any, handler_type: Any, handler_config: Any
) -> dict[str, Any]:
    """Check a ``register_tool`` request; returns the record to store. Raises InvalidArgument naming the field."""
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise _bad("name", "name must start with a letter and use 1-64 letters, digits, '_' or '-'")
    if not isinstance(description, str) or not description.strip():
        raise _bad("description", "description must be a non-empty string (the LLM reads it)")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise _bad("description", f"description is longer than {MAX_DESCRIPTION_CHARS} characters")
    known = [SERVICE_LINK, PYTHON, *KINDS]
    if handler_type not in known:
        raise _bad("handler_type", f"unknown handler_type {handler_type!r} (known: {', '.join(known)})")
    config = {} if handler_config is None else handler_config
    if not isinstance(config, dict):
        raise _bad("handler_config", "handler_config must be an object")
    try:
        json.dumps(config, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise _bad("handler_config", f"handler_config is not JSON: {e}") from None
    _check_config(handler_type, config)
    schema = check_schema(input_schema)
    # Stored copies: a caller in this process cannot change a registered tool behind the executor's back.
    return {
        "name": name,
        "description": description,
        "input_schema": json.loads(json.dumps(schema)),
        "handler_type": handler_type,
        "handler_config": json.loads(json.dumps(config)),
    }


def build_registered(record: dict[str, Any]) -> ToolDef:
    """The ToolDef of a checked registration record (classification derived from its kind and config)."""
    handler_type = record["handler_type"]
    config: dict[str, Any] = record.get("handler_config") or {}
    declared = config.get("effects")
    permission: PermissionSpec
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
        kind = KINDS[handler_type]
        effects = declared or kind.effects
        trust = config.get("trust") or kind.trust
        review = kind.review
        permission = kind.permission  # a wrapper of a built-in kind needs what the kind needs
    owner = str(record.get("owner") or "")
    if owner:
        trust = UNTRUSTED  # a user's own code: its output is data, like any outside content
    return ToolDef(
        name=record["name"],
        description=record["description"],
        input_schema=record["input_schema"],
        handler_type=handler_type,
        handler_config=config,
        builtin=False,
        effects=effects,
        trust=trust,
        review=bool(config.get("review_by_default", review)),
        schema=CompiledSchema(record["input_schema"]),
        effects_declared=declared is not None,
        permission=permission,
        owner=owner,
    )
