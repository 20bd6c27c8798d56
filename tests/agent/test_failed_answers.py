"""Issue 24: after a failed or denied call, the offline model's answer says in words what happened and what
to do next, never raw JSON nor "check the request and try again"; the denied call's result names the tool
and what it was about; and such a turn is still no success (``minihermes.context.consistency``). Real turns
on the app's whole tree with the offline model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import Node

from . import scripted_turns as st
from .conftest import ACME, ACME_USER


@pytest.fixture(autouse=True)
def _reset() -> None:
    st.reset()


async def _chat(node: Node, message: str, session: str) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER
    )
    return reply


async def _records(node: Node) -> list[dict[str, Any]]:
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # every record cast before it is in
    return list(st.RECORDS)


def _in_words(answer: str) -> None:
    assert "{" not in answer and '"code"' not in answer, answer
    assert "check the request and try again" not in answer, answer


async def test_reading_a_missing_file_says_it_does_not_exist(tmp_path: Path) -> None:
    node = await st.app_node(tmp_path / "data")
    try:
        reply = await _chat(node, "read packing.txt", "missing")
        assert reply["status"] == "ok" and reply["tool_calls"] == 1
        answer = reply["response"]
        assert answer.startswith("I couldn't read packing.txt: packing.txt does not exist."), answer
        assert "list the files" in answer  # what to do next
        _in_words(answer)
        [record] = await _records(node)
        assert not record["success"] and "read_file" in record["fell_short"]
    finally:
        await node.stop(deadline=5)


async def test_a_denied_write_says_a_reviewer_denied_it_and_nothing_changed(tmp_path: Path) -> None:
    node = await st.app_node(tmp_path / "data")
    try:
        paused = await _chat(node, "write 'renew insurance' to todo.txt", "denied")
        assert paused["status"] == "paused" and paused["pending_tool"]["name"] == "write_file", paused
        decided = await node.ask("guardrails", "deny", {"approval_id": paused["approval_id"]}, ctx=ACME)
        answer = decided["turn"]["response"]
        assert answer.startswith("I couldn't write todo.txt: a reviewer denied it, so nothing was changed.")
        assert "reviewer approve" in answer  # what to do next
        _in_words(answer)
        history = await node.ask("agent", "get_history", {"session_id": "denied"}, ctx=ACME_USER)
        [result] = [m for m in history["messages"] if m["role"] == "tool"]
        error = json.loads(result["content"])["error"]
        assert error == {
            "code": "denied",
            "reason": "reviewer",
            "message": "a reviewer denied write_file (todo.txt): nothing was done",
        }
        [record] = await _records(node)
        assert not record["success"] and "write_file" in record["fell_short"]
        files = await node.ask(
            "tool_executor", "execute", {"name": "list_files", "session_id": "denied"}, ctx=ACME
        )
        assert files["status"] == "ok" and "todo.txt" not in json.dumps(files), files
    finally:
        await node.stop(deadline=5)
