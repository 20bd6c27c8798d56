"""``delegate_task``: short-lived delegation to a child agent session, as an LLM tool.

The parent's tool call starts a turn in a fresh child session with its own iteration budget, a time budget
and only the tools of the named toolsets, and returns the child's final answer as the summary. The parent is
never left hanging: a child that times out, crashes or fails comes back as a tool error the parent's LLM
reads. Each child session is recorded with its depth (``delegation:<session>`` in KV), so a child's own
``delegate_task`` knows how deep it is; at ``MAX_DEPTH`` the tool refuses and children at the last level
are not offered it at all. The child's message is the goal (then the context given with it); what a
sub-agent is for (``CHILD_PROMPT``) goes with it as the turn's ``instructions``, in its system prompt.

A record keeps the goal (a day) and the caller (``owner``): forgetting a user deletes the records they made,
forgetting a session those of its children (``forget_delegations``, asked through ``task_queue``'s
``forget_subject``). The child sessions themselves are the caller's sessions, forgotten with them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from minihermes.context.forget import Subject, may_forget, session_owner
from minihermes.runtime import ActorCrashed, ActorError, AskTimeout, Host, current_context
from minihermes.tools.catalog import Toolset
from minihermes.tools.contract import MUTATING, ON_REQUEST, TRUSTED, Tool, ToolEnv, ToolFailure

from ._turns import agent_supports, chat_payload

MAX_DEPTH = 2
CHILD_ITERATIONS = 6
CHILD_TIMEOUT = 100.0
"""Seconds a child may take. The tool executor's timeout for this tool is set a little above it, and the
agent waits 120 s for a tool (its ``tool_timeout``), so the child's own budget is what ends a slow child,
with an error that says so."""
RECORD_TTL = 86400.0
PREFIX = "delegation:"
DEFAULT_TOOLSETS = ("compute", "memory", "files")
_NAMED = "compute, memory, files, web, terminal, kanban, delegation"
"""The toolsets the tool's description names (a child may be given any toolset of the tool executor)."""
CHILD_PROMPT = (
    "You are a sub-agent working on one delegated goal for another agent. Work only on this goal, with the "
    "tools you have. End with a concise summary of what you found or did; the other agent reads only that."
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "goal": {
            "type": "string",
            "minLength": 1,
            "maxLength": 4000,
            "description": "What the child must do",
        },
        "context": {"type": "string", "maxLength": 20000, "description": "What the child needs to know"},
        "toolsets": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 64},
            "maxItems": 20,
            "description": f"Tool groups ({_NAMED}) or tool names; default compute, memory, files",
        },
    },
    "required": ["goal"],
    "additionalProperties": False,
}


def expand_toolsets(names: list[str], depth: int, toolsets: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Tool names for a child at ``depth``, from the executor's ``toolsets`` (name -> tool names) and single
    built-in tool names; ``delegate_task`` only while a further level is allowed."""
    tools: list[str] = []
    for name in names or DEFAULT_TOOLSETS:
        group = toolsets.get(name)
        if group is None and not any(name in g for g in toolsets.values()):
            known = ", ".join(toolsets)
            raise ToolFailure("invalid_input", f"unknown toolset or tool '{name}' (toolsets: {known})")
        tools.extend(group or (name,))
    if depth >= MAX_DEPTH:
        tools = [t for t in tools if t != "delegate_task"]
    return sorted(set(tools))


async def delegate_task(args: dict[str, Any], env: ToolEnv) -> Any:
    if not env.session_id:
        raise ToolFailure("session_required", "delegate_task runs from an agent session")
    if not agent_supports(env.host, "max_iterations", "allowed_tools", "delegation_depth"):
        raise ToolFailure("unavailable", "this agent cannot restrict a child's tools and budget")
    parent = await env.host.kv.get(f"{PREFIX}{env.session_id}")
    depth = int(parent["depth"]) if isinstance(parent, dict) else 0
    if depth >= MAX_DEPTH:
        raise ToolFailure("depth_exceeded", f"delegation is limited to {MAX_DEPTH} levels")
    child_depth = depth + 1
    tools = expand_toolsets(list(args.get("toolsets") or []), child_depth, env.toolsets)
    child = f"delegate:{uuid.uuid4().hex[:16]}"
    record = {
        "parent": env.session_id,
        "depth": child_depth,
        "goal": args["goal"][:500],
        "tools": tools,
        "owner": current_context().principal,
    }
    await env.host.kv.put(f"{PREFIX}{child}", record, ttl=RECORD_TTL)
    extra: dict[str, Any] = {
        "max_iterations": CHILD_ITERATIONS,
        "allowed_tools": tools,
        "delegation_depth": child_depth,
    }
    if agent_supports(env.host, "instructions"):  # the goal is the request; the terms go to the system prompt
        message = str(args["goal"])
        extra["instructions"] = CHILD_PROMPT
    else:  # an agent without turn instructions: the terms travel in the message, as before
        message = f"{CHILD_PROMPT}\n\nGoal: {args['goal']}"
    if args.get("context"):
        message += f"\n\nContext:\n{args['context']}"
    try:
        reply = await env.host.ask(
            "agent", "chat", chat_payload(env.host, message, child, "", extra), timeout=CHILD_TIMEOUT
        )
    except AskTimeout:
        raise ToolFailure(
            "child_timeout", f"the sub-agent did not finish within {CHILD_TIMEOUT:g}s", child_session=child
        ) from None
    except ActorCrashed as e:
        raise ToolFailure(
            "child_crashed", f"the sub-agent crashed: {e.message}", child_session=child
        ) from None
    except ActorError as e:
        raise ToolFailure("child_failed", f"{e.code}: {e.message}", child_session=child) from None
    return {
        "summary": str(reply.get("response") or ""),
        "status": reply.get("status"),
        "child_session": child,
        "depth": child_depth,
        "iterations": reply.get("iterations"),
        "tool_calls": reply.get("tool_calls"),
    }


async def forget_delegations(host: Host, who: Subject) -> int:
    """Delete the delegation records of a user (those they made), of a session (its children's, and its own
    if it is a child) or of the tenant, those the caller may forget; returns how many. A record from before
    records kept their owner belongs to its parent session's owner."""
    gone = 0
    for key, record in await host.kv.list(PREFIX):
        if not isinstance(record, dict):
            continue
        parent = str(record.get("parent") or "")
        owner = str(record.get("owner") or "") or await session_owner(host, parent) or ""
        if who.session_id:
            named = who.session_id in (parent, key.removeprefix(PREFIX)) and may_forget(owner)
        else:
            named = who.tenant or owner == who.user_id
        if named:
            gone += await host.kv.delete(key)
    return gone


DELEGATION_TOOLSET = Toolset(
    "delegation",
    [
        Tool(
            "delegate_task",
            "Delegate a self-contained sub-task to a sub-agent with a restricted tool set; returns its summary.",
            SCHEMA,
            MUTATING,
            TRUSTED,
            handler=delegate_task,
            requires="agent",
            permission=("agent", "chat"),  # a child turn, as the caller
            timeout=CHILD_TIMEOUT + 10,
        )
    ],
    offered=ON_REQUEST,
    intents=[r"\bdelegat|\bsub-?agents?\b"],
    purpose="hand tasks to sub-agents",
)
