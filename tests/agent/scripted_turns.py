"""Real turns on the whole app tree with an LLM a test scripts exactly: the helpers of the truthfulness and
learning tests (tests/agent/test_turn_truthful.py, tests/skills/test_learn_only_success.py).

``TurnGateway`` stands where the LLM gateway is: a session with a script (``SCRIPTS``: a
``ScriptedProvider`` per session) gets its replies in order; every other session (the skill workflow's
extraction and dry-run replays) gets the simulated model. Sessions whose id starts with a prefix in
``HOLD`` wait, after setting ``ENTERED[prefix]``, until the test sets the prefix's event.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from minihermes.agent.gateway.calls import completion_reply, completion_request
from minihermes.app import build_agent_node, default_config
from minihermes.llm import SimulatedProvider
from minihermes.llm._scripted import ScriptedProvider
from minihermes.runtime import ActorSpec, Deferred, GenServer, ManualClock, Node, call, cast, current_context

SCRIPTS: dict[str, ScriptedProvider] = {}
HOLD: dict[str, asyncio.Event] = {}
ENTERED: dict[str, asyncio.Event] = {}
RECORDS: list[dict[str, Any]] = []
"""Every ``turn_completed`` record ``TurnLog`` got, in order."""
_SIMULATED = SimulatedProvider()


def reset() -> None:
    SCRIPTS.clear()
    HOLD.clear()
    ENTERED.clear()
    RECORDS.clear()


def script(session_id: str, *items: dict[str, Any]) -> None:
    SCRIPTS[session_id] = ScriptedProvider(list(items))


def calls(*steps: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A model reply that calls tools."""
    return {
        "content": "",
        "stop_reason": "tool_use",
        "tool_calls": [{"name": name, "input": args} for name, args in steps],
    }


def answer(text: str) -> dict[str, Any]:
    """A model reply that ends the turn."""
    return {"content": text, "stop_reason": "end_turn", "tool_calls": []}


class TurnGateway(GenServer):
    @call
    async def completion(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        session_id: str = "",
        user_id: str = "",
        cron_job: str = "",
        max_tokens: int = 1024,
        temperature: float | None = None,
        cache_prefix_messages: int = 0,
        stream_topic: str = "",
    ) -> Deferred:
        # Answered from a task: a held session must not keep the mailbox from the others.
        request = completion_request(messages, tools or [], max_tokens, temperature, 0)
        return Deferred(self.host.spawn(self._answer(session_id, request)))

    async def _answer(self, session_id: str, request: Any) -> dict[str, Any]:
        for prefix, release in HOLD.items():
            if session_id.startswith(prefix):
                ENTERED.setdefault(prefix, asyncio.Event()).set()
                await release.wait()
        provider = SCRIPTS.get(session_id, _SIMULATED)
        reply = completion_reply(provider.name, "test", await provider.complete(request), None)
        return dict(reply)


class TurnLog(GenServer):
    """A turn listener that keeps what it got."""

    @cast
    def turn_completed(self, **record: Any) -> None:
        RECORDS.append({**record, "_principal": current_context().principal})

    @call
    def count(self) -> int:
        """A barrier: answered after every record cast before it."""
        return len(RECORDS)


async def app_node(data_dir: Path) -> Node:
    """The app's whole tree (``default_config``) with ``TurnGateway`` as the LLM gateway and ``TurnLog``
    listening; embedding models off (their load is slow and not what these tests are about)."""
    config = default_config(data_dir)
    for spec in config.tree.walk():
        if spec.name == "llm_gateway":
            spec.cls = TurnGateway
            spec.args = {}
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
    config.tree.children.append(ActorSpec("turn_log", TurnLog, per_tenant=True))
    node = build_agent_node(config, clock=ManualClock())
    await node.start()
    return node
