"""The core built-in tools, in their toolsets: ``compute`` (calculator), ``memory`` (store, recall, delete,
search), ``web`` (``http_request`` through a service link), ``files`` (the session workspace) and ``terminal``
(a sandboxed shell in it). ``CORE_TOOLSETS`` is what a tool executor offers when it is given no toolsets; the
agent app's composition root adds the subsystems' own (``minihermes/app.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from minihermes.runtime import ActorNotFound

from ._sandbox_types import READONLY_WORKSPACE_DIRS
from .calculator import CalculatorError, calculate
from .catalog import HTTP_METHODS, Toolset
from .contract import (
    MUTATING,
    READ,
    TRUSTED,
    UNTRUSTED,
    ExecutorEnv,
    Permission,
    Tool,
    ToolEnv,
    ToolFailure,
)
from .sandbox import SandboxError, make_workspace, run_sandboxed
from .workspace import Quota, Usage, Workspace, WorkspaceError, workspace_path

_MEMORY_TIMEOUT = 10.0


def _obj(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


_SCOPE = {"type": "string", "enum": ["global", "agent", "session"], "description": "Who may see it"}
_KEY = {"type": "string", "minLength": 1, "maxLength": 200, "description": "Short key, e.g. favourite_colour"}
_PATH = {"type": "string", "minLength": 1, "maxLength": 1024, "description": "Path inside the workspace"}


# ---------------------------------------------------------------------------------------------- workspace


async def _workspace_dir(env: ToolEnv) -> Path:
    if not env.session_id:
        raise ToolFailure(
            "session_required", "file and terminal tools work in a session's workspace: no session"
        )
    if env.workspace_root is None:
        raise ToolFailure("unavailable", "no workspace folder is configured for this node")
    path = workspace_path(env.workspace_root, env.tenant, env.namespace, env.session_id)
    return await asyncio.to_thread(make_workspace, path, env.sandbox_policy)


def _quota(env: ToolEnv) -> Quota:
    """The session workspace's quota: the terminal's limits (``workspace_bytes``, ``workspace_files``)."""
    return Quota(env.terminal_limits.workspace_bytes, env.terminal_limits.workspace_files)


def _readonly_dirs(env: ToolEnv) -> tuple[str, ...]:
    """The workspace folders the file tools do not write: those the sandbox mounts read-only (``skills/``)."""
    policy = env.sandbox_policy
    return policy.readonly_workspace_dirs if policy is not None else READONLY_WORKSPACE_DIRS


async def _in_workspace(env: ToolEnv, op: Callable[[Workspace], Any]) -> Any:
    folder = await _workspace_dir(env)

    def run() -> Any:
        return op(Workspace(folder, quota=_quota(env), readonly_dirs=_readonly_dirs(env)))

    try:
        return await asyncio.to_thread(run)
    except WorkspaceError as e:
        raise ToolFailure(e.code, e.message, **e.details) from None


# ---------------------------------------------------------------------------------------------- handlers


def calculate_now(args: dict[str, Any]) -> dict[str, Any]:
    """The calculator is bounded and in-process: the executor runs it without a task of its own."""
    try:
        return calculate(args["expression"]).to_dict()
    except CalculatorError as e:
        raise ToolFailure(e.code, e.message) from None


async def _calculator(args: dict[str, Any], env: ToolEnv) -> Any:
    return calculate_now(args)


async def _memory(env: ToolEnv, op: str, payload: dict[str, Any]) -> Any:
    try:
        return await env.host.ask("memory", op, payload, timeout=_MEMORY_TIMEOUT)
    except ActorNotFound:
        raise ToolFailure("unavailable", "memory is not available on this node") from None


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


_MAX_TTL_SECONDS = 100 * 365 * 86_400
"""``memory.MAX_TTL_SECONDS`` (tools sit below the agent package: the memory actor checks it again)."""
_REDACTED = "[REDACTED]"
"""What ``minihermes/context/redact.py`` puts where a secret was: a chat message is redacted on entry, so a
model asked to remember a password sees this, never the password."""
_SECRETS_BELONG = (
    "secrets are kept out of memory, chat history and logs: keep a password in a password manager; an API key "
    "for a model or a service belongs in the credential vault (an admin registers it on the dashboard's "
    "Providers page or with llm_gateway register_credential)"
)


def _refuse_secret(key: str, value: str) -> None:
    """A value that is or holds the redaction placeholder would be stored as the placeholder: the person
    would believe their secret was kept when nothing of it was. Refused, with why and where it belongs."""
    if _REDACTED in value or _REDACTED in key:
        raise ToolFailure(
            "secret_not_stored",
            f"not stored: the value for '{key}' was a secret, redacted to {_REDACTED} before the "
            f"model saw it, so there is nothing true to store; {_SECRETS_BELONG}",
            key=key,
        )


async def _memory_store(args: dict[str, Any], env: ToolEnv) -> Any:
    value = _as_text(args["value"])
    _refuse_secret(str(args["key"]), value)
    reply = await _memory(
        env,
        "store_memory",
        {
            "key": args["key"],
            "value": value,
            "scope": args.get("scope", "global"),
            "tier": args.get("tier", "reachable"),
            "agent_id": args.get("agent_id", ""),
            "session_id": env.session_id,
            "ttl_seconds": args.get("ttl_seconds", 0),
        },
    )
    if reply.get("quarantined"):
        # Derived from untrusted content earlier in the turn: held until the user confirms it. Said as it
        # is, so the answer does not claim a memory that is not there yet.
        return {
            "key": reply.get("key"),
            "stored": False,
            "quarantined": True,
            "message": "held for confirmation, not stored yet: this turn read untrusted content (a web "
            "page, a file or a tool result), so the user must confirm it first (the dashboard's Quarantine "
            "page, or `minihermes quarantine`)",
        }
    fields = ("key", "scope", "tier", "created", "expires_at")
    return {k: reply[k] for k in fields if k in reply} | {"stored": True}


async def _memory_recall(args: dict[str, Any], env: ToolEnv) -> Any:
    reply = await _memory(
        env,
        "recall_memory",
        {
            "key": args["key"],
            "scope": args.get("scope", "global"),
            "agent_id": args.get("agent_id", ""),
            "session_id": env.session_id,
            "include_episodes": False,  # a recalled value is a stated fact, never the record of a past turn
        },
    )
    return {k: reply.get(k) for k in ("key", "found", "value", "scope", "tier")}


async def _memory_delete(args: dict[str, Any], env: ToolEnv) -> Any:
    key, scope = str(args["key"]), args.get("scope", "global")
    reply = await _memory(
        env,
        "delete_memory",
        {"key": key, "scope": scope, "agent_id": args.get("agent_id", ""), "session_id": env.session_id},
    )
    if not reply.get("deleted"):
        # Another user's fact under the same key is theirs: the caller has nothing stored there either.
        raise ToolFailure(
            "not_found",
            f"nothing is stored under '{key}' ({scope} scope), so nothing was deleted; "
            "memory_search finds a fact whose exact key is unknown",
            key=key,
            scope=scope,
        )
    return {"key": reply.get("key", key), "scope": reply.get("scope", scope), "deleted": True}


async def _memory_search(args: dict[str, Any], env: ToolEnv) -> Any:
    reply = await _memory(
        env,
        "search_memories",
        {
            "query": args["query"],
            "limit": args.get("limit", 5),
            "session_id": env.session_id,
            "include_episodes": bool(args.get("include_episodes", False)),
        },
    )
    fields = (
        ("key", "value", "scope", "score", "kind")
        if args.get("include_episodes")
        else ("key", "value", "scope", "score")
    )
    found = [{k: m.get(k) for k in fields} for m in reply.get("memories", [])]
    return {"memories": found, "count": len(found)}


async def _http_request(args: dict[str, Any], env: ToolEnv) -> Any:
    method = str(args.get("method") or "GET").upper()
    reply: dict[str, Any] = await env.host.http_fetch(
        args["link"], method, args["path"], json=args.get("json"), params=args.get("params")
    )
    return reply


def _http_permission(args: dict[str, Any]) -> Permission:
    return "read" if str(args.get("method") or "GET").upper() == "GET" else "write"


def _http_effects(args: dict[str, Any]) -> str:
    return READ if str(args.get("method") or "GET").upper() == "GET" else MUTATING


TERMINAL_GRACE = 15.0
"""The terminal tool's timeout is its sandbox wall clock plus this (the sandbox kills first)."""


