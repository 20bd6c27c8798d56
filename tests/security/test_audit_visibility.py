"""The audit trail shows nobody what they could not read where it lives (issue 23, hole 6).

A viewer read users' private memory values through ``tool_executed`` events (the tool's input is recorded).
Now a viewer gets another principal's events redacted (type, time, principal, session and outcome only), a
user gets only their own events, and an admin still gets every event whole, on ``query_events`` and
``poll_events`` alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minihermes.audit import shown_to
from minihermes.runtime import RequestContext

from .world import CANARIES, World, context, world

ALICE_VALUE = "alice-diagnosis-QZXJ7"
BOB_VALUE = "bob-private-QZXJ8"
SHARED_OUTCOME = set(
    "tool status error_code duration_ms decision mode state service provider scope tier".split()
)
"""The outcome fields a viewer still gets of another principal's event."""


async def _tool(w: World, who: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """A tool call as the agent makes it in ``who``'s turn (the turn's caller's context), in a session of
    theirs (alice's is the world's target session; a memory may name only its writer's sessions)."""
    session = w.targets["session_id"] if who == "alice" else f"{who}-own-session"
    reply = await w.node.ask(
        "tool_executor",
        "execute",
        {"name": name, "input": args, "session_id": session},
        10,
        ctx=context(who),
    )
    assert reply["status"] == "ok", reply
    return dict(reply)


async def _read(w: World, who: str) -> tuple[list[dict[str, Any]], str]:
    """Everything ``who`` reads of the trail, by both ops (a fresh cursor), and the raw reply text."""
    q = await w.op(who, "audit_event", "query_events", {"limit": 1000})
    p = await w.op(who, "audit_event", "poll_events", {"consumer_id": f"{who}-audit", "limit": 1000})
    assert q.status_code == 200 and p.status_code == 200, (q.text, p.text)
    queried, polled = q.json()["events"], p.json()["events"]
    assert [e["seq"] for e in queried] == [e["seq"] for e in polled]
    assert queried == polled
    return queried, q.text + p.text


@pytest.fixture
async def w(tmp_path: Path) -> Any:
    async with world(tmp_path) as w:
        await _tool(w, "alice", "memory_store", {"key": "diagnosis", "value": ALICE_VALUE})
        await _tool(w, "bob", "memory_store", {"key": "bob_note", "value": BOB_VALUE})
        await _tool(w, "vic", "calculator", {"expression": "6 * 7"})
        yield w


async def test_a_viewer_reads_no_private_value_through_the_trail(w: World) -> None:
    events, text = await _read(w, "vic")
    for secret in (ALICE_VALUE, BOB_VALUE, *CANARIES, "diagnosis", "alice_secret", "bob_note"):
        assert secret not in text, secret
    stores = [
        e for e in events if e["event_type"] == "tool_executed" and e["data"].get("tool") == "memory_store"
    ]
    assert {e["principal"] for e in stores} >= {"alice", "bob"}
    for e in stores:  # who did what, when and where, and how it went: yes; with what: no
        assert e["redacted"] is True and e["detail"] == "" and e["hash"] == ""
        assert e["data"]["status"] == "ok" and "input" not in e["data"]
        own = w.targets["session_id"] if e["principal"] == "alice" else f"{e['principal']}-own-session"
        assert e["session_id"] == own and e["ts"] > 0
    for e in events:  # every event type: another principal's content never shows
        if e["principal"] != "vic":
            assert e.get("redacted") is True and e["detail"] == "" and e["hash"] == "", e
            assert set(e["data"]) <= SHARED_OUTCOME, e
    own = [e for e in events if e["principal"] == "vic" and e["event_type"] == "tool_executed"]
    assert own and all("redacted" not in e and e["hash"] for e in own)
    assert "6 * 7" in json.dumps(own)  # a viewer's own input is theirs to read


async def test_a_user_reads_only_their_own_values(w: World) -> None:
    events, text = await _read(w, "bob")
    assert BOB_VALUE in text
    for secret in (ALICE_VALUE, *CANARIES, "diagnosis"):
        assert secret not in text, secret
    assert events and {e["principal"] for e in events} == {"bob"}
    assert not any(e.get("redacted") for e in events)


async def test_an_admin_still_reads_the_whole_trail(w: World) -> None:
    events, text = await _read(w, "ada")
    for value in (ALICE_VALUE, BOB_VALUE):
        assert value in text
    assert not any(e.get("redacted") for e in events)
    assert all(len(e["hash"]) == 64 for e in events)
    assert (await w.ok("vic", "audit_event", "verify", {}))["ok"] is True  # the chain itself is untouched
    # filters still work on redacted events
    only = await w.ok("vic", "audit_event", "query_events", {"event_type": "tool_executed"})
    assert only["count"] >= 3 and all(e["event_type"] == "tool_executed" for e in only["events"])


def test_shown_to_keeps_outcome_names_only() -> None:
    event = {
        "seq": 3,
        "event_type": "tool_executed",
        "detail": "tool=memory_store status=ok",
        "session_id": "s1",
        "data": {
            "tool": "memory_store",
            "status": "ok",
            "input": '{"value": "x"}',
            "tier": "core",
            "scope": "a phrase someone wrote",
            "duration_ms": 1.5,
        },
        "principal": "alice",
        "ts": 1.0,
        "hash": "ab" * 32,
    }
    viewer = RequestContext(tenant="acme", principal="vic", roles=frozenset({"viewer"}))
    shown = shown_to(viewer, event)
    assert shown["data"] == {"tool": "memory_store", "status": "ok", "tier": "core", "duration_ms": 1.5}
    assert (shown["detail"], shown["hash"], shown["redacted"]) == ("", "", True)
    assert event["detail"] and event["hash"]  # a copy: what is stored is not touched
    admin = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
    assert shown_to(admin, event) is event
    assert (
        shown_to(RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"})), event) is event
    )
    # the runtime's events are nobody's own, whatever a credential calls its holder
    posing = RequestContext(tenant="acme", principal="system", roles=frozenset({"viewer"}))
    assert shown_to(posing, event | {"principal": "system"})["redacted"] is True
