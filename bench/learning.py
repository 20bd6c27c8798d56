"""Learning from experience: task families on the real agent node with the simulated model, first run vs
later runs (LLM iterations and tool calls), with learning on and off side by side.

    .venv/bin/python bench/learning.py            # 4 families x (1 first + 4 later runs)
    .venv/bin/python bench/learning.py --later 2

Each family is a request shape with fresh numbers every run; every run is a new session of the same user on
``build_agent_node(default_config(...))`` (agent, gateway with the simulated provider, tool executor,
skill_store, skill_workflow, ...). After the first run the bench waits until the skill learned from it is
evaluated (the workflow's dry-run replay) and active, then runs the later requests. "off" is the same node
with learning disabled (``learn_min_tool_calls`` out of reach), so its later runs show what the model does
without a skill.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minihermes.agent.app import build_agent_node, default_config
from minihermes.runtime import Node, RequestContext


def user(family: str) -> RequestContext:
    """One user per family: a user's learned skills serve only that user, so families do not help each other."""
    return RequestContext(tenant="bench", principal=f"user-{family}", roles=frozenset({"user"}))


def _n(rng: random.Random) -> int:
    return rng.randint(2, 99)


FAMILIES: dict[str, Callable[[random.Random], str]] = {
    "sums": lambda r: f"what is {_n(r)}+{_n(r)} and {_n(r)}*{_n(r)} and {_n(r)}-{_n(r)}",
    "calc-remember": lambda r: f"calculate {_n(r)}*{_n(r)} and {_n(r)}+{_n(r)} and remember the result",
    "chain-store": lambda r: (
        f"calculate {_n(r)}*{_n(r)}, then {_n(r)}+{_n(r)}, then {_n(r)}-{_n(r)} and store the result as last_calc"
    ),
    "mixed": lambda r: (
        f"what is {_n(r)}+{_n(r)} and remember the result as total and what is {_n(r)}*{_n(r)}"
    ),
}


async def _chat(node: Node, ctx: RequestContext, message: str, session: str) -> dict[str, Any]:
    payload = {"message": message, "session_id": session, "user_id": ctx.principal}
    reply: dict[str, Any] = await node.ask("agent", "chat", payload, ctx=ctx, timeout=120)
    return reply


async def _wait_learned(node: Node, ctx: RequestContext, before: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = await node.ask("skill_store", "list_skills", {"status": "active"}, ctx=ctx)
        if listed["count"] > before:
            return True
        await asyncio.sleep(0.05)
    return False


async def run(learning: bool, later: int, seed: int) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = default_config(Path(tmp) / "data")
        for spec in cfg.tree.walk():
            # Embedding models off: iterations and tool calls do not depend on them, start-up time does.
            if spec.name == "skill_store":
                spec.args["semantic"] = "off"
                if not learning:
                    spec.args["learn_min_tool_calls"] = 10**9
            elif spec.name == "memory":
                spec.args["semantic"] = False
        node = build_agent_node(cfg)
        await node.start()
        try:
            for family, make in FAMILIES.items():
                ctx = user(family)
                first = await _chat(node, ctx, make(rng), f"{family}-0")
                learned = await _wait_learned(node, ctx, 0, timeout=60 if learning else 0.5)
                runs = [await _chat(node, ctx, make(rng), f"{family}-{i}") for i in range(1, later + 1)]
                out[family] = {
                    "first": (first["iterations"], first["tool_calls"]),
                    "later": (
                        statistics.mean(r["iterations"] for r in runs),
                        statistics.mean(r["tool_calls"] for r in runs),
                    ),
                    "learned": learned,
                    "ok": all(r["status"] == "ok" for r in [first, *runs]),
                }
            admin = RequestContext(tenant="bench", principal="admin", roles=frozenset({"admin"}))
            skills = await node.ask("skill_store", "list_skills", {}, ctx=admin)
            out["_skills"] = {"count": skills["count"], "names": [s["name"] for s in skills["skills"]]}
        finally:
            await node.stop(deadline=10)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--later", type=int, default=4, help="later runs per family")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    on = asyncio.run(run(True, args.later, args.seed))
    off = asyncio.run(run(False, args.later, args.seed))
    header = (
        f"{'family':<14} {'learning':>8} {'learned':>8} {'1st iter':>9} {'1st tools':>10} "
        f"{'later iter':>11} {'later tools':>12}"
    )
    print(header)
    print("-" * len(header))
    for family in FAMILIES:
        for name, res in (("off", off), ("on", on)):
            r = res[family]
            print(
                f"{family:<14} {name:>8} {('yes' if r['learned'] else 'no'):>8} {r['first'][0]:>9} {r['first'][1]:>10} "
                f"{r['later'][0]:>11.2f} {r['later'][1]:>12.2f}" + ("" if r["ok"] else "  (a run failed)")
            )
    print(f"skills learned with learning on: {on['_skills']['count']}: {', '.join(on['_skills']['names'])}")


if __name__ == "__main__":
    main()
