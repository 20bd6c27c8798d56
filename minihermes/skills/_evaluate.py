"""The dry-run evaluation of a learned skill: replay its task with and without the procedure.

Both replays run the agent's loop against the tenant's LLM gateway (whatever model is configured; the
simulated one offline), with the same tools offered, but no tool runs for real: the calculator computes
(it is pure and bounded), every other tool gets a canned success. The skill passes when the replay with it
finishes and takes no more LLM iterations, tool calls or failed calls than the one without.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from minihermes.runtime import Host
from minihermes.tools.calculator import CalculatorError, calculate

from ._model import format_skills

BASE_PROMPT = (
    "You are a helpful AI assistant with access to tools.\n"
    "Call a tool when the request needs a computation, a lookup, a stored fact or an action; answer directly "
    "otherwise. When the task is done, answer the user and end the turn."
)
MAX_ITERATIONS = 8


@dataclass(frozen=True, slots=True)
class Replay:
    iterations: int
    tool_calls: int
    errors: int
    finished: bool


def fake_result(name: str, args: dict[str, Any]) -> tuple[Any, bool]:
    """(result, is_error) without touching anything."""
    if name == "calculator":
        try:
            return calculate(str(args.get("expression", ""))).to_dict(), False
        except CalculatorError as e:
            return {"error": {"code": e.code, "message": e.message}}, True
    if name == "memory_store":
        return {"status": "ok", "key": args.get("key"), "stored": True}, False
    if name == "memory_recall":
        return {"found": True, "key": args.get("key"), "value": "(dry run)"}, False
    return {"status": "ok", "dry_run": True}, False


async def offered_tools(host: Host) -> list[dict[str, Any]]:
    if not host.has_actor("tool_executor"):
        from minihermes.tools.builtin import CORE_TOOLSETS

        return [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for toolset in CORE_TOOLSETS
            for t in toolset.tools
        ]
    listing = await host.ask("tool_executor", "list_tools", {})
    return [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "input_schema": t.get("input_schema", {}),
        }
        for t in listing.get("tools", [])
    ]


async def replay(
    host: Host,
    intent: str,
    tools: list[dict[str, Any]],
    skill: dict[str, Any] | None,
    *,
    session_id: str,
    user_id: str,
) -> Replay:
    system = BASE_PROMPT + (f"\n\n{format_skills([skill])}" if skill else "")
    messages: list[dict[str, Any]] = [{"role": "user", "content": intent}]
    calls = errors = 0
    for iteration in range(1, MAX_ITERATIONS + 1):
        reply = await host.ask(
            "llm_gateway",
            "completion",
            {
                "messages": [{"role": "system", "content": system}, *messages],
                "tools": tools,
                "session_id": session_id,
                "user_id": user_id,
            },
            timeout=120,
        )
        response = reply["response"]
        tool_calls = [c for c in response.get("tool_calls") or [] if isinstance(c, dict)]
        messages.append(
            {"role": "assistant", "content": str(response.get("content") or ""), "tool_calls": tool_calls}
        )
        if response.get("stop_reason") != "tool_use" or not tool_calls:
            return Replay(iteration, calls, errors, True)
        for c in tool_calls:
            result, failed = fake_result(str(c.get("name")), c.get("input") or {})
            calls += 1
            errors += int(failed)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": c.get("id", ""),
                    "name": c.get("name"),
                    "content": json.dumps(result),
                    "is_error": failed,
                }
            )
    return Replay(MAX_ITERATIONS, calls, errors, False)


def verdict(base: Replay, with_skill: Replay) -> dict[str, Any]:
    """Not worse: finishes, and no more iterations, tool calls or errors than without the skill."""
    passed = with_skill.finished and (
        not base.finished
        or (
            with_skill.iterations <= base.iterations
            and with_skill.tool_calls <= base.tool_calls
            and with_skill.errors <= base.errors
        )
    )
    return {"passed": passed, "baseline": asdict(base), "with_skill": asdict(with_skill)}
