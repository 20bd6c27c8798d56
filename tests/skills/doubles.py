"""Test doubles for the skill workflow: an agent with a fixed history and a gateway over the simulated model.

The gateway answers with ``SimulatedProvider`` (what the default gateway uses) and logs which extraction part
each request was for; ``hang_on`` makes it block forever on one part (a crash test kills the process there).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from minihermes.llm import CompletionRequest, SimulatedProvider
from minihermes.runtime import GenServer, NotFound, call

SUMS = "what is 2+2 and 3*3 and 5-1"


def sums_history(intent: str = SUMS) -> list[dict[str, Any]]:
    calls = [("c1", "2 + 2", "4"), ("c2", "3 * 3", "9"), ("c3", "5 - 1", "4")]
    out: list[dict[str, Any]] = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    out.append({"role": "user", "content": intent})
    for cid, expr, value in calls:
        out.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": cid, "name": "calculator", "input": {"expression": expr}}],
            }
        )
        out.append(
            {
                "role": "tool",
                "tool_call_id": cid,
                "name": "calculator",
                "content": json.dumps({"result": value}),
                "is_error": False,
            }
        )
    out.append({"role": "assistant", "content": "2 + 2 = 4. 3 x 3 = 9. 5 - 1 = 4.", "tool_calls": []})
    return out


class HistoryAgent(GenServer):
    """``agent/<session>``: get_history from args["histories"][session] (or the sums turn)."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.session = actor_id.rpartition("/")[2]
        self.histories = args.get("histories") or {}

    @call
    def get_history(self, session_id: str = "") -> dict[str, Any]:
        return {
            "status": "ok",
            "session_id": self.session,
            "messages": self.histories.get(self.session, sums_history()),
        }


def part_of(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1].get("content", ""))
    for part, mark in (
        ("name", 'Give {"name"'),
        ("procedure", 'Give {"procedure"'),
        ("triggers", 'Give {"triggers"'),
    ):
        if mark in text:
            return part
    return "other"


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:  # a few bytes, once per request: fine on the loop in a test double
        f.write(line + "\n")


class SimGateway(GenServer):
    """Args: ``log`` (a file: one line per request's part), ``hang_on`` (a part to block on)."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.model = SimulatedProvider()
        self.log = args.get("log")
        self.hang_on = args.get("hang_on")
        self.parts: list[str] = []
        self.overrides: dict[str, str] = {}

    @call
    async def completion(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kw: Any
    ) -> Any:
        if self.overrides.get(kw.get("session_id", "")) == "cheap":
            merged = {"procedure": "1. calculator: evaluate every expression in the request, all at once"}
            return {
                "status": "ok",
                "response": {"content": json.dumps(merged), "stop_reason": "end_turn", "tool_calls": []},
            }
        part = part_of(messages)
        self.parts.append(part)
        if self.log:
            _append(self.log, part)
        if part == self.hang_on:
            print(f"HANGING {part}", flush=True)
            await asyncio.Event().wait()
        done = await self.model.complete(CompletionRequest(messages=messages, tools=tools or []))
        return {"status": "ok", "response": done.model_dump()}

    @call
    def switch_provider(self, provider: str, model: str = "", session_id: str = "") -> dict[str, Any]:
        """Only the provider "cheap" is registered here; its session answers merges (see completion)."""
        if provider != "cheap":
            raise NotFound(f"provider '{provider}' is not registered", field="provider")
        self.overrides[session_id] = provider
        return {"status": "ok", "provider": provider, "session_id": session_id}

    @call
    def get_parts(self) -> list[str]:
        return list(self.parts)
