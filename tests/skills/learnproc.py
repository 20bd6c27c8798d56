"""A node in a child process running the skill workflow, hanging in the procedure step until SIGKILLed.

python -m tests.skills.learnproc <data_dir>
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from minihermes.runtime import ActorSpec, Node, NodeOptions, RequestContext, SupervisorSpec
from minihermes.runtime._loop import run as run_on_loop
from minihermes.runtime.store import open_store
from minihermes.skills import SkillStore, SkillWorkflow
from tests.skills.doubles import SUMS, HistoryAgent, SimGateway

NODE_ID = "learn-node"
USER = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))


def tree(gateway_args: dict[str, object]) -> SupervisorSpec:
    return SupervisorSpec(
        name="root",
        children=[
            ActorSpec("agent", HistoryAgent, virtual=True, key_field="session_id"),
            ActorSpec("llm_gateway", SimGateway, per_tenant=True, args=gateway_args),
            ActorSpec("skill_store", SkillStore, per_tenant=True, args={"semantic": "off"}),
            ActorSpec("skill_workflow", SkillWorkflow, virtual=True, idle_timeout=None),
        ],
    )


async def main(data_dir: str) -> None:
    log = str(Path(data_dir) / "parts.log")
    node = Node(
        open_store("sqlite", data_dir=data_dir),
        tree({"log": log, "hang_on": "procedure"}),
        options=NodeOptions(node_id=NODE_ID),
    )
    await node.start()
    node.send(
        "skill_store",
        "evaluate_for_learning",
        {"session_id": "s1", "turn_id": "turn-1", "user_intent": SUMS, "tool_calls": 3},
        ctx=USER,
    )
    await asyncio.Event().wait()  # until killed (the gateway prints HANGING when the step is reached)


if __name__ == "__main__":
    run_on_loop(main(sys.argv[1]))
