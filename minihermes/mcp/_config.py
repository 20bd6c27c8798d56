"""MCP server configurations: what an admin registers, checked before anything is started or stored.

A server is reached over ``stdio`` (a command the node starts, speaking MCP on its stdin/stdout) or ``http``
(the streamable HTTP transport at a URL). ``env`` and ``headers`` may carry secrets (an API token for the
server): they are stored in the tenant's actor state and never shown back (``public`` redacts them).

A stdio program runs on the node's machine as the node's user, outside the sandbox: the node's operator says
which (``stdio_commands``). Where that is a list rather than ``["*"]``, the tenant admin names neither a
folder of the machine (``cwd`` is refused) nor the variables that decide which program runs or what it
loads (``PATH``, ``LD_PRELOAD``, ``PYTHONPATH``, ``NODE_OPTIONS``, ... are refused): the listed program is
the one that runs. An http server's ``url`` is checked here for its form only; where its host may point
(``allowed_egress``) is checked by the manager, which resolves it (``minihermes.llm.egress``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import urlsplit

from minihermes.runtime import InvalidArgument, PermissionDenied

TRANSPORTS = ("stdio", "http")
SERVER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
_TOOL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_ARGS = 64
MAX_TEXT = 4096
MAX_TIMEOUT = 600.0
MAX_TOOLS_PER_SERVER = 100
REDACTED = "***"
RESERVED_ARGS = ("mcp_server", "mcp_tool")
"""Input fields the ``mcp_call`` tool kind reads itself: an MCP tool may not have arguments named so."""
STDIO_SETTING = "the mcp_manager arg stdio_commands (docs/mcp.md)"
EGRESS_SETTING = (
    "the mcp_manager arg allowed_egress (or MINIHERMES_ALLOWED_EGRESS for the whole node; docs/mcp.md)"
)
_LOADER_ENV = re.compile(
    r"^(?:PATH|HOME|SHELL|ENV|BASH_ENV|SHELLOPTS|BASHOPTS|IFS|TMPDIR|GCONV_PATH|LOCPATH|HOSTALIASES|"
    r"LD_\w*|DYLD_\w*|XDG_\w*|PYTHON\w*|NODE_\w*|NPM_CONFIG_\w*|NPX_\w*|UV_\w*|PIP_\w*|VIRTUAL_ENV|"
    r"PERL5\w*|PERLLIB|RUBY\w*|GEM_\w*|BUNDLE_\w*|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|"
    r"CLASSPATH|GIT_\w*|DENO_\w*|BUN_\w*|GOPATH|GOFLAGS|CARGO_\w*|RUSTC\w*)$",
    re.IGNORECASE,
)
"""Variables that change which program a listed command is, or what it loads and runs besides itself."""


def _bad(op: str, field: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{op}: {message}", op=op, field=field)


def _text(op: str, field: str, value: Any, *, required: bool = False) -> str:
    if not isinstance(value, str):
        raise _bad(op, field, f"{field} must be a string")
    if required and not value.strip():
        raise _bad(op, field, f"{field} must not be empty")
    if len(value) > MAX_TEXT or "\x00" in value:
        raise _bad(op, field, f"{field} must be at most {MAX_TEXT} characters, without NUL")
    return value


def _string_map(op: str, field: str, value: Any, key_pattern: re.Pattern[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_ARGS:
        raise _bad(op, field, f"{field} must be an object of at most {MAX_ARGS} string values")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not key_pattern.match(k):
            raise _bad(op, f"{field}.{k}", f"{field}: {k!r} is not a valid name")
        if any(c in str(v) for c in "\r\n"):
            raise _bad(op, f"{field}.{k}", f"{field}.{k} must not contain line breaks")
        out[k] = _text(op, f"{field}.{k}", v)
    return out


def check_server(
    op: str,
    *,
    name: Any,
    transport: Any,
    command: Any = "",
    args: Any = None,
    env: Any = None,
    cwd: Any = "",
    url: Any = "",
    headers: Any = None,
    timeout: Any = 30.0,
    connect_timeout: Any = 60.0,
    tools: Any = None,
    review: Any = True,
    stdio_commands: list[str] | None = None,
) -> dict[str, Any]:
    """The record to store for a server, or InvalidArgument / PermissionDenied naming the field."""
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise _bad(op, "name", "name must start with a letter and use 1-32 letters, digits, '_' or '-'")
    if transport not in TRANSPORTS:
        raise _bad(op, "transport", f"transport must be one of {list(TRANSPORTS)}")
    for field, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT:
            raise _bad(op, field, f"{field} must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
    if not isinstance(review, bool):
        raise _bad(op, "review", "review must be a boolean")
    allow: list[str] | None = None
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
            raise _bad(op, "tools", "tools must be a list of MCP tool names (the ones to offer)")
        allow = sorted(set(tools))
    record: dict[str, Any] = {
        "name": name,
        "transport": transport,
        "timeout": float(timeout),
        "connect_timeout": float(connect_timeout),
        "tools": allow,
        "review": review,
    }
    if transport == "stdio":
        if url or headers:
            raise _bad(op, "url", "url and headers are for the http transport")
        cmd = _text(op, "command", command, required=True)
        if args is None:
            args = []
        if not isinstance(args, list) or len(args) > MAX_ARGS:
            raise _bad(op, "args", f"args must be a list of at most {MAX_ARGS} strings")
        env_map = _string_map(op, "env", env, _ENV_NAME)
        folder = _text(op, "cwd", cwd or "")
        if stdio_commands is not None:
            check_program(op, cmd, env_map, folder, stdio_commands)
        record |= {
            "command": cmd,
            "args": [_text(op, f"args[{i}]", a) for i, a in enumerate(args)],
            "env": env_map,
            "cwd": folder,
        }
    else:
        if command or args or env or cwd:
            raise _bad(op, "command", "command, args, env and cwd are for the stdio transport")
        text = _text(op, "url", url, required=True)
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _bad(op, "url", "url must be an http(s) URL with a host")
        if parts.username or parts.password:
            raise _bad(op, "url", "put credentials in headers, not in the url")
        record |= {"url": text, "headers": _string_map(op, "headers", headers, _HEADER_NAME)}
    return record


def check_program(op: str, command: str, env: dict[str, str], cwd: str, stdio_commands: list[str]) -> None:
    """``PermissionDenied`` naming the setting unless this node lets a tenant start ``command`` with this
    ``env`` and ``cwd``: ``stdio_commands`` is ``["*"]``, or it lists ``command`` and the tenant names no
    folder of the machine and no variable that would make the listed command another program (``PATH``) or
    load code into it (``LD_PRELOAD``). Checked when a server is added and again before each start (a
    server stored before the operator narrowed the setting starts no more)."""
    if "*" in stdio_commands:
        return
    if not stdio_commands:
        raise PermissionDenied(
            f"{op}: this node starts no stdio MCP programs for its tenants (a program would run on the "
            f"node's machine, outside the sandbox); use the http transport, or ask the node's operator "
            f"to allow the program with {STDIO_SETTING}",
            op=op,
            field="command",
        )
    if command not in stdio_commands:
        raise PermissionDenied(
            f"{op}: this node does not allow starting {command!r} (allowed: {', '.join(stdio_commands)}; "
            f"set by {STDIO_SETTING})",
            op=op,
            field="command",
        )
    if cwd:
        raise PermissionDenied(
            f"{op}: cwd names a folder on the node's machine, which a tenant may not choose here "
            f'(the program starts in the node\'s own folder; {STDIO_SETTING} set to ["*"] lifts this)',
            op=op,
            field="cwd",
        )
    for name in env:
        if _LOADER_ENV.match(name):
            raise PermissionDenied(
                f"{op}: env {name} changes which program runs or what it loads, which a tenant may not set "
                f'here ({STDIO_SETTING} set to ["*"] lifts this)',
                op=op,
                field=f"env.{name}",
            )


def public(record: dict[str, Any]) -> dict[str, Any]:
    """A server record as shown to people: secret-bearing values (env, headers) redacted, names kept."""
    out = dict(record)
    for field in ("env", "headers"):
        if field in out:
            out[field] = {k: REDACTED for k in out[field]}
    return out


def tool_name(server: str, tool: str) -> str:
    """The executor's name for an MCP tool: ``mcp_<server>_<tool>``, within the 64 characters every LLM
    provider accepts (a long one keeps a readable prefix and a hash, so two tools never share a name)."""
    name = f"mcp_{server}_{_TOOL_NAME_CHARS.sub('_', tool)}"
    if len(name) <= 64 and _TOOL_NAME_CHARS.sub("_", tool) == tool:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:10]
    return f"{name[:53]}_{digest}"
