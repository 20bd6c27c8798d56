"""Learning from experience: task families on the real agent node with the simulated model, first run vs
later runs (LLM iterations and tool calls), with learning on and off side by side.

    .venv/bin/python bench/learning.py            # 4 families x (1 first + 4 later runs)
    .venv/bin/python bench/learning.py --later 2
    .venv/bin/python bench/learning.py --min-coverage 0   # matching without a threshold

Each family is a request shape with fresh numbers every run; every run is a new session of the same user on
``build_agent_node(default_config(...))`` (agent, gateway with the simulated provider, tool executor,
skill_store, skill_workflow, ...). After the first run the bench waits until the skill learned from it is
evaluated (the workflow's dry-run replay) and active, then runs the later requests. "off" is the same node
with learning disabled (``learn_min_tool_calls`` out of reach), so its later runs show what the model does
without a skill.

With learning on, each family's user then sends one unrelated three-step file request (write a file, read
it, list the files; file writes allowed for the bench): "used" is how many turns followed the family's skill
(its ``uses``: the later runs, if each followed it), "ignored" how many were given it and did something else,
and "own skill" whether the unrelated turn was learned as a skill of its own (a candidate: file tools wait
for an admin's approval) rather than blocked by the family's skill.
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

from minihermes.app import build_agent_node, default_config
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


UNRELATED = "write the result '{n} chargers' to trip{n}.txt, then read trip{n}.txt, then list the files"


async def _wait_learned(
    node: Node, ctx: RequestContext, before: int, timeout: float = 60, status: str = "active"
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = await node.ask("skill_store", "list_skills", {"status": status}, ctx=ctx)
        if listed["count"] > before:
            return True
        await asyncio.sleep(0.05)
    return False


async def run(
    learning: bool, later: int, seed: int, min_coverage: float | None = None
) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = default_config(Path(tmp) / "data")
        for spec in cfg.tree.walk():
            # Embedding models off: iterations and tool calls do not depend on them, start-up time does.
            if spec.name == "skill_store":
                spec.args["semantic"] = "off"
                if min_coverage is not None:
                    spec.args["min_match_coverage"] = min_coverage
                if not learning:
                    spec.args["learn_min_tool_calls"] = 10**9
            elif spec.name == "memory":
                spec.args["semantic"] = False
        node = build_agent_node(cfg)
        await node.start()
        admin = RequestContext(tenant="bench", principal="admin", roles=frozenset({"admin"}))
        await node.ask(
            "guardrails", "set_policy", {"tool_name": "write_file", "decision": "allow"}, ctx=admin
        )
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
                if learned:
                    other = await _chat(node, ctx, UNRELATED.format(n=_n(rng)), f"{family}-unrelated")
                    own = other["status"] == "ok" and await _wait_learned(node, ctx, 0, 60, "candidate")
                    [skill] = (await node.ask("skill_store", "list_skills", {"status": "active"}, ctx=ctx))[
                        "skills"
                    ]
                    out[family] |= {"used": skill["uses"], "ignored": skill.get("ignored", 0), "own": own}
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
    parser.add_argument(
        "--min-coverage", type=float, default=None, help="skill_store min_match_coverage (default: its own)"
    )
    args = parser.parse_args()
    on = asyncio.run(run(True, args.later, args.seed, args.min_coverage))
    off = asyncio.run(run(False, args.later, args.seed, args.min_coverage))
    header = (
        f"{'family':<14} {'learning':>8} {'learned':>8} {'1st iter':>9} {'1st tools':>10} "
        f"{'later iter':>11} {'later tools':>12} {'used':>5} {'ignored':>8} {'own skill':>10}"
    )
    print(header)
    print("-" * len(header))
    for family in FAMILIES:
        for name, res in (("off", off), ("on", on)):
            r = res[family]
            used = (
                f"{r['used']:>5} {r['ignored']:>8} {('yes' if r['own'] else 'no'):>10}"
                if "used" in r
                else f"{'-':>5} {'-':>8} {'-':>10}"
            )
            print(
                f"{family:<14} {name:>8} {('yes' if r['learned'] else 'no'):>8} {r['first'][0]:>9} {r['first'][1]:>10} "
                f"{r['later'][0]:>11.2f} {r['later'][1]:>12.2f} {used}"
                + ("" if r["ok"] else "  (a run failed)")
            )
    print(f"skills learned with learning on: {on['_skills']['count']}: {', '.join(on['_skills']['names'])}")


if __name__ == "__main__":
    main()
