"""The kanban operations as LLM tools (``kanban_create``, ``kanban_show``, ...), listed where ``kanban`` runs.

A worker's claim is named by the session it works in: ``kanban_start``, ``kanban_heartbeat``,
``kanban_complete`` and ``kanban_fail`` default ``worker`` to the calling session, which is how the
kanban worker (``kanban_worker.py``) claims cards for the agent turns it runs.
"""

from __future__ import annotations

from typing import Any

from minihermes.context.toolsets import HELP_INTENT
from minihermes.runtime import ActorError
from minihermes.tools.catalog import Toolset
from minihermes.tools.contract import MUTATING, ON_REQUEST, READ, TRUSTED, Tool, ToolEnv, ToolFailure

_ID = {"type": "string", "minLength": 1, "maxLength": 40, "description": "Task id, e.g. t12"}
_STATUS = {"type": "string", "enum": ["todo", "ready", "in_progress", "blocked", "done", "cancelled"]}
_TEXT = {"type": "string", "minLength": 1, "maxLength": 20000}
_WORKER = {"type": "string", "maxLength": 200, "description": "Claim holder (default: this session)"}
_TTL = {"type": "number", "minimum": 1, "maximum": 86400, "description": "Claim lifetime in seconds"}


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


# op -> (description, schema, effects)
OPS: dict[str, tuple[str, dict[str, Any], str]] = {
    "create": (
        "Create a kanban task; it is ready when every task it depends on is done.",
        _obj(
            {
                "title": {"type": "string", "minLength": 1, "maxLength": 300},
                "body": {"type": "string", "maxLength": 20000},
                "assignee": {"type": "string", "maxLength": 200},
                "depends_on": {"type": "array", "items": _ID, "maxItems": 50},
                "priority": {"type": "integer"},
            },
            ("title",),
        ),
        MUTATING,
    ),
    "show": (
        "Show a task, its events and its dependencies' summaries.",
        _obj({"task_id": _ID}, ("task_id",)),
        READ,
    ),
    "list": (
        "List tasks, optionally by status or assignee.",
        _obj(
            {
                "status": _STATUS,
                "assignee": {"type": "string", "maxLength": 200},
                "include_archived": {"type": "boolean"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            }
        ),
        READ,
    ),
    "update": (
        "Change a task's title, body or priority.",
        _obj(
            {
                "task_id": _ID,
                "title": {"type": "string", "minLength": 1, "maxLength": 300},
                "body": {"type": "string", "maxLength": 20000},
                "priority": {"type": "integer"},
            },
            ("task_id",),
        ),
        MUTATING,
    ),
    "delete": ("Delete a task nothing depends on.", _obj({"task_id": _ID}, ("task_id",)), MUTATING),
    "assign": (
        "Assign a task.",
        _obj({"task_id": _ID, "assignee": {"type": "string", "maxLength": 200}}, ("task_id", "assignee")),
        MUTATING,
    ),
    "move": (
        "Move a task to a status column.",
        _obj({"task_id": _ID, "status": _STATUS}, ("task_id", "status")),
        MUTATING,
    ),
    "comment": ("Comment on a task.", _obj({"task_id": _ID, "text": _TEXT}, ("task_id", "text")), MUTATING),
    "block": (
        "Block a task you are stuck on, with the reason.",
        _obj({"task_id": _ID, "reason": _TEXT}, ("task_id", "reason")),
        MUTATING,
    ),
    "unblock": ("Unblock a task.", _obj({"task_id": _ID}, ("task_id",)), MUTATING),
    "start": (
        "Claim a ready task.",
        _obj({"task_id": _ID, "worker": _WORKER, "ttl": _TTL}, ("task_id",)),
        MUTATING,
    ),
    "heartbeat": (
        "Keep your claim on a task alive.",
        _obj({"task_id": _ID, "worker": _WORKER, "ttl": _TTL}, ("task_id",)),
        MUTATING,
    ),
    "complete": (
        "Complete a task with a summary the next task can read.",
        _obj(
            {"task_id": _ID, "summary": _TEXT, "metadata": {"type": "object"}, "worker": _WORKER},
            ("task_id", "summary"),
        ),
        MUTATING,
    ),
    "fail": (
        "Give up on your attempt at a task, with the reason.",
        _obj({"task_id": _ID, "reason": _TEXT, "worker": _WORKER}, ("task_id", "reason")),
        MUTATING,
    ),
    "cancel": (
        "Cancel a task.",
        _obj({"task_id": _ID, "reason": {"type": "string", "maxLength": 2000}}, ("task_id",)),
        MUTATING,
    ),
    "archive": ("Archive a done or cancelled task.", _obj({"task_id": _ID}, ("task_id",)), MUTATING),
    "stats": ("Counts of tasks per status.", _obj({}), READ),
}
_CLAIMED = frozenset({"start", "heartbeat", "complete", "fail"})


def _handler(op: str) -> Any:
    async def run(args: dict[str, Any], env: ToolEnv) -> Any:
        payload = dict(args)
        if op in _CLAIMED and not payload.get("worker"):
            if op == "complete" and not env.session_id:
                payload.pop("worker", None)
            else:
                payload["worker"] = env.session_id or "agent"
        try:
            reply: dict[str, Any] = await env.host.ask("kanban", op, payload, timeout=30)
        except ActorError as e:
            raise ToolFailure(e.code, e.message) from None
        reply.pop("status", None)
        return reply

    return run


KANBAN_TOOLSET = Toolset(
    "kanban",
    [
        # A call needs exactly what kanban.<op> needs over HTTP (minihermes.permissions).
        Tool(
            f"kanban_{op}",
            description,
            schema,
            effects,
            TRUSTED,
            handler=_handler(op),
            requires="kanban",
            permission=("kanban", op),
        )
        for op, (description, schema, effects) in OPS.items()
    ],
    offered=ON_REQUEST,
    intents=[
        r"\bkanban|\bcards?\b|\bboards?\b|\bto-?do(?:s|\s+list)?\b(?!\.)|\bto\s+do\s+list\b",
        HELP_INTENT,
    ],
    purpose="to-do list, task cards",
)
