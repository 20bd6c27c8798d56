"""Ids and names the store cannot key on (a NUL, 5000 characters) are a structured 4xx from the op, not a
crash: each of these reached the store's own checks (a ValueError, ``actor_crashed``, HTTP 500) until the
OpenAPI fuzz sweep of issue 17 found it (``tests/api/test_openapi_fuzz.py`` runs the same values over HTTP)."""

from __future__ import annotations

import pytest

from minihermes.runtime import ActorError

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
    ],
)
async def test_a_key_the_store_refuses_is_a_4xx(app_node, actor, op, payload, code, field) -> None:
    node = await app_node()
    with pytest.raises(ActorError) as e:
        await node.ask(actor, op, payload, ctx=ACME)
    assert (e.value.code, e.value.details.get("field")) == (code, field)
    assert e.value.http_status < 500
