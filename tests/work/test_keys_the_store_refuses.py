"""Ids and names the store cannot key on (a NUL, 5000 characters) are a structured 4xx from the op, not a
crash: each of these reached the store's own checks (a ValueError, ``actor_crashed``, HTTP 500) until the
OpenAPI fuzz sweep of issue 17 found it (``tests/api/test_openapi_fuzz.py`` runs the same values over HTTP)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from minihermes.runtime import ActorError, InvalidArgument, Node
from minihermes.work._cronstore import check_job_id

from .conftest import ACME

LONG = "a" * 5000


@pytest.mark.parametrize(
    ("actor", "op", "payload", "code", "field"),
    [
        ("llm_gateway", "get_stats", {"cron_job": "\x00"}, "invalid_argument", "cron_job"),
        ("llm_gateway", "get_stats", {"session_id": LONG}, "invalid_argument", "session_id"),
        (
            "llm_gateway",
            "set_budget",
            {"scope": "user", "key": "a\x00b", "max_tokens": 1},
            "invalid_argument",
            "key",
        ),
        ("skill_tools", "get_tool", {"name": "\x00"}, "not_found", "name"),
        ("skill_tools", "rollback_tool", {"name": LONG, "version": 1}, "not_found", "name"),
        ("session_manager", "list_sessions", {"user_id": LONG}, "invalid_argument", "user_id"),
        # cron: a time zone ZoneInfo reads as a file name too long (OSError), a session that is no actor key
        (
            "cron_scheduler",
            "create_job",
            {"job_id": "a", "prompt": "a", "schedule": "a", "tz": LONG},
            "invalid_argument",
            "tz",
        ),
        (
            "cron_scheduler",
            "create_job",
            {"job_id": "a", "prompt": "a", "schedule": "every 1h", "tz": "Europe"},  # a directory
            "invalid_argument",
            "tz",
        ),
        (
            "cron_scheduler",
            "create_job",
            {"job_id": "a", "prompt": "a", "schedule": "every 1h", "session_id": LONG},
            "invalid_argument",
            "session_id",
        ),
        # goals: the session id is percent-encoded into the goal's key; a goal id is 12 hex digits
        ("goals", "set_goal", {"session_id": LONG, "text": "a"}, "invalid_argument", "session_id"),
        ("goals", "complete_goal", {"goal_id": "a", "session_id": LONG}, "invalid_argument", "session_id"),
        (
            "goals",
            "clear_goal",
            {"session_id": "a\x00b", "goal_id": "a\x00b"},
            "invalid_argument",
            "session_id",
        ),
        ("goals", "complete_goal", {"goal_id": "a\x00b", "session_id": "s"}, "not_found", None),
        ("goals", "list_goals", {"session_id": LONG}, "invalid_argument", "session_id"),
        # memory: user ids (and agent and session ids) name record keys and index patterns
        ("memory", "recall_memory", {"key": "a", "user_id": LONG}, "invalid_argument", "user_id"),
        ("memory", "delete_memory", {"key": "a", "user_id": LONG}, "invalid_argument", "user_id"),
        (
            "memory",
            "list_memories",
            {"scope": "session", "session_id": "\ud800"},
            "invalid_argument",
            "session_id",
        ),
        ("memory", "forget", {"session_id": "a\x00b"}, "invalid_argument", "session_id"),
        (
            "memory",
            "store_memory",  # each part within its limit, too long together once percent-encoded
            {"key": "\U0001f600" * 200, "value": "v", "scope": "session", "session_id": "\U0001f600" * 200},
            "invalid_argument",
            "key",
        ),
        # kanban: card ids are t<n>, so one the store cannot hold names no card
        *[
            ("kanban", op, {"task_id": "\x00", **extra}, "not_found", None)
            for op, extra in [
                ("show", {}),
                ("update", {"title": "a"}),
                ("delete", {}),
                ("assign", {"assignee": "a"}),
                ("move", {"status": "ready"}),
                ("comment", {"text": "a"}),
                ("block", {"reason": "a"}),
                ("unblock", {}),
                ("start", {"worker": "a"}),
                ("heartbeat", {"worker": "a"}),
                ("complete", {"summary": "a"}),
                ("fail", {"worker": "a", "reason": "a"}),
                ("cancel", {}),
                ("archive", {}),
            ]
        ],
        ("kanban", "create", {"title": "a", "depends_on": [LONG]}, "not_found", None),
    ],
)
async def test_a_key_the_store_refuses_is_a_4xx(
    app_node: Callable[..., Awaitable[Node]],
    actor: str,
    op: str,
    payload: dict[str, Any],
    code: str,
    field: str | None,
) -> None:
    node = await app_node()
    with pytest.raises(ActorError) as e:
        await node.ask(actor, op, payload, ctx=ACME)
    assert (e.value.code, e.value.details.get("field")) == (code, field)
    assert e.value.http_status < 500


def test_a_job_id_with_a_trailing_newline_is_refused() -> None:
    check_job_id("daily-report", "create_job")
    with pytest.raises(InvalidArgument):
        check_job_id("a\n", "create_job")  # `$` matches before a final newline; fullmatch does not
