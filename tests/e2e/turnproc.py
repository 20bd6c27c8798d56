"""A process running the agent, for the test that SIGKILLs it between two tool calls of one turn.

    python -m tests.e2e.turnproc <data_dir>

The LLM is a function of the conversation (so a restarted process answers the same): a user message gets
two tool calls, record(alpha) then block(beta); once tool results are in, it ends the turn. ``record`` logs
each run to <data_dir>/effects.log. ``block`` logs, then waits until <data_dir>/release exists.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from minihermes import MiniHermes
from minihermes.llm import CompletionRequest, ScriptedProvider, register_provider
from minihermes.runtime._loop import run as run_on_loop


def respond(request: CompletionRequest) -> dict[str, Any]:
    if request.messages[-1].role == "tool":
        return {"content": "both steps done", "stop_reason": "end_turn"}
    return {
        "content": "",
        "stop_reason": "tool_use",
        "tool_calls": [
            {"id": "call-record", "name": "record", "input": {"text": "alpha"}},
            {"id": "call-block", "name": "block", "input": {"text": "beta"}},
        ],
    }


register_provider("turnscript", lambda config: ScriptedProvider(respond, config), replace=True)


async def main(data_dir: str) -> None:
    data = Path(data_dir)
    log = data / "effects.log"
    release = data / "release"

    async with MiniHermes(data_dir=data) as mh:

        @mh.tool
        def record(text: str) -> str:
            """Record a step."""
            with log.open("a") as f:
                f.write(f"record {text}\n")
            print("RECORDED", flush=True)
            return f"recorded {text}"

        @mh.tool
        async def block(text: str) -> str:
            """A step that waits to be released."""
            with log.open("a") as f:
                f.write(f"block {text}\n")
            print("BLOCKING", flush=True)
            while not release.exists():  # noqa: ASYNC110 - polls a file the test creates
                await asyncio.sleep(0.01)
            return f"released {text}"

        await mh.register_tool(record)
        await mh.register_tool(block)
        if not (data / "started").exists():
            (data / "started").write_text("1")
            await mh.ask(
                "llm_gateway", "register_provider", {"name": "script", "kind": "turnscript", "model": "t"}
            )
            await mh.ask("llm_gateway", "switch_provider", {"provider": "script"})
            print("CHATTING", flush=True)
            await mh.chat("do the two steps", session_id="s1")
        else:
            # Restarted: the node resumes the interrupted turn by itself; wait for it to finish.
            print("RESTARTED", flush=True)
            while True:
                last = await mh.ask("agent", "last_turn", {"session_id": "s1"})
                if last.get("status") == "ok":
                    print("FINISHED", last["response"], flush=True)
                    break
                await asyncio.sleep(0.02)


if __name__ == "__main__":
    run_on_loop(main(sys.argv[1]))