def _terminal_timeout(executor: ExecutorEnv) -> float:
    return executor.terminal_limits.wall_seconds + TERMINAL_GRACE


async def _read_file(args: dict[str, Any], env: ToolEnv) -> Any:
    def op(ws: Workspace) -> Any:
        got = ws.read_file(args["path"], max_bytes=args.get("max_bytes"))
        return {"path": got.path, "content": got.content, "size": got.size}

    return await _in_workspace(env, op)


async def _write_file(args: dict[str, Any], env: ToolEnv) -> Any:
    def op(ws: Workspace) -> Any:
        done = ws.write_file(args["path"], args["content"], overwrite=args.get("overwrite", True))
        return {"path": done.path, "size": done.size, "created": done.created}

    return await _in_workspace(env, op)


async def _list_files(args: dict[str, Any], env: ToolEnv) -> Any:
    def op(ws: Workspace) -> Any:
        listing = ws.list_files(args.get("path") or ".", recursive=args.get("recursive", False))
        entries = [{"path": e.path, "type": e.type, "size": e.size} for e in listing.entries]
        return {"entries": entries, "count": len(entries), "truncated": listing.truncated}

    return await _in_workspace(env, op)


async def _terminal(args: dict[str, Any], env: ToolEnv) -> Any:
    folder = await _workspace_dir(env)
    limits = env.terminal_limits
    wanted = args.get("timeout")
    if wanted is not None and wanted < limits.wall_seconds:
        limits = dataclasses.replace(limits, wall_seconds=float(wanted))
    try:
        result = await run_sandboxed(
            ["/bin/sh", "-c", args["command"]], folder, limits, policy=env.sandbox_policy
        )
    except SandboxError as e:
        raise ToolFailure("sandbox_error", e.message) from None
    out = {
        "exit_code": result.exit_code,
        "stdout": result.stdout_text,
        "stderr": result.stderr_text,
        "timed_out": result.timed_out,
        "killed_reason": result.killed_reason,
        "truncated": result.truncated,
        "duration": round(result.duration, 3),
    }
    if result.quota_exceeded:
        # The command took the workspace over its quota (or was stopped trying): a failure, with what it
        # printed, so the LLM sees both and can free space.
        quota = _quota(env)
        usage = Usage(result.workspace_bytes or 0, result.workspace_files or 0)
        stopped = result.killed_reason in ("workspace_quota", "file_size_limit")
        what = "the command was stopped: it took" if stopped else "the command took"
        error = quota.exceeded(usage, f"{what} the session workspace to")
        raise ToolFailure(error.code, error.message, **error.details, **out)
    return out


