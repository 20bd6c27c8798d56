"""Issue 27, "stop a turn": ``agent.cancel_turn`` stops a running turn whose tool sleeps in the sandbox (its
process is killed), a turn waiting in the LLM call, and a turn paused for approval (its approval withdrawn);
the turn is recorded ``cancelled`` with its final event, the next turn's model reads that it was stopped,
nothing is learned or remembered from it, and another user cannot stop it. Real turns on the app tree with a
scripted model (``scripted_turns``); the restart after a SIGKILL is in tests/api/test_cancel_served.py's
sibling, ``test_cancel_served.py``."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import STOPPED_NOTE
from minihermes.runtime import Conflict, Node, PermissionDenied, RequestContext

from . import scripted_turns as st
from .conftest import ACME, ACME_USER

CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))


def sleeping(marker: str) -> list[int]:
    """The pids of running processes whose command line holds ``marker`` (a zombie's is empty)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline and cmdline.startswith(b"sleep"):
            found.append(int(entry))
    return found


async def until(check: Any, timeout: float) -> None:
    """Poll ``check`` (the process table has no event to wait on) until true, failing after ``timeout``."""
    async with asyncio.timeout(timeout):
        while not check():  # noqa: ASYNC110 - the process table has no event
            await asyncio.sleep(0.01)


def sleep_command() -> tuple[str, str]:
    """A ``sleep 30.<digits>`` command, and its argument: unique, to find this test's process only."""
    arg = f"30.{uuid.uuid4().int % 10**9:09d}"
    return f"sleep {arg}", arg


@pytest.fixture(autouse=True)
def _reset() -> None:
    st.reset()


@pytest.fixture
async def node(tmp_path: Path) -> Any:
    node = await st.app_node(tmp_path / "data")
    try:
        yield node
    finally:
        await node.stop(deadline=5)


async def chat(node: Node, session: str, message: str, ctx: RequestContext = ACME_USER) -> Any:
    return await node.ask("agent", "chat", {"message": message, "session_id": session}, ctx=ctx)


async def nothing_learned(node: Node) -> None:
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # every turn_completed cast before it is in
    assert st.RECORDS == []
    got = await node.ask("memory", "list_memories", {"kind": "episodic"}, ctx=ACME_USER)
    assert got["memories"] == []
    skills = await node.ask("skill_store", "list_skills", {}, ctx=ACME)
    assert skills["skills"] == []


async def test_cancel_turn_kills_the_sandboxed_tool_and_records_the_turn_cancelled(node: Node) -> None:
    await node.ask("guardrails", "set_policy", {"tool_name": "terminal", "decision": "allow"}, ctx=ACME)
    command, marker = sleep_command()
    st.script("stop-1", st.calls(("terminal", {"command": command})), st.answer("slept"))
    events = node.subscribe("session:stop-1", ctx=ACME_USER)
    turn = asyncio.ensure_future(chat(node, "stop-1", "sleep for a while in the terminal"))
    await until(lambda: bool(sleeping(marker)) or turn.done(), 30)
    assert not turn.done(), turn.result()
    pids = sleeping(marker)

    # Another user cannot stop it; the turn goes on.
    with pytest.raises(PermissionDenied):
        await node.ask("agent", "cancel_turn", {"session_id": "stop-1"}, ctx=CAROL)
    assert sleeping(marker) == pids and not turn.done()

    stopped = await asyncio.wait_for(
        node.ask("agent", "cancel_turn", {"session_id": "stop-1"}, ctx=ACME_USER), 10
    )
    await until(lambda: not sleeping(marker), 1)
    assert stopped["cancelled"] is True and stopped["reply"]["status"] == "cancelled"
    reply = await asyncio.wait_for(turn, 5)
    assert reply["status"] == "cancelled" and reply["turn_id"] == stopped["turn_id"]
    assert reply["cancelled_by"] == "bob"

    last = await node.ask("agent", "last_turn", {"session_id": "stop-1"}, ctx=ACME_USER)
    assert last["status"] == "cancelled"
    stats = await node.ask("agent", "get_stats", {"session_id": "stop-1"}, ctx=ACME_USER)
    assert stats["turn_in_progress"] is False
    history = (await node.ask("agent", "get_history", {"session_id": "stop-1"}, ctx=ACME_USER))["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2]["is_error"] and "cancelled" in history[2]["content"]  # what ran, and how it ended
    assert history[3]["content"] == STOPPED_NOTE

    finals = []
    while (event := events.get_nowait()) is not None:
        if isinstance(event, dict) and event.get("type") == "final":
            finals.append(event["reply"])
    assert [f["status"] for f in finals] == ["cancelled"]
    await nothing_learned(node)

    # A second stop has nothing left to stop; the next turn runs, and its model reads the note.
    again = await node.ask("agent", "cancel_turn", {"session_id": "stop-1"}, ctx=ACME_USER)
    assert again["cancelled"] is False and again["reply"]["status"] == "cancelled"
    st.script("stop-1", st.answer("ok, stopped"))
    assert (await chat(node, "stop-1", "never mind"))["status"] == "ok"
    seen = st.SCRIPTS["stop-1"].requests[0]
    assert any(STOPPED_NOTE in str(m.content) for m in seen.messages)


async def test_cancel_turn_stops_a_turn_waiting_for_the_model(node: Node) -> None:
    st.HOLD["wait-"] = asyncio.Event()  # the model never answers until released
    st.script("wait-1", st.answer("too late"))
    turn = asyncio.ensure_future(chat(node, "wait-1", "think hard"))
    entered = st.ENTERED.setdefault("wait-", asyncio.Event())
    await asyncio.wait_for(entered.wait(), 10)
    # An admin may stop anyone's turn.
    stopped = await asyncio.wait_for(node.ask("agent", "cancel_turn", {"session_id": "wait-1"}, ctx=ACME), 10)
    assert stopped["cancelled"] is True
    reply = await asyncio.wait_for(turn, 5)
    assert reply["status"] == "cancelled" and reply["cancelled_by"] == "alice"
    history = (await node.ask("agent", "get_history", {"session_id": "wait-1"}, ctx=ACME_USER))["messages"]
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "think hard"),
        ("assistant", STOPPED_NOTE),
    ]
    st.HOLD["wait-"].set()
    await nothing_learned(node)


