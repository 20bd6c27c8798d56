"""END TO END on the real app tree (``minihermes.app.default_config``, simulated model): a request family
is learned after its first run, and the next request of the family takes fewer LLM iterations because the
agent injects the matched skill. Needs the agent's skill injection (the context helper's prompt assembly)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ManualClock, Node

from .conftest import ACME_USER


async def _active_skills(node: Node) -> list[dict[str, Any]]:
    reply = await node.ask("skill_store", "list_skills", {"status": "active"}, ctx=ACME_USER)
    return list(reply["skills"])


async def test_a_second_request_of_a_learned_family_takes_fewer_iterations(tmp_path: Path) -> None:
    config = default_config(tmp_path / "data")
    for spec in config.tree.walk():
        # Embedding models off (their load takes minutes on a busy machine); test_semantic.py covers fusion.
        if spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
    node = build_agent_node(config, clock=ManualClock())
    await node.start()
    try:
        first = await node.ask(
            "agent",
            "chat",
            {"message": "what is 2+2 and 3*3 and 5-1", "session_id": "s1", "user_id": "bob"},
            ctx=ACME_USER,
        )
        assert first["status"] == "ok" and first["tool_calls"] == 3
        deadline = asyncio.get_running_loop().time() + 30
        while not await _active_skills(node):
            assert asyncio.get_running_loop().time() < deadline, "no skill was learned"
            await asyncio.sleep(0.02)
        [skill] = await _active_skills(node)
        assert skill["provenance"]["session_id"] == "s1" and skill["tools"] == ["calculator"]

        again = await node.ask(
            "agent",
            "chat",
            {"message": "what is 7*6 and 8+1 and 9-2", "session_id": "s2", "user_id": "bob"},
            ctx=ACME_USER,
        )
        assert again["status"] == "ok" and again["tool_calls"] == 3
        assert again["iterations"] < first["iterations"], (first["iterations"], again["iterations"])
        assert "7 x 6 = 42" in again["response"]
        deadline = asyncio.get_running_loop().time() + 10
        while True:  # the agent records the use without waiting
            got = await node.ask("skill_store", "get_skill", {"skill_id": skill["skill_id"]}, ctx=ACME_USER)
            if got["skill"]["uses"] >= 1:
                break
            assert asyncio.get_running_loop().time() < deadline, "the use was not recorded"
            await asyncio.sleep(0.02)
    finally:
        await node.stop(deadline=5)
