"""session_manager: secrets a user types into a session's title or metadata are redacted before they are
stored (issue 23, item 8), as they are in chat history."""

from __future__ import annotations

from typing import Any

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.session_manager import SessionManager, session_title
from minihermes.runtime import ActorSpec, Node

from .conftest import ACME, ACME_USER

KEY = "sk-proj-" + "A1b2C3d4" * 4
SPECS = [
    ActorSpec("audit_event", AuditEvent, per_tenant=True),
    ActorSpec("session_manager", SessionManager, per_tenant=True),
]


async def raw_records(node: Node) -> str:
    """Everything the session manager stored, as text."""
    return str(await node.store.kv.list(ACME.scope, ""))


async def test_a_title_from_the_first_message_is_redacted(make_node: Any) -> None:
    node = await make_node(SPECS)
    hints = {
        "s-1": f"use {KEY} to call the model",
        "s-2": "my password is hunter2222, remember it",
        # Cut at 80 characters, a key cut in half would no longer look like one: redacted before the cut.
        "s-3": "x" * 70 + " " + KEY,
    }
    for sid, hint in hints.items():
        await node.ask(
            "session_manager", "record_turn", {"session_id": sid, "title_hint": hint}, ctx=ACME_USER
        )
    got = await node.ask("session_manager", "list_sessions", {}, ctx=ACME_USER)
    titles = {s["session_id"]: s["title"] for s in got["sessions"]}
    assert titles["s-1"] == "use [REDACTED] to call the model"
    assert titles["s-2"] == "my password is [REDACTED], remember it"
    assert "sk-proj" not in titles["s-3"] and "A1b2C3d4" not in titles["s-3"]
    stored = await raw_records(node)
    assert KEY[:16] not in stored and "hunter2222" not in stored
    assert (await node.ask("session_manager", "list_sessions", {"query": "remember"}, ctx=ACME_USER))[
        "count"
    ] == 1  # the rest of the title still finds the session


async def test_a_title_given_to_a_started_session_is_redacted(make_node: Any) -> None:
    node = await make_node(SPECS)
    made = await node.ask("session_manager", "create_session", {"channel": "web"}, ctx=ACME_USER)
    await node.ask(
        "session_manager",
        "record_turn",
        {"session_id": made["session_id"], "title_hint": f"token: {KEY}"},
        ctx=ACME_USER,
    )
    got = await node.ask("session_manager", "get_session", {"session_id": made["session_id"]}, ctx=ACME_USER)
    assert got["title"] == "token: [REDACTED]"
    assert KEY[:16] not in await raw_records(node)


async def test_metadata_is_redacted_before_it_is_stored(make_node: Any) -> None:
    node = await make_node(SPECS)
    metadata = {
        "note": f"deploy with {KEY}",
        "api_key": "plain-looking-value",
        "nested": {"client_secret": "abcdefgh1234", "items": ["Bearer abcdefghijklmnop12345"]},
        "count": 3,
    }
    made = await node.ask("session_manager", "create_session", {"metadata": metadata}, ctx=ACME_USER)
    expected = {
        "note": "deploy with [REDACTED]",
        "api_key": "[REDACTED]",
        "nested": {"client_secret": "[REDACTED]", "items": ["Bearer [REDACTED]"]},
        "count": 3,
    }
    assert made["metadata"] == expected
    got = await node.ask("session_manager", "get_session", {"session_id": made["session_id"]}, ctx=ACME)
    assert got["metadata"] == expected
    stored = await raw_records(node)
    for secret in (KEY[:16], "plain-looking-value", "abcdefgh1234", "abcdefghijklmnop12345"):
        assert secret not in stored


def test_session_title_redacts_then_cuts() -> None:
    assert session_title(f"\n\n  {KEY} and more") == "[REDACTED] and more"
    assert session_title("nothing secret here") == "nothing secret here"