# ---------------------------------------------------------------------------------------------- toolsets

COMPUTE = Toolset(
    "compute",
    [
        Tool(
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
            handler=_calculator,
            inline=calculate_now,  # bounded and in-process: no task, no timer
            permission="read",
        ),
    ],
    purpose="arithmetic",
)

MEMORY = Toolset(
    "memory",
    [
        Tool(
            "memory_store",
            "Remember a fact under a short key for later conversations (e.g. favourite_colour = teal). "
            "Tier core is shown in every conversation; reachable is recalled on demand; deep is archival. "
            "ttl_seconds: forget it that many seconds from now (e.g. 86400 for a day); omitted or 0, the "
            "default for facts (kept until changed, unless the operator set one); -1, never.",
            _obj(
                {
                    "key": _KEY,
                    "value": {"type": ["string", "number", "boolean"], "description": "The fact to remember"},
                    "scope": _SCOPE,
                    "tier": {"type": "string", "enum": ["core", "reachable", "deep"]},
                    "agent_id": {"type": "string", "maxLength": 200},
                    "ttl_seconds": {"type": "integer", "minimum": -1, "maximum": _MAX_TTL_SECONDS},
                },
                ["key", "value"],
            ),
            MUTATING,
            TRUSTED,
            handler=_memory_store,
            permission=("memory", "store_memory"),
        ),
        Tool(
            "memory_recall",
            "Recall a remembered fact by its exact key.",
            _obj({"key": _KEY, "scope": _SCOPE, "agent_id": {"type": "string", "maxLength": 200}}, ["key"]),
            READ,
            TRUSTED,
            handler=_memory_recall,
            permission=("memory", "recall_memory"),
        ),
        Tool(
            "memory_delete",
            "Forget a remembered fact by its exact key (e.g. when asked to forget the dog's name). Deletes "
            "only the caller's own fact; not_found when nothing is stored under the key.",
            _obj({"key": _KEY, "scope": _SCOPE, "agent_id": {"type": "string", "maxLength": 200}}, ["key"]),
            MUTATING,
            TRUSTED,
            handler=_memory_delete,
            permission=("memory", "delete_memory"),
        ),
        Tool(
            "memory_search",
            "Search remembered facts by words (best matches first). Use it when the exact key is unknown. "
            "Records of past turns (episodes) are left out unless include_episodes is true.",
            _obj(
                {
                    "query": {"type": "string", "minLength": 1, "maxLength": 500},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                    "include_episodes": {"type": "boolean"},
                },
                ["query"],
            ),
            READ,
            TRUSTED,
            handler=_memory_search,
            permission=("memory", "search_memories"),
        ),
    ],
    purpose="remember and recall facts",
)

