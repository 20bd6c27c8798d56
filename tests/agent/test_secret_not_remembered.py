"""A secret asked to be remembered is not silently dropped (issue 24, item 7): the chat message is redacted on
entry, so the model only ever sees "[REDACTED]"; the answer says in words that nothing was stored, why, and
where secrets belong; memory holds no "[REDACTED]" value; and the turn is no success (nothing is learned from
it). Real turns of the offline model on the app's whole tree, through the real LLM gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ActorSpec, ManualClock, Node

from . import scripted_turns as st
from .conftest import ACME, ACME_USER


@pytest.fixture(autouse=True)
def _reset() -> None:
    st.reset()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    config = default_config(tmp_path / "data")  # the simulated provider: the tenant's default model
    for spec in config.tree.walk():
        if spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
    config.tree.children.append(ActorSpec("turn_log", st.TurnLog, per_tenant=True))
    started = build_agent_node(config, clock=ManualClock())
    await started.start()
    yield started
    await started.stop(deadline=5)


async def chat(node: Node, message: str, session: str = "s1") -> str:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER
    )
    while reply.get("status") == "paused":  # a write after outside content: an admin approves it
        decided = await node.ask("guardrails", "approve", {"approval_id": reply["approval_id"]}, ctx=ACME)
        reply = decided["turn"]
    assert reply["status"] == "ok", reply
    return str(reply["response"])


async def every_memory(node: Node) -> list[dict[str, Any]]:
    await node.ask("turn_log", "count", {}, ctx=ACME_USER)  # memory got its casts before turn_log's
    got = await node.ask("memory", "list_memories", {"include_episodes": True}, ctx=ACME_USER)
    return list(got["memories"])


async def test_a_password_asked_to_be_remembered_is_not_stored_and_the_answer_says_so(node: Node) -> None:
    answer = await chat(node, "remember the wifi password is hunter2")
    assert answer.startswith("I can't remember the wifi password"), answer
    assert "nothing was stored" in answer and "secret" in answer
    assert "credential vault" in answer  # where secrets belong
    assert "hunter2" not in answer and "[REDACTED]" not in answer
    recalled = await node.ask("memory", "recall_memory", {"key": "wifi password"}, ctx=ACME_USER)
    assert recalled["found"] is False
    assert all("[REDACTED]" not in str(m.get("value")) for m in await every_memory(node))
    [record] = st.RECORDS
    assert record["success"] is False and "could not do the request" in record["fell_short"]

    # Asking for it afterwards finds nothing: nothing was kept under the key, not even the placeholder.
    later = await chat(node, "what is the wifi password?")
    assert "[REDACTED]" not in later and "hunter2" not in later


async def test_a_secret_that_reaches_memory_store_from_a_tool_result_is_refused_in_words(node: Node) -> None:
    """The file's content comes back redacted; the model passes it on, the tool refuses (secret_not_stored),
    and the answer says why instead of quoting the error."""
    await node.ask(
        "tool_executor",
        "execute",
        {
            "name": "write_file",
            "input": {"path": "router.txt", "content": "password: hunter2"},
            "session_id": "s1",
        },
        ctx=ACME_USER,
    )
    answer = await chat(node, "read router.txt and remember the result as router")
    assert answer.startswith("I can't remember router: the value held a secret"), answer
    assert "nothing was stored" in answer and "secret_not_stored" not in answer and '{"error"' not in answer
    recalled = await node.ask("memory", "recall_memory", {"key": "router"}, ctx=ACME_USER)
    assert recalled["found"] is False
    assert all("[REDACTED]" not in str(m.get("value")) for m in await every_memory(node))
    [record] = st.RECORDS
    assert record["success"] is False and "memory_store" in record["fell_short"]


async def test_an_ordinary_fact_is_still_remembered(node: Node) -> None:
    answer = await chat(node, "remember the wifi name is HomeNet")
    assert answer == "Got it. I'll remember that the wifi name is HomeNet."
    recalled = await node.ask("memory", "recall_memory", {"key": "wifi name"}, ctx=ACME_USER)
    assert recalled["value"] == "HomeNet"