async def test_cancel_turn_withdraws_a_paused_turns_approval(node: Node) -> None:
    command, _ = sleep_command()
    st.script("pause-1", st.calls(("terminal", {"command": command})), st.answer("never"))
    paused = await chat(node, "pause-1", "run it")  # the terminal is reviewed by default
    assert paused["status"] == "paused"
    approval = paused["approval_id"]

    with pytest.raises(PermissionDenied):
        await node.ask("agent", "cancel_turn", {"session_id": "pause-1"}, ctx=CAROL)
    stopped = await node.ask("agent", "cancel_turn", {"session_id": "pause-1"}, ctx=ACME_USER)
    assert stopped["cancelled"] is True and stopped["turn_id"] == paused["turn_id"]
    record = await node.ask("guardrails", "get_approval", {"approval_id": approval}, ctx=ACME)
    assert record["status"] == "withdrawn"
    with pytest.raises(Conflict):  # approving it now resumes nothing
        await node.ask("guardrails", "approve", {"approval_id": approval}, ctx=ACME)
    history = (await node.ask("agent", "get_history", {"session_id": "pause-1"}, ctx=ACME_USER))["messages"]
    assert history[-1]["content"] == STOPPED_NOTE and "cancelled" in history[-2]["content"]
    last = await node.ask("agent", "last_turn", {"session_id": "pause-1"}, ctx=ACME_USER)
    assert last["status"] == "cancelled"
    # The session takes a new message at once.
    st.script("pause-1", st.answer("fine"))
    assert (await chat(node, "pause-1", "something else"))["status"] == "ok"
    assert len(st.RECORDS) == 1 and st.RECORDS[0]["user_message"] == "something else"