WEB = Toolset(
    "web",
    [
        Tool(
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
            MUTATING,  # at most; per call a GET is a read
            UNTRUSTED,
            handler=_http_request,
            review=True,
            permission=_http_permission,  # through a link the admin configured: a GET reads
            effects_of=_http_effects,
        ),
    ],
    purpose="HTTP requests to service links",
)

FILES = Toolset(
    "files",
    [
        Tool(
            "read_file",
            "Read a text file from this session's workspace folder.",
            _obj(
                {"path": _PATH, "max_bytes": {"type": "integer", "minimum": 1, "maximum": 1024 * 1024}},
                ["path"],
            ),
            READ,
            UNTRUSTED,
            handler=_read_file,
            permission="read",  # the caller's own session workspace
        ),
        Tool(
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
            handler=_write_file,
            review=True,
            permission="write",
        ),
        Tool(
            "list_files",
            "List the files of a folder in this session's workspace.",
            _obj({"path": {**_PATH, "minLength": 0}, "recursive": {"type": "boolean"}}),
            READ,
            UNTRUSTED,
            handler=_list_files,
            permission="read",
        ),
    ],
    purpose="this chat's files",
)

TERMINAL = Toolset(
    "terminal",
    [
        Tool(
            "terminal",
            "Run a shell command in an isolated sandbox whose only writable folder is this session's "
            "workspace (no network, limited CPU, memory and time). Returns exit code, stdout and stderr.",
            _obj(
                {
                    "command": {"type": "string", "minLength": 1, "maxLength": 10_000},
                    "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
                },
                ["command"],
            ),
            MUTATING,
            UNTRUSTED,
            handler=_terminal,
            review=True,
            permission="write",  # a sandbox whose only writable folder is the caller's session workspace
            timeout=_terminal_timeout,
        ),
    ],
    purpose="run commands in a sandbox",
)

CORE_TOOLSETS: tuple[Toolset, ...] = (COMPUTE, MEMORY, WEB, FILES, TERMINAL)
"""What a tool executor offers when its config names no toolsets."""

__all__ = [
    "COMPUTE",
    "CORE_TOOLSETS",
    "FILES",
    "MEMORY",
    "TERMINAL",
    "TERMINAL_GRACE",
    "WEB",
    "calculate_now",
]
